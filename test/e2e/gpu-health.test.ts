// Issue #33 through the compiled binary: a real agent whose nvidia-smi (the fake of two H100s)
// starts failing as a driver that stops answering does (status 9). The node keeps its GPUs,
// counted unhealthy with the error as their reason, in `status` (under Attention), `nodes NAME`,
// the summary's JSON and the dashboard; discovery failing and each card turning unhealthy are
// events naming the node, the card's index and uuid; a head node restarted meanwhile forgets
// nothing and says nothing twice; when nvidia-smi answers again, the cards are healthy again.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { EventView, NodeView, Summary } from "../../src/protocol/views";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";
import { FAKES } from "../helpers/contract";
import { freePort } from "../helpers/ports";

const NODE = "h100-a";
const HEALTH = ["discovery.failed", "discovery.recovered", "gpu.unhealthy", "gpu.healthy"];

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;
let serveArgs: string[];
let agent: Bun.Subprocess | undefined;
/** While this file exists the fake nvidia-smi fails as a driver that stopped answering. */
let broken: string;

const cli = (...args: string[]) => run(bin, args, { cwd: dir });
const api = async <T>(path: string): Promise<T> => (await (await fetch(`${serve.adminUrl}${path}`, { headers: { authorization: `Bearer ${serve.adminToken}` } })).json()) as T;
const node = () => api<NodeView>(`/api/v1/nodes/${NODE}`);
const summary = (): Summary => JSON.parse(cli("status", "-o", "json").stdout) as Summary;
const healthEvents = async () => (await api<EventView[]>("/api/v1/events?limit=1000")).filter((e) => HEALTH.includes(e.kind));

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  broken = join(dir, "driver-broken");
  // Fixed ports: the restarted server is where the agent left it.
  serveArgs = ["--heartbeat-interval", "300ms", "--reconcile-interval", "200ms", "--log-level", "warn", "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${freePort()}`];
  serve = await startServe(bin, dir, serveArgs);
  agent = Bun.spawn(
    [bin, "agent", "--server", serve.adminUrl, "--token", serve.joinToken, "--name", NODE, "--address", "127.0.0.1", "--engine-host", "127.0.0.1",
      "--nvidia-smi", join(FAKES, "nvidia-smi-2xh100", "bin", "nvidia-smi"), "--inventory-interval", "300ms", "--models-dir", join(dir, "models"),
      "--vllm-version", "0.11.0", "--sglang-version", "0.5.3", "--llama-server-version", "b6000",
      "--logs-listen", "off", "--state-dir", join(dir, "agent"), "--log-level", "warn"],
    { cwd: dir, env: { PATH: process.env.PATH ?? "", LLMGW_CONTRACT_BUN: process.execPath, LLMGW_CONTRACT_SMI_FAIL_IF: broken }, stdout: "ignore", stderr: "pipe" },
  );
  await until("the agent registered with two healthy H100s", async () => {
    const list = await api<NodeView[]>("/api/v1/nodes");
    const n = list.find((x) => x.name === NODE);
    return n?.state === "ready" && n.gpu_total === 2 && n.gpu_unhealthy === 0;
  });
}, 30_000);

afterAll(async () => {
  agent?.kill("SIGTERM");
  await agent?.exited;
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
  rmSync(dir, { recursive: true, force: true });
});

