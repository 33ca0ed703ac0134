// Weights served to peers on the agent's log listener: a models directory laid out as
// hub/download.ts lays it out (fetched from the stand-in Hub), a grant the head node would issue
// opens one whole verified file of one revision until it ends, byte for byte and resumable with
// Range; a grant for another file or revision, an expired one, one made with another node's
// credential, a path out of the snapshot, a link leading out of the cache entry and a partial
// blob are all refused; serves at once are bounded; and downloadBlob, as the fetcher uses it,
// copies a file from the peer and verifies it.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { appendFileSync, mkdirSync, readFileSync, renameSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startLogServer } from "../../src/agent/logs";
import { GrowingFiles } from "../../src/agent/weights-growing";
import { RateLimiter } from "../../src/agent/weights-rate";
import { snapshotBlob } from "../../src/agent/weights-disk";
import { WeightsServer, byteRange } from "../../src/agent/weights-serve";
import { HubClient } from "../../src/hub/client";
import { blobPath, cacheEntry, downloadBlob, linkSnapshot } from "../../src/hub/download";
import { ManualScheduler, realScheduler } from "../../src/lib/scheduler";
import { credentialDigest } from "../../src/protocol/heartbeat";
import { type WeightFile, transferGrant } from "../../src/protocol/weights";
import { parsePeerWeightsRequest, peerWeightsPath, peerWeightsUrl } from "../../src/protocol/weights-peer";
import { type FakeHub, startFakeHub } from "../../src/sim/fake-hub";
import { until } from "../helpers/until";
import { scratchDir } from "../helpers/tmp";
import { pseudoRandomBytes as randomBytes } from "../helpers/fake-hub";

const MB = 1024 * 1024;
const REPO = "org/tiny";
const SHARD = "model-00001-of-00002.safetensors";

function writeModel(dir: string, seed: number): void {
  mkdirSync(join(dir, "tokenizer"), { recursive: true });
  writeFileSync(join(dir, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], seed }));
  writeFileSync(join(dir, "tokenizer", "tokenizer.json"), JSON.stringify({ version: "1.0", seed }));
  writeFileSync(join(dir, SHARD), randomBytes(3 * MB, seed));
  writeFileSync(join(dir, "model-00002-of-00002.safetensors"), randomBytes(MB + 17, seed + 1));
}

