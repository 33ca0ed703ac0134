// An SGLang replica's data-parallel layout, from its profile to the router's thread: read off the
// profile's args as the agent launches it (--dp-size in any spelling, --tp-size given or the
// GPUs the agent passes, --enable-dp-attention), put on the replica's endpoint by the control
// plane, kept by the message that carries the endpoint list to the router's thread.

import { describe, expect, test } from "bun:test";
import { endpoints, endpointsFingerprint } from "../../src/control/projections";
import { sglangDataParallel } from "../../src/protocol/engine-layout";
import { ToRouter } from "../../src/protocol/router-link";
import { model, snapshot } from "../helpers/fleet";

const sglang = (args: string[], gpus = 4, nodes = 1) => ({ engine: "sglang", args, gpus, nodes });

describe("sglangDataParallel", () => {
  test("--dp-size, --dp and --data-parallel-size, with = or apart; the last one given wins", () => {
    for (const args of [["--dp-size", "2"], ["--dp=2"], ["--data-parallel-size", "2"], ["--dp", "4", "--dp-size=2"]])
      expect(sglangDataParallel(sglang(args))).toEqual({ dp: 2, tp: 4, dp_attention: false });
  });

  test("TP size: the profile's --tp-size wins over the GPUs × nodes the agent passes", () => {
    expect(sglangDataParallel(sglang(["--dp-size", "2", "--tp-size", "2"]))?.tp).toBe(2);
    expect(sglangDataParallel(sglang(["--dp-size", "2", "--tensor-parallel-size=2"]))?.tp).toBe(2);
    expect(sglangDataParallel(sglang(["--enable-dp-attention", "--dp-size", "4"], 8, 2))).toEqual({ dp: 4, tp: 16, dp_attention: true });
    expect(sglangDataParallel(sglang(["--dp-size", "2", "--tp-size", "two"]))?.tp).toBe(4);
  });

  test("none for one group, for a size that is not a whole number, or for another engine", () => {
    expect(sglangDataParallel(sglang([]))).toBeUndefined();
    expect(sglangDataParallel(sglang(["--dp-size", "1"]))).toBeUndefined();
    expect(sglangDataParallel(sglang(["--dp-size", "1.5"]))).toBeUndefined();
    expect(sglangDataParallel({ engine: "vllm", args: ["--data-parallel-size", "2"], gpus: 2, nodes: 1 })).toBeUndefined();
  });
});

describe("the endpoint of an SGLang replica with data parallelism", () => {
  const fleet = (args: string[]) =>
    snapshot({
      nodes: [{ name: "n1", gpus: ["H100-80GB", "H100-80GB", "H100-80GB", "H100-80GB"] }],
      models: [model({ name: "m", profiles: [{ name: "default", engine: "sglang", gpu_class: "H100-80GB", gpus: 4, args }] })],
      replicas: [{ id: "r1", model: "m", shards: [{ node: "n1", gpus: [0, 1, 2, 3] }] }],
    });

  test("carries the layout; one without it carries none; the fingerprint tells them apart", () => {
    const dp = endpoints(fleet(["--enable-dp-attention", "--dp-size", "2"]), () => null);
    expect(dp[0]!.data_parallel).toEqual({ dp: 2, tp: 4, dp_attention: true });
    const one = endpoints(fleet([]), () => null);
    expect(one[0]!).not.toHaveProperty("data_parallel");
    expect(endpointsFingerprint(dp)).not.toBe(endpointsFingerprint(one));
    expect(endpointsFingerprint(endpoints(fleet(["--dp-size", "2"]), () => null))).not.toBe(endpointsFingerprint(dp));
  });

  test("the router thread's message keeps it (zod would strip a field it does not know), and refuses a malformed one", () => {
    const eps = endpoints(fleet(["--enable-dp-attention", "--dp-size", "2"]), () => null);
    const parsed = ToRouter.parse(JSON.parse(JSON.stringify({ type: "endpoints", keys: ["r1"], changed: eps })));
    expect(parsed.type === "endpoints" && parsed.changed[0]!.data_parallel).toEqual({ dp: 2, tp: 4, dp_attention: true });
    const bad = { ...eps[0]!, data_parallel: { dp: 0, tp: 4, dp_attention: true } };
    expect(ToRouter.safeParse({ type: "endpoints", keys: ["r1"], changed: [bad] }).success).toBe(false);
  });
});
