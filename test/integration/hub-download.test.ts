// The Hub client and the downloader against the stand-in Hub on 127.0.0.1: a branch resolved to
// its commit, the tree listed across pages with each LFS file's sha256, files fetched into the
// Hugging Face cache layout and linked into a snapshot the agent's scan calls complete; a
// transfer cut short resumes where it stopped (the Hub serves each byte once); a corrupted file
// is refused and deleted; a gated repository refuses without the token, and the token never
// goes to the storage host a redirect leads to.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { hubRevisions } from "../../src/agent/weights";
import { HubClient, HubError, nextLink } from "../../src/hub/client";
import { ChecksumError, TransferError, blobPath, cacheEntry, downloadBlob, linkSnapshot } from "../../src/hub/download";
import { type FakeHub, startFakeHub } from "../../src/sim/fake-hub";
import { scratchDir } from "../helpers/tmp";
import { pseudoRandomBytes as randomBytes } from "../helpers/fake-hub";

const MB = 1024 * 1024;

function writeModel(dir: string, seed: number): void {
  mkdirSync(join(dir, "tokenizer"), { recursive: true });
  writeFileSync(join(dir, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], seed }));
  writeFileSync(join(dir, "tokenizer", "tokenizer.json"), JSON.stringify({ version: "1.0", seed }));
  writeFileSync(join(dir, "model-00001-of-00002.safetensors"), randomBytes(3 * MB, seed));
  writeFileSync(join(dir, "model-00002-of-00002.safetensors"), randomBytes(MB + 17, seed + 1));
  const weight_map = { "a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors" };
  writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map }));
}

