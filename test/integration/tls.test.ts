// TLS on the head node's listeners, and the clients that talk to them: agents trusting a CA or
// pinning the certificate's fingerprint, the CLI trusting the certificate a local server
// recorded. Certificates are made here with openssl (self-signed, 127.0.0.1 and localhost).

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { AgentError, NodeAgent, type AgentTiming } from "../../src/agent/agent";
import { CliError, resolveClient } from "../../src/cli/client";
import { AgentConfig, ConfigError, ServeConfig, loadConfig } from "../../src/config";
import { readServerInfo } from "../../src/config/datadir";
import type { NodeView } from "../../src/protocol/views";
import { type TestServer, testServer } from "../helpers/server";
import { until } from "../helpers/until";
import { scratchDir } from "../helpers/tmp";

const FAST: Partial<AgentTiming> = { backoffInitialMs: 50, backoffMaxMs: 200, longPollWaitMs: 5_000, requestTimeoutMs: 3_000 };

interface Cert {
  cert: string;
  key: string;
  pem: string;
  /** As openssl prints it: "sha256 Fingerprint=AA:BB:…". */
  opensslLine: string;
  /** AA:BB:… */
  fingerprint: string;
}

// The certificates are made with openssl (.ci/run installs Debian's openssl package).

let dir: string;
let good: Cert;
let other: Cert;
/** Names only head.example: valid for none of the addresses the tests connect to. */
let named: Cert;