describe("weights served to peers", () => {
  const CREDENTIAL = "llmgw-node-credential-of-the-serving-node";
  const OWN = credentialDigest(CREDENTIAL);
  const OTHER = credentialDigest("llmgw-node-credential-of-another-node");
  const clock = new ManualScheduler(Date.UTC(2026, 5, 1));
  let hub: FakeHub;
  let root: string;
  let models: string;
  let entry: string;
  let v1: string;
  let v2: string;
  let files: WeightFile[];
  let listener: { port: number; stop(): void };
  let weights: WeightsServer;
  let base: string;

  beforeAll(async () => {
    root = scratchDir("llmgw-peer-src-");
    writeModel(join(root, "v1"), 1);
    writeModel(join(root, "v2"), 2);
    writeModel(join(root, "other"), 3);
    hub = startFakeHub({
      repos: [
        { repo: REPO, revisions: [{ dir: join(root, "v1"), refs: ["v1.0"] }, { dir: join(root, "v2"), refs: ["main"] }] },
        { repo: "org/other", revisions: [{ dir: join(root, "other"), refs: ["main"] }] },
      ],
    });
    models = scratchDir("llmgw-peer-models-");
    const client = new HubClient({ endpoint: hub.url });
    for (const [repo, ref] of [[REPO, "v1.0"], [REPO, "main"], ["org/other", "main"]] as const) {
      const commit = await client.resolve(repo, ref);
      const list = await client.files(repo, commit);
      const e = cacheEntry(models, repo);
      for (const file of list) await downloadBlob({ url: client.fileUrl(repo, commit, file.path), entry: e, file });
      await linkSnapshot(e, commit, list);
      if (repo === REPO && ref === "main") files = list;
    }
    entry = cacheEntry(models, REPO);
    v1 = hub.commit(REPO, "v1.0");
    v2 = hub.commit(REPO, "main");
    weights = new WeightsServer({ modelsDir: models, credentialSha256: () => OWN, scheduler: clock });
    // The agent's own listener, as log-service.ts starts it: /logs/ stays the head node's.
    listener = startLogServer({
      host: "127.0.0.1",
      port: 0,
      token: "logs-token-of-the-head-node",
      fileFor: () => undefined,
      scheduler: realScheduler,
      also: { prefix: "/weights/v1/", handle: (req) => weights.handle(req) },
    });
    base = `http://127.0.0.1:${listener.port}`;
  });
  afterAll(() => {
    listener?.stop();
    hub?.stop();
  });

  const soon = () => clock.now() + 60_000;
  const get = (path: string, revision: string, grant: string | undefined, expires = soon(), headers: Record<string, string> = {}) =>
    fetch(peerWeightsUrl(base, REPO, revision, path, expires), { headers: { ...(grant ? { authorization: `Bearer ${grant}` } : {}), ...headers } });
  const grantFor = (path: string, revision = v2, expires = soon(), digest = OWN) => transferGrant(digest, REPO, revision, path, expires);

  test("a grant for the file opens it, byte for byte; a Range resumes it; a range past its end is 416", async () => {
    const expires = soon();
    const res = await get(SHARD, v2, grantFor(SHARD, v2, expires), expires);
    expect(res.status).toBe(200);
    expect(res.headers.get("accept-ranges")).toBe("bytes");
    const want = readFileSync(join(root, "v2", SHARD));
    expect(new Uint8Array(await res.arrayBuffer())).toEqual(new Uint8Array(want));

    const part = await get(SHARD, v2, grantFor(SHARD, v2, expires), expires, { range: "bytes=1000000-" });
    expect(part.status).toBe(206);
    expect(part.headers.get("content-range")).toBe(`bytes 1000000-${3 * MB - 1}/${3 * MB}`);
    expect(new Uint8Array(await part.arrayBuffer())).toEqual(new Uint8Array(want.subarray(1_000_000)));

    const tail = await get(SHARD, v2, grantFor(SHARD, v2, expires), expires, { range: "bytes=-10" });
    expect(tail.status).toBe(206);
    expect(new Uint8Array(await tail.arrayBuffer())).toEqual(new Uint8Array(want.subarray(want.length - 10)));

    const past = await get(SHARD, v2, grantFor(SHARD, v2, expires), expires, { range: `bytes=${3 * MB}-` });
    expect(past.status).toBe(416);
    expect(past.headers.get("content-range")).toBe(`bytes */${3 * MB}`);

    // A nested path, and the other revision with its own grant: each its own bytes.
    const tok = await get("tokenizer/tokenizer.json", v1, grantFor("tokenizer/tokenizer.json", v1, expires), expires);
    expect(await tok.text()).toBe(readFileSync(join(root, "v1", "tokenizer", "tokenizer.json"), "utf8"));
  });

  test("a grant for another file, another revision or from another node's credential, none, or an expired one opens nothing", async () => {
    const expires = soon();
    const refused = async (res: Response) => ({ status: res.status, body: (await res.text()).trim() });
    expect(await refused(await get(SHARD, v2, grantFor("config.json", v2, expires), expires))).toEqual({ status: 401, body: "a grant from the head node for this file is needed" });
    expect((await get(SHARD, v2, grantFor(SHARD, v1, expires), expires)).status).toBe(401);
    expect((await get(SHARD, v2, grantFor(SHARD, v2, expires, OTHER), expires)).status).toBe(401);
    expect((await get(SHARD, v2, undefined, expires)).status).toBe(401);
    // The grant's end is part of it: a later one written into the URL does not match.
    expect((await get(SHARD, v2, grantFor(SHARD, v2, expires), expires + 3_600_000)).status).toBe(401);
    const past = clock.now() - 1;
    expect(await refused(await get(SHARD, v2, grantFor(SHARD, v2, past), past))).toEqual({ status: 403, body: "the grant has expired: ask the head node for a new one" });
    // Time moves past a grant's end.
    const ends = clock.now() + 1_000;
    expect((await get("config.json", v2, grantFor("config.json", v2, ends), ends)).status).toBe(200);
    clock.advance(1_000);
    expect((await get("config.json", v2, grantFor("config.json", v2, ends), ends)).status).toBe(403);
    // A node without its credential yet serves nothing.
    const fresh = new WeightsServer({ modelsDir: models, credentialSha256: () => undefined, scheduler: clock });
    const req = new Request(peerWeightsUrl(base, REPO, v2, SHARD, expires), { headers: { authorization: `Bearer ${transferGrant("", REPO, v2, SHARD, expires)}` } });
    expect((await fresh.handle(req)).status).toBe(401);
    // The log listener's own routes are untouched by it.
    expect((await fetch(`${base}/logs/r1`)).status).toBe(401);
  });

  test("a path out of the snapshot, a link leading out of the cache entry, a plain file and a partial blob are not served, even with a grant", async () => {
    const expires = soon();
    // "..": an encoded slash makes it a segment of its own; a raw one, however the URL is written.
    const sneaky = "config.json/../../../../models--org--other/snapshots";
    const enc = `${base}/weights/v1/org/tiny/${v2}/tokenizer%2F..%2F..%2F..%2F..%2Fetc%2Fpasswd?expires=${expires}`;
    expect((await fetch(enc, { headers: { authorization: `Bearer ${grantFor("tokenizer/../../../../etc/passwd", v2, expires)}` } })).status).toBe(404);
    expect(parsePeerWeightsRequest(`/weights/v1/org/tiny/${v2}/${sneaky}`, String(expires))).toBeUndefined();
    expect(parsePeerWeightsRequest(`/weights/v1/org/tiny/${v2}//etc/passwd`, String(expires))).toBeUndefined();
    expect(parsePeerWeightsRequest(`/weights/v1/org/..%2F..%2Ftiny/${v2}/config.json`, String(expires))).toBeUndefined();
    expect(parsePeerWeightsRequest(`/weights/v1/org/tiny/main/config.json`, String(expires))).toBeUndefined();
    expect(parsePeerWeightsRequest(`/weights/v1/org/tiny/${v2}/config.json`, "soon")).toBeUndefined();
    expect(parsePeerWeightsRequest(peerWeightsPath(REPO, v2, "tokenizer/tokenizer.json", expires).split("?")[0]!, String(expires))).toEqual({ repo: REPO, revision: v2, path: "tokenizer/tokenizer.json", expiresAt: expires });

    const snap = join(entry, "snapshots", v2);
    // A link to a file outside the models directory, and to another entry's blob.
    writeFileSync(join(root, "secret.safetensors"), "not weights");
    symlinkSync(join(root, "secret.safetensors"), join(snap, "outside.safetensors"));
    const otherShard = readFileSync(join(root, "other", SHARD));
    symlinkSync(join(cacheEntry(models, "org/other"), "snapshots", hub.commit("org/other", "main"), SHARD), join(snap, "borrowed.safetensors"));
    // A folder of the snapshot that is a link into another entry's snapshot.
    symlinkSync(join(cacheEntry(models, "org/other"), "snapshots", hub.commit("org/other", "main"), "tokenizer"), join(snap, "tok2"));
    // A plain file where a link belongs.
    writeFileSync(join(snap, "plain.json"), "{}");
    // A link to a blob still being written, and to one that is only partial.
    const shardFile = files.find((f) => f.path === SHARD)!;
    writeFileSync(`${blobPath(entry, { sha256: "a".repeat(64), oid: "0".repeat(40) })}.incomplete`, otherShard.subarray(0, 100));
    symlinkSync(`../../blobs/${"a".repeat(64)}.incomplete`, join(snap, "partial.safetensors"));
    symlinkSync(`../../blobs/${"a".repeat(64)}`, join(snap, "unfinished.safetensors"));
    for (const path of ["outside.safetensors", "borrowed.safetensors", "tok2/tokenizer.json", "plain.json", "partial.safetensors", "unfinished.safetensors", "absent.safetensors"]) {
      const res = await get(path, v2, grantFor(path, v2, expires), expires);
      expect({ path, status: res.status, body: (await res.text()).trim() }).toEqual({ path, status: 404, body: "this node holds no whole verified copy of that file, and is not fetching it" });
    }
    // What the check accepts: the link linkSnapshot made, to its whole blob.
    expect(await snapshotBlob(entry, v2, SHARD)).toEqual({ file: blobPath(entry, shardFile), size: 3 * MB });
  });

  test("downloadBlob copies a file from the peer with the grant and verifies it; an interrupted copy resumes with Range", async () => {
    const dest = cacheEntry(scratchDir("llmgw-peer-dest-"), REPO);
    const file = files.find((f) => f.path === SHARD)!;
    const expires = soon();
    const order = { url: peerWeightsUrl(base, REPO, v2, SHARD, expires), headers: { authorization: `Bearer ${grantFor(SHARD, v2, expires)}` }, entry: dest, file };
    // The first 1 MB arrived before the copy stopped.
    mkdirSync(join(dest, "blobs"), { recursive: true });
    const want = readFileSync(join(root, "v2", SHARD));
    writeFileSync(`${blobPath(dest, file)}.incomplete`, want.subarray(0, MB));
    expect(await downloadBlob(order)).toBe(2 * MB);
    expect(readFileSync(blobPath(dest, file))).toEqual(want);
    const small = files.find((f) => f.path === "config.json")!;
    expect(await downloadBlob({ ...order, url: peerWeightsUrl(base, REPO, v2, small.path, expires), headers: { authorization: `Bearer ${grantFor(small.path, v2, expires)}` }, file: small })).toBe(small.size);
    // With a grant for another file the peer refuses, and the fetcher says so.
    const err = await downloadBlob({ ...order, entry: cacheEntry(scratchDir("llmgw-peer-dest-"), REPO), headers: { authorization: `Bearer ${grantFor("config.json", v2, expires)}` } }).catch((e) => e);
    expect(err.status).toBe(401);
  });

  test("serves at once are bounded (503 with Retry-After past it), their bytes go through the rate limit, and a peer going away frees its slot", async () => {
    const time = new ManualScheduler(clock.now());
    const slow = new WeightsServer({ modelsDir: models, credentialSha256: () => OWN, scheduler: clock, maxServes: 1, rate: new RateLimiter({ bytesPerSecond: 64 * 1024, scheduler: time }) });
    const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (req) => slow.handle(req) });
    try {
      const at = `http://127.0.0.1:${server.port}`;
      const expires = soon();
      const stop = new AbortController();
      const first = await fetch(peerWeightsUrl(at, REPO, v2, SHARD, expires), { headers: { authorization: `Bearer ${grantFor(SHARD, v2, expires)}` }, signal: stop.signal });
      expect(first.status).toBe(200);
      const reader = first.body!.getReader();
      // One second's bucket goes at once; then the serve waits for the rate limiter's time.
      let got = 0;
      while (got < 64 * 1024) got += (await reader.read()).value!.byteLength;
      expect(slow.serving).toBe(1);
      expect(slow.servingRevisions()).toEqual(new Set([`${REPO}@${v2}`]));
      const busy = await fetch(peerWeightsUrl(at, REPO, v2, "config.json", expires), { headers: { authorization: `Bearer ${grantFor("config.json", v2, expires)}` } });
      expect(busy.status).toBe(503);
      expect(busy.headers.get("retry-after")).toBe("2");
      await busy.text();
      stop.abort();
      await until("the serve's slot to be freed", () => slow.serving === 0);
      expect(slow.servingRevisions().size).toBe(0);
      await time.run(120_000);
      const after = await fetch(peerWeightsUrl(at, REPO, v2, "config.json", expires), { headers: { authorization: `Bearer ${grantFor("config.json", v2, expires)}` } });
      expect(after.status).toBe(200);
      await after.text();
    } finally {
      server.stop(true);
    }
  });

  test("a file still being fetched here is served as it arrives: its bytes so far, then the rest; a peer copies and verifies it", async () => {
    const time = new ManualScheduler(clock.now());
    const growing = new GrowingFiles();
    const here = scratchDir("llmgw-peer-growing-");
    const server = new WeightsServer({ modelsDir: here, credentialSha256: () => OWN, scheduler: time, growing });
    const listen = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (req) => server.handle(req) });
    try {
      const at = `http://127.0.0.1:${listen.port}`;
      const file = files.find((f) => f.path === SHARD)!;
      const want = readFileSync(join(root, "v2", SHARD));
      const blob = blobPath(cacheEntry(here, REPO), file);
      mkdirSync(join(blob, ".."), { recursive: true });
      const expires = soon();
      const auth = { authorization: `Bearer ${grantFor(SHARD, v2, expires)}` };
      // Asked before the fetch here begins: the request waits for it to begin.
      const asked = fetch(peerWeightsUrl(at, REPO, v2, SHARD, expires), { headers: auth });
      await until("the request waiting for the copy to begin", () => growing.awaiting === 1);
      writeFileSync(`${blob}.incomplete`, want.subarray(0, MB));
      const g = growing.begin(REPO, v2, SHARD, `${blob}.incomplete`, file.size, MB);
      const res = await asked;
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      let got = 0;
      const parts: Uint8Array[] = [];
      while (got < MB) {
        const { value } = await reader.read();
        parts.push(value!);
        got += value!.byteLength;
      }
      // Nothing past what reached the disk.
      expect(got).toBe(MB);
      // A second peer resumes mid-file with Range, through downloadBlob as the fetcher uses it.
      const dest = cacheEntry(scratchDir("llmgw-peer-dest-"), REPO);
      mkdirSync(join(blobPath(dest, file), ".."), { recursive: true });
      writeFileSync(`${blobPath(dest, file)}.incomplete`, want.subarray(0, MB / 2));
      const copy = downloadBlob({ url: peerWeightsUrl(at, REPO, v2, SHARD, expires), headers: auth, entry: dest, file });
      appendFileSync(`${blob}.incomplete`, want.subarray(MB, 2 * MB));
      g.grow(MB);
      appendFileSync(`${blob}.incomplete`, want.subarray(2 * MB));
      renameSync(`${blob}.incomplete`, blob);
      g.grow(file.size - 2 * MB);
      // As the fetcher does: linked into the snapshot before the partial copy is let go.
      await linkSnapshot(cacheEntry(here, REPO), v2, [file]);
      growing.finish(REPO, v2, SHARD, g, "whole");
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        parts.push(value!);
      }
      expect(Buffer.concat(parts)).toEqual(want);
      expect(await copy).toBe(file.size - MB / 2);
      expect(readFileSync(blobPath(dest, file))).toEqual(want);
      expect(server.serving).toBe(0);

      // A copy here that fails its checksum ends the serve in an error: the peer's transfer fails too.
      writeFileSync(`${blob}.incomplete`, want.subarray(0, MB));
      const bad = growing.begin(REPO, "b".repeat(40), SHARD, `${blob}.incomplete`, file.size, MB);
      const e2 = soon();
      const res2 = await fetch(peerWeightsUrl(at, REPO, "b".repeat(40), SHARD, e2), { headers: { authorization: `Bearer ${grantFor(SHARD, "b".repeat(40), e2)}` } });
      const r2 = res2.body!.getReader();
      let got2 = 0;
      while (got2 < MB) got2 += (await r2.read()).value!.byteLength;
      growing.finish(REPO, "b".repeat(40), SHARD, bad, "failed");
      expect(await r2.read().then(() => "more", (e) => `error: ${e}`)).toStartWith("error");
      await until("the serve's slot to be freed", () => server.serving === 0);
      // Nor is a file served that this node neither holds nor fetches (after a short wait for it to begin).
      const e3 = soon();
      const none = fetch(peerWeightsUrl(at, REPO, v1, SHARD, e3), { headers: { authorization: `Bearer ${grantFor(SHARD, v1, e3)}` } });
      await until("the request waiting for a copy to begin", () => growing.awaiting === 1);
      await time.run(60_000);
      expect((await none).status).toBe(404);
    } finally {
      listen.stop(true);
    }
  });

  test("Range forms", () => {
    expect(byteRange(null, 100)).toBeUndefined();
    expect(byteRange("bytes=0-9", 100)).toEqual({ start: 0, end: 9 });
    expect(byteRange("bytes=90-200", 100)).toEqual({ start: 90, end: 99 });
    expect(byteRange("bytes=-200", 100)).toEqual({ start: 0, end: 99 });
    expect(byteRange("bytes=100-", 100)).toBe("unsatisfiable");
    expect(byteRange("bytes=-0", 100)).toBe("unsatisfiable");
    expect(byteRange("bytes=5-1", 100)).toBe("unsatisfiable");
    expect(byteRange("bytes=0-1,5-6", 100)).toBeUndefined();
    expect(byteRange("items=0-1", 100)).toBeUndefined();
  });
});
