// The node-trust verbs through the compiled binary: `serve --approve-nodes` with `nodes
// approve`, `nodes delete` (refused while replicas run, --force), `nodes allow-address`,
// `join-token rotate`, and a first start that never prints the join token.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { heartbeat } from "../helpers/fleet";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  serve = await startServe(bin, dir, ["--approve-nodes"]);
});
afterAll(() => {
  serve?.proc.kill("SIGTERM");
});

const hb = (name: string) => ({ ...heartbeat({ name, gpus: ["H100-80GB"] }), address: "127.0.0.1" });
const post = (body: unknown, token: string) =>
  fetch(`${serve.adminUrl}/agent/v1/heartbeat`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
const cli = (...args: string[]) => run(bin, args, { cwd: dir });
const credentials = new Map<string, string>();
async function join_(name: string, token = serve.joinToken): Promise<void> {
  const r = await post(hb(name), token);
  expect(r.status).toBe(200);
  credentials.set(name, ((await r.json()) as { credential: string }).credential);
}

describe("node trust from the CLI", () => {
  test("serve --approve-nodes: a new node is pending in `nodes` and `status` until `nodes approve`", async () => {
    await join_("gpu-01");
    const nodes = cli("nodes");
    expect(nodes.code).toBe(0);
    expect(nodes.stdout).toMatch(/gpu-01\s+pending/);
    expect(cli("status").stdout).toContain("1 pending approval");
    const approve = cli("nodes", "approve", "gpu-01");
    expect(approve.code).toBe(0);
    expect(approve.stdout).toContain("node/gpu-01 approved");
    expect(cli("nodes").stdout).toMatch(/gpu-01\s+ready/);
    expect(cli("nodes", "approve", "gpu-01").stdout).toContain("was not pending");
  });

  test("nodes allow-address lets a node report another data-plane address", async () => {
    await join_("gpu-02");
    cli("nodes", "approve", "gpu-02");
    const moved = { ...hb("gpu-02"), address: "10.20.0.2" };
    expect((await post(moved, credentials.get("gpu-02")!)).status).toBe(403);
    const allow = cli("nodes", "allow-address", "gpu-02", "10.20.0.2");
    expect(allow.code).toBe(0);
    expect((await post(moved, credentials.get("gpu-02")!)).status).toBe(200);
    expect(cli("nodes", "allow-address", "gpu-02", "--clear").code).toBe(0);
    expect((await post(moved, credentials.get("gpu-02")!)).status).toBe(403);
  });

  test("nodes delete: refused while a replica runs, --force deletes; the credential stops working", async () => {
    const catalog = join(dir, "catalog.yaml");
    await Bun.write(catalog, "models:\n  - name: m\n    replicas: { min: 1 }\n    profiles: [{ name: p, engine: fake, gpu_class: H100-80GB }]\n");
    expect(cli("apply", "-f", catalog).code).toBe(0);
    // The loop places it on the one ready node with a free H100 that has not got one yet.
    const placed = await until("a replica", () => {
      const r = cli("replicas", "-o", "json");
      const list = JSON.parse(r.stdout) as { id: string; shards: { node: string }[] }[];
      return list[0];
    });
    const node = placed.shards[0]!.node;
    const refused = cli("nodes", "delete", node);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain("--force");
    const forced = cli("nodes", "delete", node, "--force", "--timeout", "1s");
    expect(forced.code).toBe(0);
    expect(forced.stdout).toContain(`node/${node} deleted`);
    expect((await post(hb(node), credentials.get(node)!)).status).toBe(401);
    expect(cli("nodes").stdout).not.toContain(`${node} `);
  });

  test("join-token rotate writes a new join.token (0600), prints where, not what; the old token admits no one; joined nodes keep working", async () => {
    const path = join(dir, "llmgw-data", "join.token");
    const r = cli("join-token", "rotate");
    expect(r.code).toBe(0);
    const fresh = readFileSync(path, "utf8").trim();
    expect(fresh).not.toBe(serve.joinToken);
    expect(r.stdout).toContain(path);
    expect(r.stdout + r.stderr).not.toContain(fresh);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect((await post(hb("gpu-09"), serve.joinToken)).status).toBe(401);
    const survivor = [...credentials].find(([n]) => cli("nodes", n).code === 0)!;
    expect((await post(hb(survivor[0]), survivor[1])).status).toBe(200);
    expect((await post(hb("gpu-09"), fresh)).status).toBe(200);
  });

  test("join-command names the token file and prints no token", () => {
    const r = cli("join-command");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("--token-file");
    expect(r.stdout).toContain(join(dir, "llmgw-data", "join.token"));
    expect(r.stdout).not.toContain(readFileSync(join(dir, "llmgw-data", "join.token"), "utf8").trim());
  });

  test("the first start said where the join token is and printed no token", async () => {
    serve.proc.kill("SIGTERM");
    await serve.proc.exited;
    const err = serve.stderr();
    expect(err).toContain("--token-file");
    expect(err).toContain("join.token");
    expect(err).not.toContain(serve.joinToken);
  });

  test("--help says how: agent --address names allow-address; nodes lists the verbs; serve the flags", () => {
    const agent = cli("agent", "--help").stdout;
    expect(agent).toContain("--token-file");
    expect(agent).toContain("llmgw nodes allow-address NAME ADDR");
    expect(agent).toContain("node.credential");
    const nodes = cli("nodes", "--help").stdout;
    for (const v of ["nodes delete NAME [--force]", "nodes approve NAME", "nodes allow-address NAME ADDRESS", "host name"]) expect(nodes).toContain(v);
    const s = cli("serve", "--help").stdout;
    for (const f of ["--approve-nodes", "--max-nodes", "--heartbeat-rate", "--heartbeat-burst"]) expect(s).toContain(f);
    expect(cli("join-token", "--help").stdout).toContain("rotate");
  });
});
