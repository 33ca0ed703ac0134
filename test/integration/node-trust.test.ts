// Node trust through real HTTP on 127.0.0.1: the join token only admits a new node, each node
// then speaks with its own credential and only for itself, reports only its own address unless
// allowed, and the operator can delete, approve, rotate, cap and rate-limit.

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { NodeAgent } from "../../src/agent/agent";
import { joiningCredential } from "../../src/agent/credential";
import { bearerMatches } from "../../src/agent/logs";
import { fileSafe } from "../../src/agent/runner";
import { selfSignedCertificate } from "../../src/agent/selfsigned";
import { AgentConfig } from "../../src/config";
import { NodeCredential, newNodeCredential } from "../../src/protocol/heartbeat";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";
import { until } from "../helpers/until";
import { scratchDir } from "../helpers/tmp";

const H = "H100-80GB";
let servers: TestServer[] = [];
afterEach(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  servers = [];
});
async function server(o: Record<string, unknown> = {}): Promise<TestServer> {
  const s = await testServer(o);
  servers.push(s);
  return s;
}
/** A heartbeat from 127.0.0.1 that reports 127.0.0.1: no allowance needed. */
const local = (name: string, extra: Record<string, unknown> = {}) => ({ ...heartbeat({ name, gpus: [H] }), address: "127.0.0.1", ...extra });
const post = (s: TestServer, body: unknown, token: string) =>
  fetch(`${s.adminUrl}/agent/v1/heartbeat`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
const poll = (s: TestServer, node: string, token: string) => fetch(`${s.adminUrl}/agent/v1/assignments?node=${node}&wait_ms=0`, { headers: { authorization: `Bearer ${token}` } });
async function joinNode(s: TestServer, name: string): Promise<string> {
  const r = await post(s, local(name), s.joinToken);
  expect(r.status).toBe(200);
  const body = (await r.json()) as { credential?: string };
  expect(body.credential).toBeString();
  return body.credential!;
}
const errorOf = async (r: Response) => ((await r.json()) as { error: { code: string; message: string } }).error;

describe("credentials", () => {
  test("the join token's heartbeat gets a credential (≥ 32 random bytes, stored only hashed) that works for heartbeats and the node's own assignments", async () => {
    const s = await server();
    const cred = await joinNode(s, "gpu-01");
    expect(Buffer.from(cred.replace(/^llmgw_node_/, ""), "base64url").length).toBeGreaterThanOrEqual(32);
    const row = s.db.query("SELECT credential_hash FROM nodes WHERE name = 'gpu-01'").get() as { credential_hash: string };
    expect(row.credential_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(s.db.query("SELECT * FROM nodes").all())).not.toContain(cred);
    const again = await post(s, local("gpu-01"), cred);
    expect(again.status).toBe(200);
    expect(((await again.json()) as { credential?: string }).credential).toBeUndefined();
    expect((await poll(s, "gpu-01", cred)).status).toBe(200);
  });

  test("a joined name cannot be taken over with the join token: 409 saying how to re-join", async () => {
    const s = await server();
    await joinNode(s, "gpu-01");
    const r = await post(s, { ...local("gpu-01"), replicas: [{ id: "r-1", state: "failed", port: null, error: "x" }] }, s.joinToken);
    expect(r.status).toBe(409);
    const e = await errorOf(r);
    expect(e.message).toContain("llmgw nodes delete gpu-01");
    expect(e.message).toContain("node.credential");
  });

  test("a join sent again with the credential the agent chose (its answer was lost) is answered as the same join; any other join for the name is refused", async () => {
    const s = await server();
    const chosen = newNodeCredential();
    const first = await post(s, local("gpu-01", { join_credential: chosen }), s.joinToken);
    expect(first.status).toBe(200);
    expect(((await first.json()) as { credential?: string }).credential).toBe(chosen);
    const row = () => s.db.query("SELECT credential_hash, registered_at FROM nodes WHERE name = 'gpu-01'").get() as { credential_hash: string; registered_at: number };
    const before = row();
    // The answer never reached the agent: it sends the same join again, and again after its credential spoke.
    for (const _ of [1, 2]) {
      const again = await post(s, local("gpu-01", { join_credential: chosen }), s.joinToken);
      expect(again.status).toBe(200);
      expect(((await again.json()) as { credential?: string }).credential).toBe(chosen);
      expect(row()).toEqual(before);
      expect((await post(s, local("gpu-01"), chosen)).status).toBe(200);
    }
    expect((s.db.query("SELECT count(*) AS n FROM events WHERE kind = 'node.registered'").get() as { n: number }).n).toBe(1);
    // Someone else with the join token: another credential, or none, is refused and changes nothing.
    for (const other of [{ join_credential: newNodeCredential() }, {}]) {
      const r = await post(s, local("gpu-01", other), s.joinToken);
      expect(r.status).toBe(409);
      expect((await errorOf(r)).code).toBe("node_exists");
    }
    expect(row()).toEqual(before);
    expect((await post(s, local("gpu-01"), chosen)).status).toBe(200);
  });

  test("a join proposing another node's credential, or a malformed one, is refused and creates nothing", async () => {
    const s = await server();
    const chosen = newNodeCredential();
    expect((await post(s, local("gpu-01", { join_credential: chosen }), s.joinToken)).status).toBe(200);
    const taken = await post(s, local("gpu-02", { join_credential: chosen }), s.joinToken);
    expect(taken.status).toBe(409);
    expect(await errorOf(taken)).toMatchObject({ code: "credential_in_use" });
    for (const bad of ["short", `llmgw_node_${"!".repeat(43)}`, `${chosen}x`, 42]) {
      const r = await post(s, local("gpu-03", { join_credential: bad }), s.joinToken);
      expect(r.status).toBe(400);
      expect((await errorOf(r)).message).toContain("join_credential");
    }
    const names = (s.db.query("SELECT name FROM nodes ORDER BY name").all() as { name: string }[]).map((r) => r.name);
    expect(names).toEqual(["gpu-01"]);
  });

  test("a wrong credential is 401; another node's credential cannot heartbeat for it (403)", async () => {
    const s = await server();
    const a = await joinNode(s, "gpu-01");
    await joinNode(s, "gpu-02");
    expect((await post(s, local("gpu-01"), "llmgw_node_notarealcredential0000000000000000000")).status).toBe(401);
    const r = await post(s, local("gpu-02"), a);
    expect(r.status).toBe(403);
    expect((await errorOf(r)).message).toContain("belongs to node gpu-01");
  });

  test("a node reads only its own assignments: ?node= another node is 403, and the join token reads none", async () => {
    const s = await server();
    const a = await joinNode(s, "gpu-01");
    await joinNode(s, "gpu-02");
    const r = await poll(s, "gpu-02", a);
    expect(r.status).toBe(403);
    expect((await errorOf(r)).message).toContain("gpu-02");
    expect((await poll(s, "gpu-02", s.joinToken)).status).toBe(403);
  });
});

describe("addresses", () => {
  test("a reported address that is not the heartbeat's source is refused, naming the field; an allowance lets it through", async () => {
    const s = await server();
    const hb = { ...local("gpu-01"), address: "10.0.0.9" };
    const r = await post(s, hb, s.joinToken);
    expect(r.status).toBe(403);
    const e = await errorOf(r);
    expect(e.message).toStartWith("address:");
    expect(e.message).toContain("127.0.0.1");
    expect(e.message).toContain("llmgw nodes allow-address gpu-01 10.0.0.9");
    expect(await s.peek.nodeExists("gpu-01")).toBe(false);
    const allowed = await s.admin("/api/v1/nodes/gpu-01/address", { method: "PUT", body: JSON.stringify({ address: "10.0.0.9" }) });
    expect(allowed.status).toBe(200);
    expect((await post(s, hb, s.joinToken)).status).toBe(200);
    // Withdrawn: the credential still works, the foreign address no longer does.
    expect((await s.admin("/api/v1/nodes/gpu-01/address", { method: "DELETE" })).status).toBe(200);
    const cred = s.credentials.get("gpu-01");
    expect(cred).toBeUndefined();
  });

  test("a credentialed node cannot move its address to another machine's", async () => {
    const s = await server();
    const cred = await joinNode(s, "gpu-01");
    const r = await post(s, { ...local("gpu-01"), address: "10.1.2.3" }, cred);
    expect(r.status).toBe(403);
    expect((await s.admin("/api/v1/nodes/gpu-01").then((x) => x.json()) as { address: string }).address).toBe("127.0.0.1");
    // An IPv4-mapped spelling of the source is the source.
    expect((await post(s, { ...local("gpu-01"), address: "::ffff:127.0.0.1" }, cred)).status).toBe(200);
  });

  test("a host name as address is refused unless it is the one allowed", async () => {
    const s = await server();
    const hb = { ...local("gpu-01"), address: "gpu-01.example" };
    expect((await post(s, hb, s.joinToken)).status).toBe(403);
    expect((await s.admin("/api/v1/nodes/gpu-01/address", { method: "PUT", body: JSON.stringify({ address: "gpu-01.example" }) })).status).toBe(200);
    expect((await post(s, hb, s.joinToken)).status).toBe(200);
  });

  test("the allowance body is validated with the field named", async () => {
    const s = await server();
    const r = await s.admin("/api/v1/nodes/gpu-01/address", { method: "PUT", body: JSON.stringify({ address: "a b" }) });
    expect(r.status).toBe(400);
    expect((await errorOf(r)).message).toStartWith("address:");
  });
});

describe("operator verbs", () => {
  test("delete: refused while replicas run (409 naming --force); force stops them; the credential stops working; the name can join again", async () => {
    const s = await server();
    const cred = await joinNode(s, "gpu-01");
    await s.admin("/api/v1/models/m", { method: "PUT", body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "p", engine: "fake", gpu_class: H }] }) });
    await s.tick();
    expect((await s.peek.replicas()).length).toBe(1);
    const refused = await s.admin("/api/v1/nodes/gpu-01", { method: "DELETE" });
    expect(refused.status).toBe(409);
    expect((await errorOf(refused)).message).toContain("--force");
    const forced = await s.admin("/api/v1/nodes/gpu-01?force=1", { method: "DELETE" });
    expect(forced.status).toBe(200);
    expect(((await forced.json()) as { stopped: string[] }).stopped.length).toBe(1);
    expect(await s.peek.nodeExists("gpu-01")).toBe(false);
    expect((await post(s, local("gpu-01"), cred)).status).toBe(401);
    expect((await joinNode(s, "gpu-01")).length).toBeGreaterThan(40);
  });

  test("delete of a node with nothing on it needs no force; unknown is 404", async () => {
    const s = await server();
    await joinNode(s, "gpu-01");
    expect((await s.admin("/api/v1/nodes/gpu-01", { method: "DELETE" })).status).toBe(200);
    expect((await s.admin("/api/v1/nodes/gpu-01", { method: "DELETE" })).status).toBe(404);
  });

  test("rotate: a new token in join.token (0600), the old one admits no one, joined nodes keep working", async () => {
    const s = await server();
    const cred = await joinNode(s, "gpu-01");
    const r = await s.admin("/api/v1/join-token/rotate", { method: "POST" });
    expect(r.status).toBe(200);
    const body = (await r.json()) as { path: string; message: string };
    const path = join(s.dataDir, "join.token");
    expect(body.path).toBe(path);
    const fresh = readFileSync(path, "utf8").trim();
    expect(fresh).not.toBe(s.joinToken);
    expect(JSON.stringify(body)).not.toContain(fresh);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect((await post(s, local("gpu-02"), s.joinToken)).status).toBe(401);
    expect((await post(s, local("gpu-01"), cred)).status).toBe(200);
    expect((await post(s, local("gpu-02"), fresh)).status).toBe(200);
  });

  test("approve: under approve_nodes a new node is pending, gets nothing placed, shows in nodes and the summary, until approved", async () => {
    const s = await server({ approve_nodes: true });
    await joinNode(s, "gpu-01");
    await s.admin("/api/v1/models/m", { method: "PUT", body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "p", engine: "fake", gpu_class: H }] }) });
    await s.tick();
    expect(await s.peek.replicas()).toEqual([]);
    expect(((await (await s.admin("/api/v1/nodes/gpu-01")).json()) as { state: string }).state).toBe("pending");
    expect(((await (await s.admin("/api/v1/summary")).json()) as { nodes: { pending?: number } }).nodes.pending).toBe(1);
    // Cordon or uncordon do not admit it by the way.
    expect((await s.admin("/api/v1/nodes/gpu-01/uncordon", { method: "POST" })).status).toBe(409);
    const a = await s.admin("/api/v1/nodes/gpu-01/approve", { method: "POST" });
    expect(((await a.json()) as { changed: boolean }).changed).toBe(true);
    await s.tick();
    expect((await s.peek.replicas()).length).toBe(1);
  });

  test("the node cap refuses a new node naming --max-nodes; known nodes keep heartbeating", async () => {
    const s = await server({ max_nodes: 1 });
    const cred = await joinNode(s, "gpu-01");
    const r = await post(s, local("gpu-02"), s.joinToken);
    expect(r.status).toBe(403);
    expect((await errorOf(r)).message).toContain("--max-nodes");
    expect((await post(s, local("gpu-01"), cred)).status).toBe(200);
  });

  test("the heartbeat rate limit answers 429 with Retry-After beyond the burst, and refills with the clock", async () => {
    const s = await server({ heartbeat_rate: 1, heartbeat_burst: 3 });
    const cred = await joinNode(s, "gpu-01");
    const codes: number[] = [];
    for (let i = 0; i < 4; i++) codes.push((await post(s, local("gpu-01"), cred)).status);
    expect(codes).toEqual([200, 200, 429, 429]);
    const r = await post(s, local("gpu-01"), cred);
    expect(r.headers.get("retry-after")).toBe("1");
    s.clock.advance(1000);
    expect((await post(s, local("gpu-01"), cred)).status).toBe(200);
  });

  test("the default rate never trips an agent heartbeating every second for a minute plus its long polls", async () => {
    const s = await server();
    const cred = await joinNode(s, "gpu-01");
    for (let i = 0; i < 60; i++) {
      expect((await post(s, local("gpu-01"), cred)).status).toBe(200);
      expect((await poll(s, "gpu-01", cred)).status).toBe(200);
      s.clock.advance(1000);
    }
  });
});

