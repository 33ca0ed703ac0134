// An agent refused at join for its protocol (a control plane of another protocol range answers
// 403 protocol_mismatch) stops with status 1 and says why, naming both versions and what to
// upgrade; it does not retry for ever or start engines. The control plane here is a stand-in on
// 127.0.0.1 answering as a newer release's would, since this release accepts its own agents.

import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BINARY } from "../helpers/binary";
import { until } from "../helpers/until";
import { scratchDir } from "../helpers/tmp";

const REFUSAL = "agent gpu-9 speaks protocol 2, this control plane speaks 4 (accepts 3–4): upgrade the agent";

describe("an agent refused at join for its protocol", () => {
  const heard: { path: string; protocol: unknown }[] = [];
  const head = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const body = req.method === "POST" ? ((await req.json().catch(() => ({}))) as { protocol?: unknown }) : {};
      heard.push({ path: url.pathname, protocol: body.protocol });
      return Response.json({ error: { code: "protocol_mismatch", message: REFUSAL } }, { status: 403 });
    },
  });
  afterAll(() => head.stop(true));

  test("exits 1, saying the control plane's reason, after stating its own protocol in the heartbeat", async () => {
    const dir = scratchDir("llmgw-refused-");
    const p = Bun.spawn(
      [BINARY, "agent", "--server", `http://127.0.0.1:${head.port}`, "--token", "t".repeat(40), "--name", "gpu-9", "--address", "127.0.0.1", "--simulate", "H100-80GB:1", "--logs-listen", "127.0.0.1:0", "--state-dir", join(dir, "state")],
      { cwd: dir, env: { PATH: process.env.PATH ?? "" }, stdout: Bun.file(join(dir, "agent.log")), stderr: Bun.file(join(dir, "agent.stderr")) },
    );
    const code = await Promise.race([p.exited, Bun.sleep(20_000).then(() => "still running" as const)]);
    if (code === "still running") p.kill("SIGKILL");
    expect(code).toBe(1);
    await until("the heartbeat heard", () => heard.length > 0, 1_000);
    expect(heard.some((h) => h.path === "/agent/v1/heartbeat" && h.protocol === 2)).toBe(true);
    const said = readFileSync(join(dir, "agent.log"), "utf8") + readFileSync(join(dir, "agent.stderr"), "utf8");
    expect(said).toContain(REFUSAL);
  }, 30_000);
});
