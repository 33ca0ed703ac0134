// The Responses API through the router, with two fake engines: a request naming a
// previous_response_id goes back to the replica that produced that response (its engine holds
// it), whether the response came whole or streamed; and a response id works only for the API key
// that created it: another key's request naming it is refused before any engine sees it.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { Router, type RouterOptions } from "../../src/router/router";
import type { EndpointInfo } from "../../src/protocol/routing";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";

let e1: FakeEngine;
let e2: FakeEngine;
beforeAll(async () => {
  e1 = await startFakeEngine({ models: ["m"], ttftMs: 0, tokenDelayMs: 0, tokens: 3 });
  e2 = await startFakeEngine({ models: ["m"], ttftMs: 0, tokenDelayMs: 0, tokens: 3 });
});
afterAll(async () => {
  await Promise.all([e1.stop(), e2.stop()]);
});
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

const ep = (id: string, url: string): EndpointInfo => ({ id, url, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0 });
const sha = (s: string) => createHash("sha256").update(s).digest("hex");

function router(opts: Partial<RouterOptions> = {}) {
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, ...opts });
  r.setCatalog([{ name: "m", aliases: [], on_demand: false, pool: "default", created: 1 }]);
  r.setEndpoints([ep("r1", e1.url), ep("r2", e2.url)]);
  r.setApiKeys([
    { name: "alice", sha256: sha("sk-alice"), pool: null },
    { name: "bob", sha256: sha("sk-bob"), pool: null },
  ]);
  const { url } = r.start();
  cleanups.push(() => r.stop());
  return { r, url };
}

interface Turn {
  status: number;
  replica: string | null;
  id: string | undefined;
  error?: { code: string; param: string | null };
}

/** One POST /v1/responses; the response's id from the JSON answer, or from the stream's response.created event. */
async function respond(url: string, body: Record<string, unknown>, key?: string): Promise<Turn> {
  const res = await fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model: "m", ...body }),
  });
  const text = await res.text();
  const replica = res.headers.get("x-llmgw-replica");
  if (res.status !== 200) return { status: res.status, replica, id: undefined, error: (JSON.parse(text) as { error: Turn["error"] }).error };
  if (body.stream === true) {
    const created = text.split("\n").find((l) => l.startsWith("data: ") && l.includes('"response.created"'));
    return { status: 200, replica, id: (JSON.parse(created!.slice(6)) as { response: { id: string } }).response.id };
  }
  return { status: 200, replica, id: (JSON.parse(text) as { id: string }).id };
}

const requests = () => e1.stats().requests + e2.stats().requests;

describe("previous_response_id: affinity", () => {
  for (const stream of [false, true]) {
    test(`a conversation's every turn goes to the replica holding its last response (${stream ? "streamed" : "whole"} answers)`, async () => {
      const { url } = router();
      const seen = new Set<string>();
      for (let c = 0; c < 8; c++) {
        let turn = await respond(url, { input: `conversation ${c}: where do we start?`, stream });
        expect(turn.status).toBe(200);
        const home = turn.replica!;
        seen.add(home);
        for (let t = 0; t < 3; t++) {
          // Only the new message: the engine has the rest. Its own prefix key points anywhere.
          turn = await respond(url, { previous_response_id: turn.id, input: [{ role: "user", content: `turn ${t} of ${c}, about ${"xyz".repeat(t + c)}` }], stream });
          expect(turn.status).toBe(200);
          expect(turn.replica).toBe(home);
        }
      }
      // Conversations started on both replicas: each followed its own.
      expect(seen.size).toBe(2);
    });
  }

  test("without API keys an id the router never saw goes on, unpinned, for the engine to answer", async () => {
    const { url } = router();
    expect((await respond(url, { previous_response_id: "resp_made_elsewhere", input: "hi" })).status).toBe(200);
  });
});

describe("previous_response_id: scoped to the key that created it", () => {
  test("another key's id is refused as not found, before any engine sees it; the creator's works", async () => {
    const { url } = router({ requireApiKey: true });
    const first = await respond(url, { input: "alice's secret plans" }, "sk-alice");
    expect(first.status).toBe(200);
    const before = requests();
    const stolen = await respond(url, { previous_response_id: first.id, input: "what did she say?" }, "sk-bob");
    expect(stolen.status).toBe(404);
    expect(stolen.error).toMatchObject({ code: "previous_response_not_found", param: "previous_response_id" });
    expect(requests()).toBe(before);
    const own = await respond(url, { previous_response_id: first.id, input: "go on" }, "sk-alice");
    expect(own.status).toBe(200);
    expect(own.replica).toBe(first.replica);
  });

  test("with API keys an id the router does not know is refused alike, whoever asks", async () => {
    const { url } = router({ requireApiKey: true });
    const before = requests();
    const unknown = await respond(url, { previous_response_id: "resp_never_made", input: "hi" }, "sk-alice");
    expect(unknown.status).toBe(404);
    expect(unknown.error?.code).toBe("previous_response_not_found");
    expect(requests()).toBe(before);
  });
});