describe("the agent", () => {
  test("keeps its credential 0600 in a 0700 state dir, uses it after a restart, and is refused a takeover of its own name without it", async () => {
    const s = await server({ heartbeat_interval: "200ms" });
    const stateDir = join(scratchDir("llmgw-nt-"), "state");
    const tokenFile = join(stateDir, "..", "join.token");
    await Bun.write(tokenFile, `${s.joinToken}\n`);
    const make = (over: Record<string, unknown> = {}) =>
      new NodeAgent({
        config: AgentConfig.parse({ server: s.adminUrl, token_file: tokenFile, name: "sim-01", address: "127.0.0.1", simulate: "H100-80GB:1", state_dir: stateDir, logs_listen: "off", ...over }),
        log: pino({ level: "silent" }),
        selfExe: [process.execPath],
      });
    const a = make();
    await a.start();
    await a.stop();
    expect(statSync(stateDir).mode & 0o777).toBe(0o700);
    const file = join(stateDir, "node.credential");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const stored = JSON.parse(readFileSync(file, "utf8")) as { node: string; credential: string };
    expect(stored.node).toBe("sim-01");
    expect(await s.peek.nodeForCredential(stored.credential)).toBe("sim-01");
    // Restart: the join token is gone from the node, the credential suffices.
    await s.admin("/api/v1/join-token/rotate", { method: "POST" });
    const b = make();
    await b.start();
    await b.stop();
    // Another state dir, same name: the join token cannot speak for it.
    await Bun.write(tokenFile, readFileSync(join(s.dataDir, "join.token")));
    const c = make({ state_dir: join(stateDir, "..", "other") });
    const err = await c.start().then(() => undefined, (e: Error) => e);
    expect(err?.message).toContain("llmgw nodes delete sim-01");
    // Deleted on the head node: the stored credential is refused, and the agent says which file to remove.
    expect((await s.admin("/api/v1/nodes/sim-01", { method: "DELETE" })).status).toBe(200);
    const d = make();
    const gone = await d.start().then(() => undefined, (e: Error) => e);
    expect(gone?.message).toContain(file);
  });

  test("a join that took effect but whose answer was lost: restarted, the agent sends the credential it chose again and is answered, not refused", async () => {
    const s = await server({ heartbeat_interval: "200ms" });
    const stateDir = join(scratchDir("llmgw-nt-"), "state");
    mkdirSync(stateDir, { recursive: true, mode: 0o700 });
    const tokenFile = join(stateDir, "..", "join.token");
    await Bun.write(tokenFile, `${s.joinToken}\n`);
    const make = () =>
      new NodeAgent({
        config: AgentConfig.parse({ server: s.adminUrl, token_file: tokenFile, name: "sim-01", address: "127.0.0.1", simulate: "H100-80GB:1", state_dir: stateDir, logs_listen: "off" }),
        log: pino({ level: "silent" }),
        selfExe: [process.execPath],
      });
    // The agent chose its credential and sent the join; the head node committed it; the answer never came.
    const chosen = newNodeCredential();
    writeFileSync(join(stateDir, "node.joining"), JSON.stringify({ node: "sim-01", credential: chosen }), { mode: 0o600 });
    expect((await post(s, { ...local("sim-01"), join_credential: chosen }, s.joinToken)).status).toBe(200);
    const a = make();
    await a.start();
    await a.stop();
    expect((JSON.parse(readFileSync(join(stateDir, "node.credential"), "utf8")) as { credential: string }).credential).toBe(chosen);
    expect(existsSync(join(stateDir, "node.joining"))).toBe(false);
    expect(await s.peek.nodeForCredential(chosen)).toBe("sim-01");
  });

  test("a joining agent keeps its chosen credential 0600 until answered; one chosen for another node is replaced", async () => {
    const log = pino({ level: "silent" });
    const dir = scratchDir("llmgw-nt-");
    const path = join(dir, "node.joining");
    const first = joiningCredential(path, "sim-01", log);
    expect(NodeCredential.safeParse(first).success).toBe(true);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(joiningCredential(path, "sim-01", log)).toBe(first);
    const other = joiningCredential(path, "sim-02", log);
    expect(other).not.toBe(first);
    writeFileSync(path, "not json");
    expect(NodeCredential.safeParse(joiningCredential(path, "sim-02", log)).success).toBe(true);
  });

  test("the log listener compares tokens in constant time (digests) and refuses before the node has a credential", () => {
    expect(bearerMatches("Bearer abc", "abc")).toBe(true);
    expect(bearerMatches("Bearer abd", "abc")).toBe(false);
    expect(bearerMatches("Bearer abcabc", "abc")).toBe(false);
    expect(bearerMatches(null, "abc")).toBe(false);
    expect(bearerMatches("Bearer ", undefined)).toBe(false);
    expect(bearerMatches("Bearer x", "")).toBe(false);
  });
});

