// A profile's max_inflight, the concurrency bound of its replicas: validated in the catalog with
// an error at its own path, carried to the router with each endpoint (and in what tells one
// endpoint list from another), and accepted by the router thread's schema.

import { describe, expect, test } from "bun:test";
import { endpoints, endpointsFingerprint } from "../../src/control/projections";
import { catalogPath, checkCatalogFile } from "../../src/protocol/catalog";
import { ToRouter } from "../../src/protocol/router-link";
import { model, snapshot } from "../helpers/fleet";

const profile = { name: "default", engine: "vllm" as const, gpu_class: "H100-80GB" };
const lines = (body: { models: unknown[] }) => checkCatalogFile(body).issues.map((i) => `${catalogPath(i.path, body.models)}: ${i.message}`);

describe("max_inflight", () => {
  test("an integer from 1 to 100000; anything else is named at its path with what it may be", () => {
    expect(lines({ models: [{ name: "m", profiles: [{ ...profile, max_inflight: 8 }] }] })).toEqual([]);
    expect(lines({ models: [{ name: "m", profiles: [{ ...profile, max_inflight: 0 }] }] })).toEqual(["models[m].profiles[0].max_inflight: must be at least 1 (leave it out for no bound)"]);
    expect(lines({ models: [{ name: "m", profiles: [{ ...profile, max_inflight: 2.5 }] }] })).toEqual(["models[m].profiles[0].max_inflight: must be a whole number of requests, 1 to 100000"]);
    expect(lines({ models: [{ name: "m", profiles: [{ ...profile, max_inflight: "8" }] }] })).toEqual(["models[m].profiles[0].max_inflight: must be a whole number of requests, 1 to 100000"]);
    expect(lines({ models: [{ name: "m", profiles: [{ ...profile, max_inflight: 100_001 }] }] })).toEqual(["models[m].profiles[0].max_inflight: may be at most 100000"]);
  });

  test("carried with each endpoint of the profile, absent without it; a change of it is a new endpoint list", () => {
    const fleet = (extra: object) =>
      snapshot({ nodes: [{ name: "n1", gpus: ["H100-80GB"] }], models: [model({ name: "m", profiles: [{ ...profile, gpus: 1, ...extra }] })], replicas: [{ id: "r1", model: "m", shards: [{ node: "n1", gpus: [0] }] }] });
    const bounded = endpoints(fleet({ max_inflight: 4 }), () => null);
    const free = endpoints(fleet({}), () => null);
    expect(bounded[0]!.max_inflight).toBe(4);
    expect("max_inflight" in free[0]!).toBe(false);
    expect(endpointsFingerprint(bounded)).not.toBe(endpointsFingerprint(free));
    expect(endpointsFingerprint(bounded)).not.toBe(endpointsFingerprint(endpoints(fleet({ max_inflight: 5 }), () => null)));
  });

  test("the router thread's schema keeps it", () => {
    const msg = ToRouter.parse({ type: "endpoints", keys: ["r1"], changed: [{ id: "r1", url: "http://x", models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0, max_inflight: 4 }] });
    expect(msg.type === "endpoints" && msg.changed[0]!.max_inflight).toBe(4);
  });
});
