// An SGLang replica with data parallelism, from the catalog to the router's choice: the control
// plane's endpoint list carries the replica's layout (read off its profile's args), it crosses to
// the router's own thread, and the router's poller adds up the DP groups of an exposition whose
// series are told apart by tp_rank alone. The replica's two groups wait 4 and 1 requests (5 in
// all, over the balancer's queueHigh of 4): it is passed over for an idle replica. Read as
// mirrors of one group (4) it would not be, and would get about half of the requests.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import pino from "pino";
import { RouterLink } from "../../src/app/router-thread";
import { catalog, endpoints } from "../../src/control/projections";
import { realScheduler } from "../../src/lib/scheduler";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import { readFixture } from "../fixtures/read";
import { model, snapshot } from "../helpers/fleet";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { until } from "../helpers/until";
import { RECONCILE_DEFAULTS } from "../helpers/control-settings";

const EXPOSITION = readFixture("metrics/sglang/sglang-dp-attention-dp2-tp4-tp-rank-only__constructed.prom");
const H = "H100-80GB";

let idle: FakeEngine;
const cleanups: (() => unknown)[] = [];
beforeAll(async () => {
  idle = await startFakeEngine({ models: ["m"], ttftMs: 0, tokenDelayMs: 0, tokens: 2 });
});
afterAll(() => idle.stop());
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** An SGLang server as the router sees it: the exposition on /metrics, a short answer to a chat, both counted. */
function sglangStandIn() {
  const seen = { metrics: 0, chats: 0 };
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(req) {
      const path = new URL(req.url).pathname;
      if (path === "/metrics") {
        seen.metrics++;
        return new Response(EXPOSITION, { headers: { "content-type": "text/plain; version=0.0.4" } });
      }
      seen.chats++;
      const body = { id: "c1", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };
      return Response.json(body);
    },
  });
  cleanups.push(() => server.stop(true));
  return { url: `http://127.0.0.1:${server.port}`, seen };
}

describe("an SGLang replica with data parallelism, through the router's thread", () => {
  test("its DP groups' queues add up (5 waiting, not 4): the router passes it over for an idle replica", async () => {
    const sg = sglangStandIn();
    const s = snapshot({
      nodes: [{ name: "n1", gpus: [H, H, H, H] }, { name: "n2", gpus: [H] }],
      models: [
        model({
          name: "m",
          profiles: [
            { name: "default", engine: "sglang", gpu_class: H, gpus: 4, args: ["--enable-dp-attention", "--dp-size", "2"] },
            { name: "small", engine: "vllm", gpu_class: H, gpus: 1 },
          ],
        }),
      ],
      replicas: [
        { id: "r-sglang", model: "m", shards: [{ node: "n1", gpus: [0, 1, 2, 3] }] },
        { id: "r-idle", model: "m", shards: [{ node: "n2", gpus: [0] }] },
      ],
    });
    s.replicas[0]!.endpoint = sg.url;
    s.replicas[1]!.endpoint = idle.url;
    s.replicas[1]!.profile = "small";
    const eps = endpoints(s, () => null);
    expect(eps.find((e) => e.id === "r-sglang")!.data_parallel).toEqual({ dp: 2, tp: 4, dp_attention: true });

    const link = new RouterLink({
      data: { ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 100, logLevel: "silent", logOutput: { format: "json", color: false }, listener: {} },
      demand: { requestModel: () => undefined },
      log: pino({ level: "silent" }),
      scheduler: realScheduler,
    });
    const { port } = await link.start();
    cleanups.push(() => link.stop());
    link.setCatalog(catalog(s, RECONCILE_DEFAULTS));
    link.setEndpoints(eps);
    // Rounds never overlap, so a second poll of the replica means the first one's figures are in.
    await until("the router to have polled the SGLang replica twice", () => sg.seen.metrics >= 2);

    const served = idle.stats().requests;
    for (let i = 0; i < 16; i++) {
      const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: `conversation ${i}: ${"x".repeat(i * 7)}` }] }),
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    expect(sg.seen.chats).toBe(0);
    expect(idle.stats().requests - served).toBe(16);
  }, 30_000);
});
