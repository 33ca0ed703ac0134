// The compiled binary alone, copied into an empty directory: `serve` starts with no drizzle/
// or node_modules beside it, takes heartbeats over plain HTTP, and the CLI beside it needs no
// flags to print what was sent.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Summary } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { heartbeatSender, run, scratchWithBinary, startServe } from "../helpers/binary";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  serve = await startServe(bin, dir);
});
afterAll(async () => {
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
  rmSync(dir, { recursive: true, force: true });
});

let send: ReturnType<typeof heartbeatSender> | undefined;
const post = (body: { node: string; address: string }) => (send ??= heartbeatSender(serve))(body);

describe("compiled binary", () => {
  test("version is stamped in", () => {
    const r = run(bin, ["version"], { cwd: dir });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^llmgw \d+\.\d+\.\d+ \(commit ([0-9a-f]{40}(-dirty)?|unknown), linux-(x64|arm64), protocol \d+\)\n$/);
  });

  test("heartbeats go in; `status` beside the server prints their summary with no flags", async () => {
    expect((await post(heartbeat({ name: "gpu-01", fabrics: ["ib-a"], gpus: ["H100-80GB", "H100-80GB", "H100-80GB", "H100-80GB"], unhealthy: [3], models: ["llama-3.1-8b"] }))).status).toBe(200);
    expect((await post(heartbeat({ name: "gpu-02", fabrics: ["ib-a"], gpus: ["A100-80GB/3g.40gb", "A100-80GB/3g.40gb", "A100-80GB"] }))).status).toBe(200);
    expect((await post(heartbeat({ name: "gpu-03", fabrics: ["ib-b"], gpus: ["L40S", "L40S"] }))).status).toBe(200);

    const r = run(bin, ["status"], { cwd: dir });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("3 nodes: 3 ready");
    expect(r.stdout).toMatch(/H100-80GB\s+\[#*x+\.+\]\s+0\s+3\s+1\s+4/);
    expect(r.stdout).toMatch(/A100-80GB\/3g\.40gb\s+\[\.+\]\s+0\s+2\s+0\s+2/);
    expect(r.stdout).toMatch(/ib-a\s+2\s+1\s+1\s+1/);
    expect(r.stdout).not.toContain("\x1b["); // NO_COLOR / piped: plain characters

    const j = run(bin, ["status", "-o", "json"], { cwd: dir });
    const s = JSON.parse(j.stdout) as Summary;
    expect(s.nodes.total).toBe(3);
    expect(s.gpus.find((g) => g.class === "H100-80GB")).toEqual({ class: "H100-80GB", total: 4, used: 0, unhealthy: 1 });
    expect(s.fabrics.map((f) => [f.fabric, f.largest_free_block])).toEqual([["ib-a", 1], ["ib-b", 1]]);
    expect(JSON.stringify(s)).not.toContain(serve.adminToken);
  });

  test("apply a catalog, list models, cordon a node, all from the CLI", () => {
    writeFileSync(
      join(dir, "catalog.yaml"),
      "models:\n  - name: llama-3.1-8b\n    aliases: [llama3-8b]\n    replicas: {min: 1}\n    profiles:\n      - {name: h100, engine: vllm, gpu_class: H100-80GB}\n",
    );
    const a = run(bin, ["apply", "-f", "catalog.yaml"], { cwd: dir });
    expect(a.stdout).toBe("model/llama-3.1-8b created\n");
    const m = run(bin, ["models"], { cwd: dir });
    // Placed at once on gpu-01, whose (curl) agent will never start it: short, not yet stuck.
    expect(m.stdout).toMatch(/llama-3\.1-8b\s+0\/1\s+1\s+1\s+no\s+(short|unplaceable)/);
    expect(run(bin, ["cordon", "gpu-03"], { cwd: dir }).stdout).toBe("node/gpu-03 cordoned\n");
    expect(run(bin, ["nodes"], { cwd: dir }).stdout).toMatch(/gpu-03\s+cordoned/);
    const bad = run(bin, ["cordon", "nope"], { cwd: dir });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe('error: node "nope" not found\n');
  });

  test("models delete removes a model (its aliases with it); a second delete is not found; -o json answers JSON", () => {
    writeFileSync(join(dir, "extra.yaml"), "models:\n  - name: scratch-model\n    aliases: [scratch]\n    replicas: {min: 0}\n    profiles:\n      - {name: p, engine: vllm, gpu_class: H100-80GB}\n");
    expect(run(bin, ["apply", "-f", "extra.yaml"], { cwd: dir }).code).toBe(0);
    const del = run(bin, ["models", "delete", "scratch-model"], { cwd: dir });
    expect(del).toMatchObject({ code: 0, stdout: "model/scratch-model deleted\n" });
    expect(run(bin, ["models"], { cwd: dir }).stdout).not.toContain("scratch-model");
    const again = run(bin, ["models", "delete", "scratch-model", "-o", "json"], { cwd: dir });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("scratch-model");
    expect(run(bin, ["models", "delete"], { cwd: dir }).code).toBe(2);
    // The events say so: how long ago in the table, the timestamp and the subject with -o wide.
    const table = run(bin, ["events", "-n", "5"], { cwd: dir }).stdout;
    expect(table).toMatch(/\d+s ago\s+model\.deleted\s+/);
    const wide = run(bin, ["events", "-n", "5", "-o", "wide"], { cwd: dir });
    expect(wide.code).toBe(0);
    expect(wide.stdout).toMatch(/\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+model\.deleted\s+model\/scratch-model\s+/);
  });

  test("describe model, node and replica: status, profiles, placement, recent events; json too; unknown names exit 1", () => {
    const m = run(bin, ["describe", "model", "llama3-8b"], { cwd: dir });
    expect(m.code).toBe(0);
    expect(m.stdout).toMatch(/^Name: +llama-3\.1-8b \(aliases: llama3-8b\)/);
    expect(m.stdout).toMatch(/Profiles:\n +NAME +ENGINE +GPU CLASS[^\n]*\n +h100 +vllm +H100-80GB +1 +1 +0/);
    expect(m.stdout).toMatch(/Replicas:\n +ID +MODEL[^\n]*\n +r-[0-9a-f]+ +llama-3\.1-8b +h100 +\w+ +gpu-0\d:\d/);
    expect(m.stdout).toMatch(/Events:\n[^\n]*ago +model\.created/);
    const id = /\b(r-[0-9a-f]+)\b/.exec(m.stdout)![1]!;
    const r = run(bin, ["describe", "replica", id], { cwd: dir });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`ID:         ${id}`);
    expect(r.stdout).toMatch(/Placement: +gpu-0\d:\d/);
    const node = /Placement: +(gpu-0\d)/.exec(r.stdout)![1]!;
    const n = run(bin, ["describe", "node", node], { cwd: dir });
    expect(n.code).toBe(0);
    expect(n.stdout).toContain(`Name:       ${node}`);
    expect(n.stdout).toContain(id);
    expect(n.stdout).toMatch(/Events:\n(.*\n)*.*ago +node\.registered/);
    const json = JSON.parse(run(bin, ["describe", "model", "llama-3.1-8b", "-o", "json"], { cwd: dir }).stdout) as { model: { name: string }; replicas: unknown[]; events: unknown[] };
    expect(json.model.name).toBe("llama-3.1-8b");
    expect(json.replicas.length).toBeGreaterThan(0);
    expect(run(bin, ["describe", "replica", "r-nope"], { cwd: dir })).toMatchObject({ code: 1, stderr: 'error: replica "r-nope" not found (`llmgw replicas` lists them)\n' });
    expect(run(bin, ["describe", "model", "nope"], { cwd: dir }).code).toBe(1);
    expect(run(bin, ["describe", "gpu", "x"], { cwd: dir }).code).toBe(2);
  });

  test("-w/--watch re-renders a table until interrupted, then exits 0; with -o json it is refused", async () => {
    const p = Bun.spawn([bin, "nodes", "-w", "--interval", "0.3"], { cwd: dir, stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
    const reader = p.stdout.getReader();
    let out = "";
    const dec = new TextDecoder();
    while ((out.match(/Every 0\.3s: llmgw nodes/g) ?? []).length < 2) {
      const { value, done } = await reader.read();
      if (done) break;
      out += dec.decode(value);
    }
    p.kill("SIGINT");
    expect(await p.exited).toBe(0);
    // Piped: each view follows the last, stamped, the table whole each time.
    expect((out.match(/NAME +STATE/g) ?? []).length).toBeGreaterThanOrEqual(2);
    expect(out).not.toContain("\x1b[");
    const json = run(bin, ["models", "-w", "-o", "json"], { cwd: dir });
    expect(json.code).toBe(2);
    expect(json.stderr).toContain("-w/--watch shows a table");
    expect(run(bin, ["replicas", "--interval", "1"], { cwd: dir }).code).toBe(2);
  });

  test("apply says at once what can never fit, with the nearest class; --wait gives up at once, exit 1", () => {
    writeFileSync(join(dir, "typo.yaml"), "models:\n  - name: typo-model\n    profiles:\n      - {name: p, engine: vllm, gpu_class: h100-80gb}\n");
    const a = run(bin, ["apply", "-f", "typo.yaml"], { cwd: dir });
    expect(a.code).toBe(0);
    expect(a.stdout).toBe(
      "model/typo-model created\nmodel/typo-model can never fit on this fleet: no node has h100-80gb GPUs (did you mean H100-80GB?); waiting will not help (add such nodes, or change the model's profiles)\n",
    );
    writeFileSync(join(dir, "huge.yaml"), "models:\n  - name: huge-model\n    profiles:\n      - {name: p, engine: vllm, gpu_class: H100-80GB, gpus: 16}\n");
    const started = Date.now();
    const w = run(bin, ["apply", "-f", "huge.yaml", "--wait"], { cwd: dir });
    expect(w.code).toBe(1);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(w.stderr).toContain("huge-model can never fit on this fleet: no node has 16 H100-80GB GPUs (the largest has 4)");
    const m = run(bin, ["models", "huge-model", "-o", "json"], { cwd: dir });
    expect(JSON.parse(m.stdout)).toMatchObject({ never_fits: true, unplaceable: true });
    for (const name of ["typo-model", "huge-model"]) expect(run(bin, ["models", "delete", name], { cwd: dir }).code).toBe(0);
  });

  test("apply says which models cannot be placed now, why, and that waiting can help", () => {
    // gpu-01 has 3 healthy H100-80GB: two replicas of 3 GPUs each can never both be there now.
    writeFileSync(join(dir, "wide.yaml"), "models:\n  - name: wide-model\n    replicas: {min: 2}\n    profiles:\n      - {name: p, engine: vllm, gpu_class: H100-80GB, gpus: 3}\n");
    const a = run(bin, ["apply", "-f", "wide.yaml"], { cwd: dir });
    expect(a.code).toBe(0);
    const lines = a.stdout.trim().split("\n");
    expect(lines[0]).toBe("model/wide-model created");
    expect(lines[1]).toStartWith("model/wide-model cannot be placed now");
    expect(lines[1]).toContain("H100-80GB");
    expect(lines[1]).toContain("waiting can help");
    expect(lines[1]).not.toContain("can never fit");
    expect(run(bin, ["models", "delete", "wide-model"], { cwd: dir }).code).toBe(0);
  });

  test("an unknown command suggests the nearest one, and exits 2", () => {
    const r = run(bin, ["nods"], { cwd: dir });
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('error: unknown command "nods"; did you mean `llmgw nodes`? (run `llmgw --help` for the list)\n');
    const far = run(bin, ["frobnicate"], { cwd: dir });
    expect(far.code).toBe(2);
    expect(far.stderr).not.toContain("did you mean");
  });

  test("a bad catalog is refused with the field's path; nothing changes", () => {
    writeFileSync(join(dir, "bad.yaml"), "models:\n  - name: x\n    profiles:\n      - {name: p, engine: tgi, gpu_class: H100-80GB, gpus: 0}\n");
    const r = run(bin, ["apply", "-f", "bad.yaml"], { cwd: dir });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("bad.yaml:4:19: models[x].profiles[0].engine: ");
    expect(r.stderr).toContain("bad.yaml:4:54: models[x].profiles[0].gpus: ");
  });

  test("usage errors exit 2 and name the flag; help works on each command", () => {
    const r = run(bin, ["status", "-o", "yaml"], { cwd: dir });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('-o/--output must be one of table, wide, json, not "yaml"');
    for (const c of ["serve", "status", "nodes", "replicas", "models", "apply", "cordon", "uncordon", "drain", "version"]) {
      const h = run(bin, [c, "--help"], { cwd: dir });
      expect(h.code).toBe(0);
      expect(h.stdout).toContain(`llmgw ${c}`);
    }
  });

  test("agent --engine-auth off is in --help and warns at start with a reason; on (the default) does not", async () => {
    const help = run(bin, ["agent", "--help"], { cwd: dir });
    expect(help.stdout).toContain("--engine-auth on|off");
    const firstLines = async (extra: string[]) => {
      // A server nobody listens on: the agent logs its start-up, then keeps retrying.
      const p = Bun.spawn([bin, "agent", "--server", "http://127.0.0.1:9", "--token", "abcdefghijklmnopqrstuvwxyz", "--simulate", "H100-80GB:1", "--logs-listen", "off", "--state-dir", join(dir, `agent-${extra.length}`), ...extra], { cwd: dir, stdout: "pipe", stderr: "pipe" });
      let out = "";
      const reader = p.stdout.getReader();
      while (!out.includes("registering with the server")) {
        const { value, done } = await reader.read();
        if (done) break;
        out += new TextDecoder().decode(value);
      }
      p.kill("SIGTERM");
      await p.exited;
      return out.split("\n").filter(Boolean).map((l) => JSON.parse(l) as { level: number; msg: string; engine_auth?: string; reason?: string });
    };
    const off = (await firstLines(["--engine-auth", "off"])).find((l) => l.engine_auth === "off");
    expect(off).toMatchObject({ level: 40, engine_auth: "off" });
    expect(off!.reason).toContain("without a key");
    expect((await firstLines([])).some((l) => l.engine_auth !== undefined)).toBe(false);
  });

  test("a bad configuration lists every problem and exits non-zero", () => {
    const r = run(bin, ["serve", "--node-timeout", "soon", "--admin-listen", "x"], { cwd: dir, env: { LLMGW_DATA_DIR: join(dir, "other") } });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("node_timeout (from flag --node-timeout)");
    expect(r.stderr).toContain("admin_listen (from flag --admin-listen)");
  });

  test("llmgw backup writes a copy while the server runs; serve on the restored copy shows the same fleet", async () => {
    const b = run(bin, ["backup", "fleet.db"], { cwd: dir });
    expect(b.code).toBe(0);
    expect(b.stdout).toMatch(/^backup written to fleet\.db \(\d+ bytes\)\n$/);
    expect(run(bin, ["backup", "fleet.db"], { cwd: dir }).stderr).toContain("exists; pass --force");
    const before = JSON.parse(run(bin, ["status", "-o", "json"], { cwd: dir }).stdout) as Summary;
    const restoredDir = join(dir, "restored");
    mkdirSync(join(restoredDir, "llmgw-data"), { recursive: true });
    copyFileSync(join(dir, "fleet.db"), join(restoredDir, "llmgw-data", "llmgw.db"));
    const second = await startServe(bin, restoredDir);
    try {
      const after = JSON.parse(run(bin, ["status", "-o", "json"], { cwd: restoredDir }).stdout) as Summary;
      expect(after.nodes.total).toBe(before.nodes.total);
      expect(after.gpus).toEqual(before.gpus);
      expect(after.fabrics).toEqual(before.fabrics);
      expect(after.models).toEqual(before.models);
    } finally {
      second.proc.kill("SIGTERM");
      await second.proc.exited;
    }
  });

  test("with the server gone, status exits non-zero with one line naming the URL", async () => {
    serve.proc.kill("SIGTERM");
    await serve.proc.exited;
    const r = run(bin, ["status"], { cwd: dir });
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`error: cannot reach the llmgw server at ${serve.adminUrl}: connection refused\n`);
  });
});
