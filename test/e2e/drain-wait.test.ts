// Issue #16 through the compiled binary: a drain that cannot finish says so. Nodes heartbeat as
// agents do (reporting what they are assigned as ready). Draining the only H100 node under a
// model that needs H100s: `drain --wait` exits 1 at once with why, and `status` lists the drain
// under Attention. With a second H100 node full of another model: the drain is blocked now, not
// never; `drain --wait --stall 1s` says it is stalled and why, keeps waiting, and exits 1 at the
// timeout with the cause.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NodeView, Summary } from "../../src/protocol/views";
import { heartbeat, type NodeDef } from "../helpers/fleet";
import { heartbeatSender, run, scratchWithBinary, startServe, until } from "../helpers/binary";

const H = "H100-80GB";
let serve: Awaited<ReturnType<typeof startServe>>;
let dir: string;
let bin: string;
let beating = true;
let send: ReturnType<typeof heartbeatSender>;
const loops: Promise<void>[] = [];

/** Heartbeats like an agent, every 300 ms, reporting its assignments ready. */
function beat(d: NodeDef) {
  loops.push(
    (async () => {
      let ready: string[] = [];
      while (beating) {
        try {
          const res = await send({ ...heartbeat(d), replicas: ready.map((id) => ({ id, state: "ready", port: 8100 })) } as never);
          if (res.ok) ready = ((await res.json()) as { assignments: { id: string }[] }).assignments.map((x) => x.id);
        } catch {
          // the server is stopping
        }
        await Bun.sleep(300);
      }
    })(),
  );
}

/** The CLI without blocking the heartbeat loops. */
async function cli(args: string[]) {
  const p = Bun.spawn([bin, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", NO_COLOR: "1" }, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, stdout, stderr };
}
const node = async (name: string) => JSON.parse((await cli(["nodes", name, "-o", "json"])).stdout) as NodeView;
const summary = async () => JSON.parse((await cli(["status", "-o", "json"])).stdout) as Summary;

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  serve = await startServe(bin, dir, ["--heartbeat-interval", "300ms", "--reconcile-interval", "200ms"]);
  send = heartbeatSender(serve);
  beat({ name: "solo-01", gpus: [H, H, H, H] });
  beat({ name: "l40-01", gpus: ["L40S", "L40S", "L40S", "L40S"] });
  await until("two nodes ready", async () => ((await summary()).nodes.ready === 2 ? true : undefined));
}, 30_000);

afterAll(async () => {
  beating = false;
  serve?.proc.kill("SIGTERM");
  await Promise.race([Promise.all(loops), Bun.sleep(3_000)]);
  await serve?.proc.exited;
  rmSync(dir, { recursive: true, force: true });
});

test("drain --wait of the only node a model fits on exits 1 at once with why; status shows it under Attention", async () => {
  writeFileSync(join(dir, "catalog.yaml"), `models:\n  - name: llama-70b\n    replicas: {min: 1}\n    profiles:\n      - {name: tp4, engine: vllm, gpu_class: ${H}, gpus: 4}\n`);
  expect((await cli(["apply", "-f", "catalog.yaml"])).code).toBe(0);
  await until("llama-70b ready on solo-01", async () => ((await summary()).replicas.ready === 1 ? true : undefined), { timeoutMs: 15_000 });

  const started = Date.now();
  const d = await cli(["drain", "solo-01", "--wait"]);
  expect(d.code).toBe(1);
  expect(Date.now() - started).toBeLessThan(5_000);
  expect(d.stdout).toStartWith("node/solo-01 draining\n");
  expect(d.stderr).toStartWith("error: drain of solo-01 can never finish: llama-70b has nowhere else to go: no other node has H100-80GB GPUs; waiting will not help (`llmgw uncordon solo-01` calls the drain off; or add such nodes)\n");

  const n = await node("solo-01");
  expect(n.drain).toMatchObject({ remaining: 1, never: true });
  expect(n.drain!.replicas[0]).toMatchObject({ model: "llama-70b", state: "ready", status: "never" });
  const s = await cli(["status"]);
  // Piped: 80 columns, an attention line's continuations indented by 4.
  expect(s.stdout.replace(/\n {4}/g, " ")).toMatch(/Attention\n {2}drain of solo-01 can never finish \(1 replica left\): llama-70b has nowhere else to go: no other node has H100-80GB GPUs/);
  expect((await summary()).stuck_drains).toEqual([{ node: "solo-01", remaining: 1, never: true, reason: expect.stringContaining("no other node has H100-80GB GPUs") }]);
  // The drain never takes the model below what it had.
  expect((await summary()).replicas.ready).toBe(1);
  expect((await cli(["uncordon", "solo-01"])).code).toBe(0);
  expect((await cli(["status"])).stdout).not.toContain("drain of solo-01");
}, 40_000);

