// A multi-node vLLM profile on nodes whose vLLM predates multi-node serving, over real HTTP: two
// nodes in one fabric report vLLM 0.10.2 in their heartbeats, one of them is busy. The model can
// never run there, and every answer says so first, naming the version, the nodes and what is
// needed, before anything about capacity: explain, the models table and summary (`status`), the
// dry run that `apply` shows, the placement event, and the router's answer to a client; and the
// CLI's renderings of those answers (`llmgw explain`, `status`, `apply`).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { placementLines } from "../../src/cli/apply";
import { renderExplanation } from "../../src/cli/explain";
import { renderStatus } from "../../src/cli/status";
import type { ApplyDryRun, EventView, Explanation, ModelView, Summary } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";
import { until } from "../helpers/until";

const H = "H100-80GB";
const NEVER = "vLLM 0.10.2 on node-a, node-b has no multi-node serving (needs 0.12 or newer)";
const small = { name: "small", replicas: { min: 1, max: 1 }, profiles: [{ name: "one", engine: "vllm", gpu_class: H, gpus: 1 }] };
const big = { name: "big", replicas: { min: 1, max: 1 }, profiles: [{ name: "ib", engine: "vllm", gpu_class: H, gpus: 8, nodes: 2 }] };

let s: TestServer;
beforeAll(async () => {
  s = await testServer();
  for (const name of ["node-a", "node-b"]) {
    const hb = { ...heartbeat({ name, gpus: Array.from({ length: 8 }, () => H), fabrics: ["ib-a"] }), engines: [{ engine: "vllm", version: "0.10.2", error: null }] };
    expect((await s.agent(hb)).status).toBe(200);
  }
  // One node busy: a one-GPU model takes a card of it.
  expect((await s.admin("/api/v1/apply", { method: "POST", body: JSON.stringify({ models: [small] }) })).status).toBe(200);
  await s.tick();
  expect((await s.peek.replicas()).filter((r) => r.model === "small")).toHaveLength(1);
  expect((await s.admin("/api/v1/apply", { method: "POST", body: JSON.stringify({ models: [small, big] }) })).status).toBe(200);
  await s.tick();
});
afterAll(() => s.stop());

describe("a nodes: 2 vLLM profile where every node runs vLLM 0.10.2, one node busy", () => {
  test("explain: never, the version, the nodes and what is needed first", async () => {
    const e = (await (await s.admin("/api/v1/models/big/explain")).json()) as Explanation;
    expect(e.status).toBe("never");
    expect(e.summary).toStartWith(`big can never fit on this fleet: ${NEVER}`);
    expect(e.profiles[0]!.reason).toStartWith(`can never fit on this fleet: ${NEVER}`);
    expect(renderExplanation(e, { color: false })).toContain(`big can never fit on this fleet: ${NEVER}`);
  });

  test("status: the models table and the summary say never, with the same reason", async () => {
    const m = ((await (await s.admin("/api/v1/models")).json()) as ModelView[]).find((x) => x.name === "big")!;
    expect(m.never_fits).toBe(true);
    expect(m.reason).toStartWith(`can never fit on this fleet: ${NEVER}`);
    const sum = (await (await s.admin("/api/v1/summary")).json()) as Summary;
    expect(sum.unplaceable_reasons.big).toStartWith(`can never fit on this fleet: ${NEVER}`);
    // What `llmgw status` prints: the version and the nodes come first, however a narrow terminal cuts the rest.
    expect(renderStatus(sum, { color: false })).toContain("can never fit on this fleet: vLLM 0.10.2 on node-a, node-b");
  });

  test("apply --dry-run (what apply prints): never with the reason, nothing placed", async () => {
    const res = await s.admin("/api/v1/apply?dry_run=1", { method: "POST", body: JSON.stringify({ models: [small, { ...big, replicas: { min: 1, max: 2 } }] }) });
    const body = (await res.json()) as ApplyDryRun;
    const r = body.results.find((x) => x.name === "big")!;
    expect(r.verdict).toBe("never");
    expect(r.placements).toEqual([]);
    expect(r.reason).toStartWith(`can never fit on this fleet: ${NEVER}`);
    expect(placementLines(body).find((l) => l.startsWith("model/big "))).toStartWith(`model/big can never fit on this fleet: ${NEVER}`);
  });

  test("the placement event names the version first, not the busy node", async () => {
    const events = (await (await s.admin("/api/v1/events?limit=1000")).json()) as (EventView & { kind: string })[];
    expect(events.find((e) => e.kind === "model.unplaceable" && e.subject === "model/big")!.message).toBe(`cannot place big: ${NEVER}`);
  });

  test("a client asking for it is told it can never run, and why", async () => {
    const ask = () => fetch(`${s.routerUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "big", messages: [{ role: "user", content: "hi" }] }) });
    const body = await until("the router to know the model's reason", async () => {
      const res = await ask();
      const b = (await res.json()) as { error?: { message: string } };
      return res.status >= 400 && b.error?.message.includes(NEVER) ? b : undefined;
    });
    expect(body.error!.message).toStartWith(`'big' can never fit on this fleet: ${NEVER}`);
  });
});