describe("the Hub client and downloader", () => {
  let hub: FakeHub;
  let root: string;
  const TOKEN = "hf_test_token_0123456789";

  beforeAll(() => {
    root = scratchDir("llmgw-hub-");
    for (const [d, seed] of [["v1", 1], ["v2", 2], ["gated", 3], ["bad", 4]] as const) writeModel(join(root, d), seed);
    // Larger than what sockets and readers on 127.0.0.1 take ahead of a transfer that stops.
    mkdirSync(join(root, "big"));
    writeFileSync(join(root, "big", "model.safetensors"), randomBytes(48 * MB, 5));
    hub = startFakeHub({
      token: TOKEN,
      pageSize: 2,
      repos: [
        { repo: "org/tiny", revisions: [{ dir: join(root, "v1"), refs: ["v1.0"] }, { dir: join(root, "v2"), refs: ["main"] }] },
        { repo: "org/gated", revisions: [{ dir: join(root, "gated"), refs: ["main"] }], gated: true },
        { repo: "org/big", revisions: [{ dir: join(root, "big"), refs: ["main"] }] },
        { repo: "org/bad", revisions: [{ dir: join(root, "bad"), refs: ["main"] }], corrupt: ["model-00002-of-00002.safetensors"] },
      ],
    });
  });
  afterAll(() => hub.stop());

  const fetchAll = async (client: HubClient, repo: string, commit: string, models: string, fetcher?: typeof fetch) => {
    const files = await client.files(repo, commit);
    const entry = cacheEntry(models, repo);
    for (const file of files) await downloadBlob({ url: client.fileUrl(repo, commit, file.path), headers: client.headers(), entry, file, ...(fetcher ? { fetch: fetcher } : {}) });
    await linkSnapshot(entry, commit, files);
    return { files, entry };
  };

  test("a branch or tag resolves to its commit; the tree lists every file across pages, LFS files with their sha256", async () => {
    const client = new HubClient({ endpoint: hub.url });
    const main = await client.resolve("org/tiny", "main");
    expect(main).toBe(hub.commit("org/tiny", "main"));
    expect(await client.resolve("org/tiny", "v1.0")).toBe(hub.commit("org/tiny", "v1.0"));
    expect(await client.resolve("org/tiny", main)).toBe(main);
    const files = await client.files("org/tiny", main);
    expect(files.map((f) => f.path)).toEqual(["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer/tokenizer.json"]);
    const shard = files.find((f) => f.path === "model-00001-of-00002.safetensors")!;
    expect(shard.size).toBe(3 * MB);
    expect(shard.sha256).toBe(new Bun.CryptoHasher("sha256").update(readFileSync(join(root, "v2", shard.path))).digest("hex"));
    expect(files.find((f) => f.path === "config.json")!.sha256).toBeNull();

    const err = await client.resolve("org/tiny", "no-such-branch").catch((e) => e);
    expect(err).toBeInstanceOf(HubError);
    expect(err.kind).toBe("not_found");
    expect(err.message).toContain("no-such-branch");
    expect((await client.resolve("org/none", "main").catch((e) => e)).message).toContain("org/none");
    // A Link to another host is not followed.
    expect(nextLink('<https://evil.example/api/x?cursor=2>; rel="next"', hub.url)).toBeUndefined();
    expect(nextLink(`<${hub.url}/api/x?cursor=2>; rel="next"`, hub.url)).toBe(`${hub.url}/api/x?cursor=2`);
  });

  test("files land in the Hugging Face cache layout, linked into a snapshot the agent's scan calls complete", async () => {
    const models = scratchDir("llmgw-models-");
    const client = new HubClient({ endpoint: hub.url });
    const commit = await client.resolve("org/tiny", "main");
    const { entry, files } = await fetchAll(client, "org/tiny", commit, models);
    expect(entry).toBe(join(models, "models--org--tiny"));
    expect(hubRevisions(entry)).toEqual({ revisions: [commit], weights: true });
    for (const f of files) expect(readFileSync(join(entry, "snapshots", commit, f.path))).toEqual(readFileSync(join(root, "v2", f.path)));
    expect(readlinkSync(join(entry, "snapshots", commit, "tokenizer", "tokenizer.json"))).toStartWith("../../../blobs/");
    // Fetched again: nothing moves.
    const before = hub.served().total;
    await fetchAll(client, "org/tiny", commit, models);
    expect(hub.served().total).toBe(before);
  });

  test("a transfer cut short resumes where it stopped: each byte is served once", async () => {
    const models = scratchDir("llmgw-models-");
    const client = new HubClient({ endpoint: hub.url });
    const commit = await client.resolve("org/big", "main");
    const [file] = await client.files("org/big", commit);
    const entry = cacheEntry(models, "org/big");
    const key = "org/big/model.safetensors";
    const servedBefore = hub.served().byFile[key] ?? 0;
    const stop = new AbortController();
    let got = 0;
    const cut = await downloadBlob({
      url: client.fileUrl("org/big", commit, file!.path),
      entry,
      file: file!,
      signal: stop.signal,
      onBytes: (n) => {
        got += n;
        if (got >= MB) stop.abort();
      },
    }).catch((e) => e);
    expect(cut).toBeInstanceOf(Error);
    const partial = `${blobPath(entry, file!)}.incomplete`;
    expect(existsSync(partial)).toBe(true);
    const kept = readFileSync(partial).length;
    expect(kept).toBeGreaterThanOrEqual(MB);
    expect(kept).toBeLessThan(file!.size);
    const moved = await downloadBlob({ url: client.fileUrl("org/big", commit, file!.path), entry, file: file! });
    expect(moved).toBe(file!.size - kept);
    expect(existsSync(partial)).toBe(false);
    expect(readFileSync(blobPath(entry, file!))).toEqual(readFileSync(join(root, "big", file!.path)));
    // What the Hub served: the file once, plus what was in flight when the first try stopped
    // (taken ahead by sockets and readers, not written).
    const served = (hub.served().byFile[key] ?? 0) - servedBefore;
    expect(served).toBeLessThan(file!.size + 16 * MB);
  });

  test("a file whose bytes do not match its listed sha256 is refused, named, and deleted", async () => {
    const models = scratchDir("llmgw-models-");
    const client = new HubClient({ endpoint: hub.url });
    const commit = await client.resolve("org/bad", "main");
    const files = await client.files("org/bad", commit);
    const file = files.find((f) => f.path === "model-00002-of-00002.safetensors")!;
    const entry = cacheEntry(models, "org/bad");
    const err = await downloadBlob({ url: client.fileUrl("org/bad", commit, file.path), entry, file }).catch((e) => e);
    expect(err).toBeInstanceOf(ChecksumError);
    expect(err.message).toContain("model-00002-of-00002.safetensors");
    expect(err.message).toContain("checksum");
    expect(existsSync(`${blobPath(entry, file)}.incomplete`)).toBe(false);
    expect(existsSync(blobPath(entry, file))).toBe(false);
  });

  test("a gated repository: its bytes refused without the token, fetched with it; the token never reaches the storage a redirect leads to", async () => {
    const models = scratchDir("llmgw-models-");
    const open = new HubClient({ endpoint: hub.url });
    const commit = await open.resolve("org/gated", "main");
    const file = (await open.files("org/gated", commit)).find((f) => f.path.endsWith(".safetensors"))!;
    const err = await downloadBlob({ url: open.fileUrl("org/gated", commit, file.path), entry: cacheEntry(models, "org/gated"), file }).catch((e) => e);
    expect(err).toBeInstanceOf(TransferError);
    expect(err.status).toBe(401);
    expect(err.message).toContain("gated");

    const seen: { url: string; auth: string | null }[] = [];
    const recording = ((input: string | URL | Request, init?: RequestInit) => {
      seen.push({ url: String(input), auth: new Headers(init?.headers).get("authorization") });
      return fetch(input, init);
    }) as typeof fetch;
    // The storage path of the stand-in is on the same host; a storage host of its own is what
    // the Hub uses, so the recording moves it: a redirect to another origin must drop the token.
    const client = new HubClient({ endpoint: hub.url, token: TOKEN });
    const other = hub.url.replace("127.0.0.1", "localhost");
    const crossing = ((input: string | URL | Request, init?: RequestInit) =>
      recording(input, init).then((res) => {
        const loc = res.headers.get("location");
        if (loc === null) return res;
        return new Response(null, { status: res.status, headers: { location: `${other}${loc}` } });
      })) as typeof fetch;
    const { entry } = await fetchAll(client, "org/gated", commit, models, crossing);
    expect(hubRevisions(entry).revisions).toEqual([commit]);
    const toStorage = seen.filter((s) => s.url.startsWith(other));
    expect(toStorage.length).toBeGreaterThan(0);
    expect(toStorage.every((s) => s.auth === null)).toBe(true);
    expect(seen.filter((s) => s.url.startsWith(hub.url)).every((s) => s.auth === `Bearer ${TOKEN}`)).toBe(true);
  });
});
