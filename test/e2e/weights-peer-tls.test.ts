// Peer copies over HTTPS: with the head node serving TLS, every agent's listener serves HTTPS
// with a self-signed certificate it sends in its heartbeats; the head node relays that
// certificate in each order to copy from the node, and the copying node trusts exactly it. Two
// nodes of one fabric pull a model: the Hub serves each file once, the other copy comes from the
// peer over HTTPS. Through the compiled binary.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NodeView } from "../../src/protocol/views";
import type { WeightsRowView } from "../../src/protocol/weights-admin";
import { run, until } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, startHubProcess, pseudoRandomBytes as bytesOf } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };
const MB = 1024 * 1024;

describe("peer copies over the agents' HTTPS listeners", () => {
  let hub: HubProcess;
  let c: Cluster;
  let src: string;
  let certPath: string;
  let ca: string;
  const hubPort = freePort();
  const cli = (...args: string[]) => run(c.bin, args, { cwd: c.dir, env: { LLMGW_SERVER: c.serve.adminUrl, LLMGW_TOKEN: c.serve.adminToken, LLMGW_CA: certPath, COLUMNS: "200" } });
  const api = async <T>(path: string, init: RequestInit = {}): Promise<{ status: number; body: T }> => {
    const r = await fetch(`${c.serve.adminUrl}/api/v1${path}`, { ...init, headers: { authorization: `Bearer ${c.serve.adminToken}`, "content-type": "application/json" }, tls: { ca } } as RequestInit);
    return { status: r.status, body: (await r.json()) as T };
  };

  beforeAll(async () => {
    src = scratchDir("llmgw-hubsrc-");
    const d = join(src, "alpha");
    mkdirSync(d);
    writeFileSync(join(d, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], name: "alpha" }));
    writeFileSync(join(d, "tokenizer.json"), JSON.stringify({ version: "1.0" }));
    writeFileSync(join(d, "model.safetensors"), bytesOf(2 * MB, 31));
    hub = await startHubProcess({ port: hubPort, bytesPerSecond: 2 * MB, repos: [{ repo: "org/alpha", revisions: [{ dir: d, refs: ["main"] }] }] });
    certPath = join(src, "head.pem");
    const keyPath = join(src, "head.key");
    const r = Bun.spawnSync(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-days", "2", "-keyout", keyPath, "-out", certPath], { stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`openssl: ${r.stderr.toString()}`);
    ca = readFileSync(certPath, "utf8");
    c = new Cluster(["--hf-endpoint", hub.url, "--tls-cert", certPath, "--tls-key", keyPath]);
    await c.startServe();
    expect(c.serve.adminUrl).toStartWith("https://");
    for (const n of ["w1", "w2"]) c.startAgent(n, ["--models-dir", join(c.dir, `models-${n}`), "--server-ca", certPath]);
    await until("the agents registered", async () => (await api<NodeView[]>("/nodes")).body.filter((n) => n.state === "ready").length === 2);
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  test("two nodes pull a model: the Hub serves each file once, the rest is copied from the peer over HTTPS", async () => {
    // Both listeners serve HTTPS (their certificates are in their heartbeats).
    for (const n of ["w1", "w2"]) await until(`${n}'s listener certificate made`, () => existsSync(join(c.stateDir(n), "logs-tls.crt")));
    expect((await api("/models/alpha", { method: "PUT", body: JSON.stringify({ source: "hf://org/alpha", replicas: { min: 0, max: 1 }, profiles: [PROFILE] }) })).status).toBe(201);
    const commit = await hub.commit("org/alpha", "main");
    const pulled = cli("weights", "pull", "alpha", "--nodes", "w1,w2");
    expect(pulled.stderr).toBe("");
    expect(pulled.code).toBe(0);
    await until("present on w1 and w2", async () => {
      const rows = (await api<WeightsRowView[]>("/weights")).body;
      return rows.find((r) => r.repo === "org/alpha")?.nodes.every((n) => n.state === "present") === true;
    }, { timeoutMs: 40_000 });
    const files = ["config.json", "tokenizer.json", "model.safetensors"];
    for (const n of ["w1", "w2"]) for (const f of files) expect(readFileSync(join(c.dir, `models-${n}`, "models--org--alpha", "snapshots", commit, f))).toEqual(readFileSync(join(src, "alpha", f)));
    const size = files.reduce((n, f) => n + readFileSync(join(src, "alpha", f)).length, 0);
    const served = await hub.served();
    expect(Object.entries(served.byFile).filter(([k]) => k.startsWith("org/alpha/")).reduce((n, [, v]) => n + v, 0)).toBe(size);
    const sources = ["w1", "w2"].flatMap((n) => c.agentLog(n).filter((l) => l.msg === "weights transfer finished" && (l as { repo?: string }).repo === "org/alpha").map((l) => (l as { from?: string }).from));
    expect(sources.length).toBe(6);
    expect(sources.filter((f) => f !== "hub").length).toBe(3);
  }, 90_000);
});