function openssl(...args: string[]): string {
  const r = Bun.spawnSync(["openssl", ...args], { stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`openssl ${args.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

function makeCert(name: string, san = "IP:127.0.0.1,DNS:localhost"): Cert {
  const cert = join(dir, `${name}.pem`);
  const key = join(dir, `${name}.key`);
  openssl(
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-subj", "/CN=localhost", "-addext", `subjectAltName=${san}`, "-days", "2",
    "-keyout", key, "-out", cert,
  );
  const opensslLine = openssl("x509", "-in", cert, "-noout", "-fingerprint", "-sha256").trim();
  return { cert, key, pem: readFileSync(cert, "utf8"), opensslLine, fingerprint: opensslLine.split("=")[1]!.toUpperCase() };
}

beforeAll(() => {
  dir = scratchDir("llmgw-tls-");
  good = makeCert("server");
  other = makeCert("other");
  named = makeCert("named", "DNS:head.example");
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function tlsServer(log?: pino.Logger, cert = good): Promise<TestServer> {
  const server = await testServer({ tls_cert: cert.cert, tls_key: cert.key }, log);
  cleanup.push(() => {
    const d = server.dataDir;
    return server.stop().then(() => rmSync(d, { recursive: true, force: true }));
  });
  return server;
}

function makeAgent(server: TestServer, config: Record<string, unknown>, name = "tls-01", log = pino({ level: "silent" })): NodeAgent {
  const cfg = AgentConfig.parse({
    server: server.adminUrl,
    token: server.joinToken,
    name,
    // What the head node sees its heartbeats come from.
    address: "127.0.0.1",
    state_dir: scratchDir("llmgw-agent-"),
    simulate: "H100-80GB:2",
    logs_listen: "127.0.0.1:0",
    ...config,
  });
  const agent = new NodeAgent({ config: cfg, log, selfExe: [process.execPath], timing: FAST });
  cleanup.push(async () => {
    await agent.stop();
    rmSync(cfg.state_dir, { recursive: true, force: true });
  });
  return agent;
}

/** Through the CLI's client beside the server, which trusts the certificate the server recorded. */
async function nodeNames(server: TestServer): Promise<string[]> {
  return (await resolveClient({ "data-dir": server.dataDir }, {}).get<NodeView[]>("/api/v1/nodes")).map((n) => n.name);
}

describe("serve with tls_cert/tls_key", () => {
  test("both listeners serve HTTPS; server.json and the log say so", async () => {
    const lines: Array<{ msg: string; [k: string]: unknown }> = [];
    const log = pino({ level: "info" }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    const server = await tlsServer(log);
    expect(server.adminUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(server.routerUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(server.tls?.fingerprint256).toBe(good.fingerprint);

    const info = readServerInfo(server.dataDir)!;
    expect(info.admin_url).toBe(server.adminUrl);
    expect(info.router_url).toBe(server.routerUrl);
    expect(info.tls_cert).toBe(good.cert);
    expect(info.tls_fingerprint).toBe(good.fingerprint);
    const on = lines.find((l) => /TLS on/.test(l.msg));
    expect(on).toBeDefined();
    expect(on!.fingerprint256).toBe(good.fingerprint);

    expect((await server.admin("/healthz")).status).toBe(200);
    const models = await fetch(`${server.routerUrl}/v1/models`, { tls: { ca: good.pem } });
    expect(models.status).toBe(200);
    expect(((await models.json()) as { object: string }).object).toBe("list");
  });

  test("plain http to a TLS listener fails, on both listeners", async () => {
    const server = await tlsServer();
    for (const url of [server.adminUrl, server.routerUrl]) {
      const plain = url.replace(/^https:/, "http:");
      const err = await fetch(`${plain}/healthz`, { signal: AbortSignal.timeout(5_000) }).then(
        (r) => new Error(`answered ${r.status}`),
        (e: Error) => e,
      );
      expect(err.message).not.toMatch(/^answered/);
    }
  });

  test("an untrusting client is refused by its own TLS check", async () => {
    const server = await tlsServer();
    const err = (await fetch(`${server.routerUrl}/healthz`).catch((e) => e)) as Error & { code?: string };
    expect(err.code).toBe("DEPTH_ZERO_SELF_SIGNED_CERT");
  });

  test("only one of tls_cert/tls_key is a config error naming both keys", async () => {
    const inputs: Array<{ flags: Record<string, string>; env: Record<string, string> }> = [
      { flags: { "tls-cert": good.cert }, env: {} },
      { flags: {}, env: { LLMGW_TLS_KEY: good.key } },
    ];
    for (const input of inputs) {
      const err = await loadConfig(ServeConfig, input).catch((e) => e);
      expect(err).toBeInstanceOf(ConfigError);
      expect(err.message).toContain("tls_cert");
      expect(err.message).toContain("tls_key");
    }
    const both = await loadConfig(ServeConfig, { flags: { "tls-cert": good.cert }, env: { LLMGW_TLS_KEY: good.key } });
    expect(both.tls_cert).toBe(good.cert);
    expect(both.tls_key).toBe(good.key);
  });

  test("a missing or unreadable file, or a key of another certificate, stops start-up naming the file", async () => {
    const missing = join(dir, "nope.pem");
    const e1 = await testServer({ tls_cert: missing, tls_key: good.key }).catch((e) => e);
    expect(e1).toBeInstanceOf(ConfigError);
    expect(e1.message).toContain(`tls_cert ${missing}: cannot read it (no such file)`);

    const e2 = await testServer({ tls_cert: good.cert, tls_key: dir }).catch((e) => e);
    expect(e2.message).toContain(`tls_key ${dir}: cannot read it`);

    const notPem = join(dir, "not.pem");
    writeFileSync(notPem, "hello\n");
    const e3 = await testServer({ tls_cert: notPem, tls_key: good.key }).catch((e) => e);
    expect(e3.message).toContain(`tls_cert ${notPem}: not a PEM certificate`);

    const e4 = await testServer({ tls_cert: good.cert, tls_key: other.key }).catch((e) => e);
    expect(e4.message).toContain(`tls_key ${other.key} is not the private key of the certificate in tls_cert ${good.cert}`);
  });
});

describe("agents over HTTPS", () => {
  test("with --server-ca the agent registers", async () => {
    const server = await tlsServer();
    await makeAgent(server, { server_ca: good.cert }).start();
    expect(await nodeNames(server)).toEqual(["tls-01"]);
  });

  test("pinned to the right fingerprint (as openssl prints it, or bare hex) the agent registers without a CA", async () => {
    const server = await tlsServer();
    await makeAgent(server, { server_fingerprint: good.opensslLine }, "pin-01").start();
    await makeAgent(server, { server_fingerprint: good.fingerprint.replace(/:/g, "").toLowerCase() }, "pin-02").start();
    await makeAgent(server, { server_fingerprint: good.fingerprint, server_ca: good.cert }, "pin-03").start();
    expect((await nodeNames(server)).sort()).toEqual(["pin-01", "pin-02", "pin-03"]);
  });

  test("a pin stands in for the host name check: a certificate naming another host is accepted pinned, refused by CA alone", async () => {
    const server = await tlsServer(undefined, named);
    await makeAgent(server, { server_fingerprint: named.fingerprint }, "pin-01").start();
    await makeAgent(server, { server_fingerprint: named.fingerprint, server_ca: named.cert }, "pin-02").start();
    const err = await makeAgent(server, { server_ca: named.cert }, "ca-01").start().catch((e) => e);
    expect(err).toBeInstanceOf(AgentError);
    expect(err.message).toContain("the server's TLS certificate is not valid for 127.0.0.1");
    expect((await nodeNames(server)).sort()).toEqual(["pin-01", "pin-02"]);
  });

  test("a pin applies to every server of a list: past a dead first one it is checked at the next; a server with another certificate is refused, not skipped", async () => {
    const server = await tlsServer();
    const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
    const dead = `https://127.0.0.1:${s.port}`;
    await s.stop(true);
    for (const [name, extra] of [["pin-01", {}], ["pin-02", { server_ca: good.cert }]] as const) {
      const agent = makeAgent(server, { server: `${dead},${server.adminUrl}`, server_fingerprint: good.fingerprint, ...extra }, name);
      await agent.start();
      expect(agent.server).toBe(server.adminUrl);
    }
    expect((await nodeNames(server)).sort()).toEqual(["pin-01", "pin-02"]);

    const wrong = await tlsServer(undefined, other);
    const err = await makeAgent(server, { server: `${wrong.adminUrl},${server.adminUrl}`, server_fingerprint: good.fingerprint }, "pin-03").start().catch((e) => e);
    expect(err).toBeInstanceOf(AgentError);
    expect(err.message).toBe(`the server's certificate does not match --server-fingerprint: expected ${good.fingerprint}, got ${other.fingerprint} (server ${wrong.adminUrl})`);
  });

  test("pinned to a wrong fingerprint start() fails naming expected and got", async () => {
    const server = await tlsServer();
    for (const extra of [{}, { server_ca: good.cert }]) {
      const agent = makeAgent(server, { server_fingerprint: other.fingerprint, ...extra });
      const err = await agent.start().catch((e) => e);
      expect(err).toBeInstanceOf(AgentError);
      expect(err.stopped).toBe(false);
      expect(err.message).toContain(`does not match --server-fingerprint: expected ${other.fingerprint}, got ${good.fingerprint}`);
    }
    expect(await nodeNames(server)).toEqual([]);
  });

  test("a pinned agent whose server comes back with another certificate logs expected and got, and keeps trying", async () => {
    const first = await testServer({ tls_cert: good.cert, tls_key: good.key });
    const port = Number(new URL(first.adminUrl).port);
    const lines: string[] = [];
    const log = pino({ level: "info" }, { write: (s: string) => void lines.push((JSON.parse(s) as { msg: string }).msg) });
    const agent = makeAgent(first, { server_fingerprint: good.fingerprint }, "pin-01", log);
    await agent.start();
    await first.stop();
    rmSync(first.dataDir, { recursive: true, force: true });

    const second = await testServer({ tls_cert: other.cert, tls_key: other.key, admin_listen: `127.0.0.1:${port}`, join_token: first.joinToken });
    cleanup.push(() => second.stop().then(() => rmSync(second.dataDir, { recursive: true, force: true })));
    // The long poll notices first (its connection went with the old server).
    const want = `the server's certificate does not match --server-fingerprint: expected ${good.fingerprint}, got ${other.fingerprint}`;
    // A real TLS handshake with a real server: no clock of ours can hurry it.
    const line = await until(`the agent to log "${want}"`, () => lines.find((l) => l.includes(want)), { timeoutMs: 5_000, everyMs: 50 });
    expect(line).toMatch(/^assignments long poll: .*; retrying in/);
    expect(await nodeNames(second)).toEqual([]);
  }, 15_000);

  test("without a CA or a pin the self-signed server is not trusted, and start() says what to give", async () => {
    const server = await tlsServer();
    const err = await makeAgent(server, {}).start().catch((e) => e);
    expect(err).toBeInstanceOf(AgentError);
    expect(err.message).toContain("the server's TLS certificate is not trusted");
    expect(err.message).toContain("--server-ca");
    expect(err.message).toContain("--server-fingerprint");

    const wrongCa = await makeAgent(server, { server_ca: other.cert }, "tls-02").start().catch((e) => e);
    expect(wrongCa).toBeInstanceOf(AgentError);
    expect(wrongCa.message).toContain(`not trusted by --server-ca ${other.cert}`);
    expect(await nodeNames(server)).toEqual([]);
  });

  test("an unreadable --server-ca fails start() naming the file", async () => {
    const server = await tlsServer();
    const missing = join(dir, "missing-ca.pem");
    const err = await makeAgent(server, { server_ca: missing }).start().catch((e) => e);
    expect(err).toBeInstanceOf(AgentError);
    expect(err.message).toBe(`--server-ca ${missing}: cannot read it (no such file)`);
  });

  test("server_ca and server_fingerprint are checked as settings", async () => {
    const base = { server: "https://10.0.0.1:8001", token: "t".repeat(20) };
    const ok = await loadConfig(AgentConfig, { flags: { ...base, "server-fingerprint": good.opensslLine }, env: {} });
    expect(ok.server_fingerprint).toBe(good.fingerprint);
    const bad = await loadConfig(AgentConfig, { flags: { ...base, "server-fingerprint": "abc" }, env: {} }).catch((e) => e);
    expect(bad).toBeInstanceOf(ConfigError);
    expect(bad.message).toContain("server_fingerprint (from flag --server-fingerprint)");
    expect(bad.message).toContain("not a SHA-256 fingerprint");
    const plain = await loadConfig(AgentConfig, {
      flags: { ...base, server: "http://10.0.0.1:8001" },
      env: { LLMGW_SERVER_CA: good.cert },
    }).catch((e) => e);
    expect(plain).toBeInstanceOf(ConfigError);
    expect(plain.message).toContain("server_ca (from environment LLMGW_SERVER_CA): only applies to an https:// server");
  });
});