describe("engine logs", () => {
  /** A head node, an agent with a log listener, and a replica of that agent's whose log has a line. */
  async function withLog(tls: boolean) {
    const dir = scratchDir("llmgw-nt-logs-");
    let o: Record<string, unknown> = {};
    if (tls) {
      const c = selfSignedCertificate(["127.0.0.1"]);
      writeFileSync(join(dir, "cert.pem"), c.cert);
      writeFileSync(join(dir, "key.pem"), c.key);
      o = { tls_cert: join(dir, "cert.pem"), tls_key: join(dir, "key.pem") };
    }
    const s = await server({ heartbeat_interval: "200ms", ...o });
    const stateDir = join(dir, "agent");
    const agent = new NodeAgent({
      config: AgentConfig.parse({
        server: s.adminUrl,
        token: s.joinToken,
        name: "log-01",
        address: "127.0.0.1",
        simulate: "H100-80GB:1",
        state_dir: stateDir,
        logs_listen: "127.0.0.1:0",
        ...(tls ? { server_ca: join(dir, "cert.pem") } : {}),
      }),
      log: pino({ level: "silent" }),
      selfExe: [process.execPath],
    });
    await agent.start();
    s.seed.replica({ id: "r-log1", model: "m", profile: "p", state: "ready", shards: [{ node: "log-01", gpus: [0] }], port: 9, endpoint: null, createdAt: 0, updatedAt: 0 });
    mkdirSync(join(stateDir, "logs"), { recursive: true });
    writeFileSync(join(stateDir, "logs", `${fileSafe("r-log1")}.log`), "engine says hello\n");
    // The listener's address and certificate digest arrive with a heartbeat, which on a loaded
    // machine can land after start() returns: wait for the head node to know them.
    await until("the head node to know log-01's log listener", () => s.peek.logSource("r-log1").then(() => true, () => false));
    return { s, agent, stateDir };
  }

  test("over TLS when the head node's agent API is: the head node pins the listener's own certificate; plain HTTP and other tokens are refused", async () => {
    const { s, agent, stateDir } = await withLog(true);
    try {
      const src = await s.peek.logSource("r-log1");
      expect(src.url).toStartWith("https://127.0.0.1:");
      expect(src.cert).toContain("BEGIN CERTIFICATE");
      expect(statSync(join(stateDir, "logs-tls.key")).mode & 0o777).toBe(0o600);
      const res = await s.admin("/api/v1/replicas/r-log1/logs");
      expect(res.status).toBe(200);
      expect(await res.text()).toBe("engine says hello\n");
      // Plain HTTP to the TLS listener gets nothing.
      const plain = await fetch(src.url.replace("https:", "http:")).then((r) => r.status, () => "refused");
      expect(plain).not.toBe(200);
      // The join token and the admin token open nothing there; only the token derived from this node's credential.
      for (const t of [s.joinToken, s.adminToken])
        expect((await fetch(src.url, { headers: { authorization: `Bearer ${t}` }, tls: { ca: src.cert! } })).status).toBe(401);
      expect((await fetch(src.url, { headers: { authorization: `Bearer ${src.token}` }, tls: { ca: src.cert! } })).status).toBe(200);
    } finally {
      await agent.stop();
    }
  });

  test("over plain HTTP with a plain head node, behind the credential-derived token", async () => {
    const { s, agent } = await withLog(false);
    try {
      const src = await s.peek.logSource("r-log1");
      expect(src.url).toStartWith("http://127.0.0.1:");
      expect(await (await s.admin("/api/v1/replicas/r-log1/logs")).text()).toBe("engine says hello\n");
      expect((await fetch(src.url, { headers: { authorization: `Bearer ${s.joinToken}` } })).status).toBe(401);
    } finally {
      await agent.stop();
    }
  });
});