test("a drain blocked now is said stalled with its cause and waits on; the timeout exits 1 naming it", async () => {
  beat({ name: "h100-02", gpus: [H, H, H, H] });
  writeFileSync(join(dir, "filler.yaml"), `models:\n  - name: filler\n    replicas: {min: 1}\n    profiles:\n      - {name: tp4, engine: vllm, gpu_class: ${H}, gpus: 4}\n`);
  expect((await cli(["apply", "-f", "filler.yaml"])).code).toBe(0);
  await until("filler ready on h100-02", async () => ((await summary()).replicas.ready === 2 ? true : undefined), { timeoutMs: 15_000 });

  const started = Date.now();
  const d = await cli(["drain", "solo-01", "--wait", "--stall", "1s", "--timeout", "4s"]);
  expect(d.code).toBe(1);
  expect(Date.now() - started).toBeGreaterThanOrEqual(4_000);
  const stalls = d.stdout.split("\n").filter((l) => l.includes("stalled"));
  expect(stalls).toHaveLength(1);
  expect(stalls[0]).toMatch(/^node\/solo-01 stalled: nothing moved for \ds, 1 replica left: /);
  expect(d.stderr).toMatch(/^error: drain of solo-01 not done after 4s: llama-70b has nowhere else to go now: .*H100-80GB.*; it goes on in the background/);

  const n = await node("solo-01");
  expect(n.drain).toMatchObject({ remaining: 1, never: false });
  expect(n.drain!.blocked).toStartWith("llama-70b has nowhere else to go now: ");
  // Piped: 80 columns, an attention line's continuations indented by 4.
  expect((await cli(["status"])).stdout.replace(/\n {4}/g, " ")).toMatch(/Attention\n {2}drain of solo-01 cannot finish \(1 replica left\): llama-70b has nowhere else to go now: /);
  expect((await cli(["nodes", "solo-01"])).stdout).toMatch(/Drain: +1 replica left, cannot finish now: llama-70b has nowhere else to go now: [^\n]*\n +r-\S+ llama-70b ready: blocked \(/);
  const help = (await cli(["drain", "--help"])).stdout;
  expect(help).toContain("--stall DURATION");
  expect(help).toContain("(default 2m)");
  expect(help).toContain("(default 10m)");
}, 40_000);

test("apply --wait says a model stalled, with its reason, and exits 1 at the timeout naming it", async () => {
  writeFileSync(join(dir, "third.yaml"), `models:\n  - name: third\n    replicas: {min: 1}\n    profiles:\n      - {name: tp4, engine: vllm, gpu_class: ${H}, gpus: 4}\n`);
  const a = await cli(["apply", "-f", "third.yaml", "--wait", "--stall", "1s", "--timeout", "3s"]);
  expect(a.code).toBe(1);
  expect(a.stdout).toMatch(/^model\/third stalled: ready 0\/1 for 1s: /m);
  expect(a.stderr).toMatch(/^error: wait for third not done after 3s: third ready 0\/1: not now: no H100-80GB node has 4 free GPUs/);
  expect((await cli(["apply", "--help"])).stdout).toMatch(/--stall DURATION[\s\S]*\(default 2m\)/);
}, 30_000);