describe("a node whose driver stops answering", () => {
  test("keeps its GPUs, unhealthy with the error as their reason; the change is in events, status, nodes and the dashboard; a restart says nothing twice; answering again, they are healthy", async () => {
    const uuids = (await node()).gpus.map((g) => g.uuid);
    expect(uuids).toHaveLength(2);
    expect(summary().gpus).toEqual([{ class: "H100-80GB", total: 2, used: 0, unhealthy: 0 }]);

    writeFileSync(broken, "");
    const s = await until("both GPUs counted unhealthy, none gone", async () => {
      const x = summary();
      return x.gpus[0]?.unhealthy === 2 ? x : undefined;
    });
    expect(s.gpus).toEqual([{ class: "H100-80GB", total: 2, used: 0, unhealthy: 2 }]);
    expect(s.gpu_discovery).toEqual([{ node: NODE, gpus: 2, error: expect.stringContaining("exited with status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"), last_known: true }]);

    const status = cli("status");
    expect(status.code).toBe(0);
    // Piped, sentences wrap at 80 columns with a hanging indent: read them joined.
    const attention = status.stdout.slice(status.stdout.indexOf("Attention")).replace(/\n +/g, " ");
    expect(status.stdout).toContain("Attention");
    expect(attention).toContain(`GPU discovery fails on ${NODE}: its 2 GPUs last reported are counted unhealthy until it answers again`);
    expect(attention).toContain("exited with status 9");

    const shown = cli("nodes", NODE).stdout;
    expect(shown).toContain(`Discovery:  its 2 GPUs last reported are kept, counted unhealthy until it answers again (or llmgw nodes delete ${NODE}): `);
    expect(status.stdout).not.toContain("unhealthy GPUs: GPU discovery fails");
    for (const u of uuids) expect(shown).toMatch(new RegExp(`unhealthy .*${u}.*GPU discovery fails: .*exited with status 9`));

    const failed = await until("the events of the failure", async () => ((await healthEvents()).length >= 3 ? await healthEvents() : undefined));
    expect(failed.map((e) => [e.kind, e.subject])).toEqual([
      ["discovery.failed", `node/${NODE}`],
      ["gpu.unhealthy", `node/${NODE}`],
      ["gpu.unhealthy", `node/${NODE}`],
    ]);
    expect(failed[0]!.message).toContain(`GPU discovery fails on node ${NODE}:`);
    uuids.forEach((u, i) => expect(failed[i + 1]!.message).toContain(`GPU ${i} (${u}) of node ${NODE} is unhealthy: GPU discovery fails:`));
    const events = cli("events", "-o", "wide").stdout;
    expect(events).toContain("discovery.failed");
    expect(events).toContain(`GPU 1 (${uuids[1]}) of node ${NODE} is unhealthy`);
    expect(cli("describe", "node", NODE).stdout).toContain(`GPU 0 (${uuids[0]}) of node ${NODE} is unhealthy`);
    const page = await (await fetch(`${serve.adminUrl}/ui/nodes/${NODE}`, { headers: { authorization: `Bearer ${serve.adminToken}` } })).text();
    expect(page).toContain("gpu.unhealthy");
    expect(page).toContain(`GPU 1 (${uuids[1]}) of node ${NODE} is unhealthy`);
    const overview = await (await fetch(`${serve.adminUrl}/ui`, { headers: { authorization: `Bearer ${serve.adminToken}` } })).text();
    expect(overview).toContain(`data-testid="discovery-fails" data-node="${NODE}"`);

    // Several heartbeats and inventories later: still one event each.
    const seen = (await node()).last_heartbeat;
    await until("a few more heartbeats", async () => Date.parse((await node()).last_heartbeat) > Date.parse(seen) + 1000);
    expect(await healthEvents()).toHaveLength(3);

    // The head node restarts while the driver is still broken: nothing forgotten, nothing said again.
    serve.proc.kill("SIGTERM");
    await serve.proc.exited;
    serve = await startServe(bin, dir, serveArgs);
    const restarted = await node();
    expect(restarted).toMatchObject({ gpu_total: 2, gpu_unhealthy: 2, gpus_last_known: true });
    expect(restarted.gpus.every((g) => g.reason?.startsWith("GPU discovery fails:"))).toBe(true);
    const after = Date.now();
    await until("the agent heartbeats to the restarted head node for a while", async () => Date.parse((await node()).last_heartbeat) > after + 1000);
    expect(await healthEvents()).toHaveLength(3);
    expect(summary().gpus).toEqual([{ class: "H100-80GB", total: 2, used: 0, unhealthy: 2 }]);

    rmSync(broken);
    await until("both GPUs healthy again", async () => (await node()).gpu_unhealthy === 0);
    const mended = await node();
    expect(mended).toMatchObject({ gpu_total: 2, gpu_free: 2, discovery_error: null });
    expect(mended.gpus_last_known).toBeUndefined();
    expect(summary().gpus).toEqual([{ class: "H100-80GB", total: 2, used: 0, unhealthy: 0 }]);
    expect(cli("status").stdout).not.toContain("GPU discovery fails");
    const recovered = (await until("the events of the recovery", async () => ((await healthEvents()).length >= 6 ? await healthEvents() : undefined))).slice(3);
    expect(recovered.map((e) => e.message)).toEqual([
      `GPU discovery on node ${NODE} works again: 2 GPUs reported`,
      `GPU 0 (${uuids[0]}) of node ${NODE} is healthy again`,
      `GPU 1 (${uuids[1]}) of node ${NODE} is healthy again`,
    ]);
  }, 60_000);
});
