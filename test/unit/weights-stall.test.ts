// A transfer behind a stalled source comes loose: the fetcher stops a transfer whose source sent
// nothing for stallMs (on the injected scheduler, no sleeping) and reports it failed from that
// source, which the head node's plan then avoids; the partial copies it writes are told to the
// peers reading them as they grow, and that the copy stopped.

import { describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import pino from "pino";
import { STALL_MS, WeightsFetcher } from "../../src/agent/weights-fetch";
import { GrowingFiles } from "../../src/agent/weights-growing";
import { blobPath, cacheEntry } from "../../src/hub/download";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { FetchOrder, WeightsManifest } from "../../src/protocol/weights";
import { scratchDir } from "../helpers/tmp";
import { until } from "../helpers/until";

const REV = "d1".repeat(20);
const log = pino({ level: "silent" });

describe("WeightsFetcher: a stalled source", () => {
  const body = new TextEncoder().encode("0123456789abcdef");
  const sha256 = new Bun.CryptoHasher("sha256").update(body).digest("hex");
  const file = { path: "w.safetensors", size: body.length, sha256, oid: "0".repeat(40) };
  const manifest: WeightsManifest = { repo: "org/m", revision: REV, files: [file] };
  const peerOrder: FetchOrder = { repo: "org/m", revision: REV, file, from: { kind: "peer", node: "n2", url: "http://127.0.0.1:9/weights/v1/org/m/x/w.safetensors?expires=1", grant: "a".repeat(64) } };
  const hubOrder: FetchOrder = { repo: "org/m", revision: REV, file, from: { kind: "hub", url: "http://127.0.0.1:9/org/m/resolve/x/w.safetensors" } };

  test("a source that sends a few bytes and then nothing: stopped after stallMs, reported failed from it; another source finishes the file", async () => {
    const clock = new ManualScheduler();
    const models = scratchDir("llmgw-stall-");
    const growing = new GrowingFiles();
    const f = new WeightsFetcher({
      modelsDir: models,
      scheduler: clock,
      log,
      growing,
      fetch: (async (url: string, init: RequestInit) => {
        if (!String(url).includes("/weights/v1/")) return new Response(body);
        // The peer: four bytes, then silence until the transfer gives up.
        const stream = new ReadableStream<Uint8Array>({
          start(c) {
            c.enqueue(body.slice(0, 4));
            init.signal?.addEventListener("abort", () => c.error(new DOMException("aborted", "AbortError")));
          },
        });
        return new Response(stream, { status: 200 });
      }) as unknown as typeof fetch,
    });
    f.apply([manifest], [peerOrder]);
    await until("the first bytes from the peer", () => f.transfers()[0]?.done === 4);
    // Peers of this node may read those four bytes meanwhile.
    const partial = growing.get("org/m", REV, file.path)!;
    expect(partial.written).toBe(4);
    await clock.run(STALL_MS - 1_000);
    expect(f.transfers()[0]!.error).toBeNull();
    await clock.run(2_000);
    await until("the transfer to fail as stalled", () => f.transfers()[0]?.error !== null);
    expect(f.transfers()[0]).toMatchObject({ from: "n2", error: `${file.path}: no bytes from n2 for 30 s (stalled)` });
    expect(partial.ended).toBe("stopped");
    expect(growing.get("org/m", REV, file.path)).toBeUndefined();
    // The head node names another source: it starts at once and the file ends whole.
    f.apply([manifest], [hubOrder]);
    await until("the file whole from the other source", () => existsSync(blobPath(cacheEntry(models, "org/m"), file)));
    await until("the revision ready", () => f.ready("org/m", REV));
    f.stop();
  });
});
