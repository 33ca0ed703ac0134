// The README's production path, followed with the compiled binary: copy the binary to a head
// node, start serve (the unit `install serve` would run), read the join command it offers, run
// it on each GPU node (simulated here), apply a catalog, and `./llmgw status` shows the model
// ready. Each "machine" is its own directory with its own copy of the binary.

import { afterAll, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Summary } from "../../src/protocol/views";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";

const procs: Bun.Subprocess[] = [];
afterAll(async () => {
  for (const p of procs.reverse()) p.kill("SIGTERM");
  await Promise.all(procs.map((p) => p.exited));
});


test("head node, join command, two GPU nodes, a catalog, status", async () => {
  const { dir: head, bin } = scratchWithBinary();
  // 1. The unit install would write runs `llmgw serve --data-dir …`; here it runs in the foreground.
  expect(run(bin, ["install", "serve", "--print"], { cwd: head }).stdout).toContain(`ExecStart=${bin} serve --data-dir /var/lib/llmgw`);
  const base = freePort(900);
  const serve = await startServe(bin, head, ["--engine-base-port", String(base), "--heartbeat-interval", "500ms"]);
  procs.push(serve.proc);

  // 2. The join command, as printed on the head node.
  const jc = run(bin, ["join-command", "--address", "127.0.0.1", "--fabric", "rack-1"], { cwd: head });
  expect(jc.code).toBe(0);
  // It names the token file, never the token; on this one machine the node finds the file at the same path.
  const line = /^\s*(llmgw agent .*)$/m.exec(jc.stdout)![1]!.trim();
  expect(line).toMatch(/^llmgw agent --server http:\/\/127\.0\.0\.1:\d+ --token-file \S+join\.token --fabric rack-1$/);
  expect(jc.stdout).not.toContain(serve.joinToken);

  // 3. Run it on each GPU node (own directory, own copy of the binary), plus what the node is.
  for (const [name, gpus] of [["gpu-a", "L40S:2"], ["gpu-b", "L40S:2"]] as const) {
    const node = join(head, "..", `${name}-${Date.now()}`);
    mkdirSync(node, { recursive: true });
    copyFileSync(bin, join(node, "llmgw"));
    const args = line.split(" ").slice(1);
    const p = Bun.spawn([join(node, "llmgw"), ...args, "--name", name, "--address", "127.0.0.1", "--engine-host", "127.0.0.1", "--simulate", gpus, "--state-dir", join(node, "state"), "--log-level", "warn"], {
      cwd: node,
      env: { PATH: process.env.PATH ?? "" },
      stdout: "ignore",
      stderr: "ignore",
    });
    procs.push(p);
  }
  await until("both nodes ready", () => {
    const s = JSON.parse(run(bin, ["status", "-o", "json"], { cwd: head }).stdout) as Summary;
    return s.nodes.ready === 2;
  });

  // 4. A catalog, applied and waited for.
  writeFileSync(join(head, "catalog.yaml"), `models:
  - name: llama-3.1-8b
    aliases: [llama3-8b]
    replicas: {min: 2}
    placement: spread
    profiles:
      - {name: l40s, engine: vllm, gpu_class: L40S, gpus: 1}
`);
  const apply = run(bin, ["apply", "-f", "catalog.yaml", "--wait", "--timeout", "60s"], { cwd: head });
  expect(apply.stderr).toBe("");
  expect(apply.code).toBe(0);

  // 5. ./llmgw status: the model is there and ready.
  const status = run(bin, ["status"], { cwd: head });
  expect(status.code).toBe(0);
  expect(status.stdout).toContain("2 nodes: 2 ready");
  expect(status.stdout).toMatch(/L40S\s+\[#+\.+\]\s+2\s+2\s+0\s+4/);
  expect(status.stdout).toContain("Replicas  2 ready");
  expect(status.stdout).toContain("1 total · 1 satisfied · 0 short");
  const models = run(bin, ["models"], { cwd: head }).stdout;
  expect(models).toMatch(/llama-3\.1-8b\s+2\/2\s+2\s+2\s+no\s+ok/);
  // And it answers on the OpenAI endpoint.
  const res = await fetch(`${serve.routerUrl}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "llama3-8b", messages: [{ role: "user", content: "hi" }] }) });
  expect(res.status).toBe(200);
}, 90_000);