describe("the CLI over HTTPS", () => {
  test("beside the server it trusts the certificate the server recorded", async () => {
    const server = await tlsServer();
    const client = resolveClient({ "data-dir": server.dataDir }, {});
    expect(client.server).toBe(server.adminUrl);
    expect(await client.get<NodeView[]>("/api/v1/nodes")).toEqual([]);
    // The same URL given explicitly is the recorded one too.
    const explicit = resolveClient({ "data-dir": server.dataDir, server: `${server.adminUrl}/` }, {});
    expect(await explicit.get<NodeView[]>("/api/v1/nodes")).toEqual([]);
  });

  test("the recorded certificate is trusted for the recorded URL even when it names another host", async () => {
    const server = await tlsServer(undefined, named);
    expect(await resolveClient({ "data-dir": server.dataDir }, {}).get<NodeView[]>("/api/v1/nodes")).toEqual([]);
    // --ca alone keeps the host name check.
    const err = await resolveClient({ "data-dir": server.dataDir, ca: named.cert }, {}).get<never>("/api/v1/nodes").catch((e: Error) => e);
    expect(err.message).toContain("its TLS certificate is not valid for 127.0.0.1");
  });

  test("elsewhere it needs --ca (or LLMGW_CA), and says so", async () => {
    const server = await tlsServer();
    const elsewhere = scratchDir("llmgw-cli-");
    cleanup.push(() => rmSync(elsewhere, { recursive: true, force: true }));
    const flags = { "data-dir": elsewhere, server: server.adminUrl, token: server.adminToken };

    const err = await resolveClient(flags, {}).get<never>("/api/v1/nodes").catch((e: Error) => e);
    expect(err).toBeInstanceOf(CliError);
    expect(err.message).toContain(`cannot reach the llmgw server at ${server.adminUrl}: its TLS certificate is not trusted`);
    expect(err.message).toContain("--ca FILE");

    expect(await resolveClient({ ...flags, ca: good.cert }, {}).get("/api/v1/nodes")).toEqual([]);
    expect(await resolveClient(flags, { LLMGW_CA: good.cert }).get("/api/v1/nodes")).toEqual([]);

    const wrong = await resolveClient({ ...flags, ca: other.cert }, {}).get<never>("/api/v1/nodes").catch((e: Error) => e);
    expect(wrong.message).toContain(`not trusted by --ca ${other.cert}`);
    expect(() => resolveClient({ ...flags, ca: join(dir, "none.pem") }, {})).toThrow(`--ca ${join(dir, "none.pem")}: cannot read it`);
  });
});
