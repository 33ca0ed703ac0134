// Room before a revision's first transfer (weights-room.ts) and the fetcher's use of it and of
// a checksum failure: the bytes still to come count a partial copy as there; a revision is asked
// about once, its transfers wait for the answer, a refusal is its reason until asked again after
// a while; the fetcher starts nothing for a revision that does not fit, says why in its progress
// and its transfer reports, and a file failing its checksum from the Hub makes the revision
// unobtainable (from a peer it does not: the head node has another source).

import { describe, expect, test } from "bun:test";
import { writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { blobPath, cacheEntry } from "../../src/hub/download";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { FetchOrder, WeightsManifest } from "../../src/protocol/weights";
import { WeightsFetcher } from "../../src/agent/weights-fetch";
import { ROOM_RETRY_MS, RoomGate, bytesToCome } from "../../src/agent/weights-room";
import { scratchDir } from "../helpers/tmp";
import { until } from "../helpers/until";

const REV = "c0".repeat(20);
const log = pino({ level: "silent" });

describe("bytesToCome", () => {
  test("each file's size less its partial copy, never below nothing", () => {
    expect(bytesToCome([])).toBe(0);
    expect(bytesToCome([{ size: 100, have: 0 }, { size: 50, have: 20 }])).toBe(130);
    expect(bytesToCome([{ size: 10, have: 30 }])).toBe(0);
  });
});

describe("RoomGate", () => {
  test("asks once, says no until the answer, then yes; a refusal is the reason until it is asked again after a while", async () => {
    const clock = new ManualScheduler();
    const asked: number[] = [];
    let fits = false;
    let settled = 0;
    const gate = new RoomGate({
      makeRoom: async (need) => {
        asked.push(need);
        return fits ? { fits: true, reason: null } : { fits: false, reason: "needs 10 B, more than --models-max-bytes 5 B allows" };
      },
      scheduler: clock,
      onSettled: () => settled++,
    });
    expect(gate.allowed("org/a", REV, () => 10)).toBe(false);
    expect(gate.allowed("org/a", REV, () => 10)).toBe(false);
    await until("answered", () => settled === 1);
    expect(asked).toEqual([10]);
    expect(gate.reason("org/a", REV)).toBe("disk: needs 10 B, more than --models-max-bytes 5 B allows");
    expect(gate.allowed("org/a", REV, () => 10)).toBe(false);
    expect(asked).toEqual([10]);
    fits = true;
    clock.advance(ROOM_RETRY_MS);
    expect(gate.allowed("org/a", REV, () => 10)).toBe(false);
    await until("answered again", () => settled === 2);
    expect(gate.allowed("org/a", REV, () => 10)).toBe(true);
    expect(gate.reason("org/a", REV)).toBeUndefined();
    expect(asked).toEqual([10, 10]);
  });

  test("nothing to come needs no room; a failing check is a reason; a revision forgotten is asked afresh", async () => {
    const clock = new ManualScheduler();
    let settled = 0;
    const asked: string[] = [];
    const gate = new RoomGate({
      makeRoom: async (_need, repo) => {
        asked.push(repo);
        throw new Error("statfs failed");
      },
      scheduler: clock,
      onSettled: () => settled++,
    });
    gate.allowed("org/whole", REV, () => 0);
    gate.allowed("org/b", REV, () => 5);
    await until("answered", () => settled === 2);
    expect(gate.allowed("org/whole", REV, () => 0)).toBe(true);
    expect(asked).toEqual(["org/b"]);
    expect(gate.reason("org/b", REV)).toBe("disk: room could not be made (statfs failed)");
    gate.keep(new Set([`org/whole@${REV}`]));
    expect(gate.reason("org/b", REV)).toBeUndefined();
    expect(gate.allowed("org/b", REV, () => 5)).toBe(false);
    await until("asked afresh", () => settled === 3);
    expect(asked).toEqual(["org/b", "org/b"]);
  });
});

describe("WeightsFetcher: room and checksum", () => {
  const body = new TextEncoder().encode("0123456789");
  const file = { path: "w.safetensors", size: body.length, sha256: "ab".repeat(32), oid: "0".repeat(40) };
  const manifest: WeightsManifest = { repo: "org/m", revision: REV, files: [file] };
  const hubOrder: FetchOrder = { repo: "org/m", revision: REV, file, from: { kind: "hub", url: "http://127.0.0.1:9/org/m/resolve/x/w.safetensors" } };
  const peerOrder: FetchOrder = { repo: "org/m", revision: REV, file, from: { kind: "peer", node: "n2", url: "http://127.0.0.1:9/weights/v1/org/m/x/w.safetensors?expires=1", grant: "g" } };

  function fetcher(o: { fits?: boolean; needs?: number[] } = {}) {
    const models = scratchDir("llmgw-room-");
    let changes = 0;
    let fetched = 0;
    const f = new WeightsFetcher({
      modelsDir: models,
      scheduler: new ManualScheduler(),
      log,
      onChange: () => changes++,
      fetch: (async () => {
        fetched++;
        return new Response(body);
      }) as unknown as typeof fetch,
      ...(o.fits !== undefined
        ? {
            makeRoom: async (need: number) => {
              o.needs?.push(need);
              return o.fits ? { fits: true, reason: null } : { fits: false, reason: "needs 10 B, more than --models-max-bytes 4 B allows" };
            },
          }
        : {}),
    });
    return { f, models, changes: () => changes, fetched: () => fetched };
  }

  test("a revision that does not fit: nothing fetched, the reason in its progress and its transfer reports", async () => {
    const needs: number[] = [];
    const t = fetcher({ fits: false, needs });
    // A partial copy already here counts as there.
    const blob = blobPath(cacheEntry(t.models, "org/m"), file);
    mkdirSync(join(blob, ".."), { recursive: true });
    writeFileSync(`${blob}.incomplete`, body.slice(0, 4));
    t.f.apply([manifest], [hubOrder]);
    await until("the disk's answer", () => t.changes() > 0);
    expect(needs).toEqual([6]);
    expect(t.fetched()).toBe(0);
    expect(t.f.progress("org/m", REV)?.error).toBe("disk: needs 10 B, more than --models-max-bytes 4 B allows");
    expect(t.f.transfers()).toMatchObject([{ path: "w.safetensors", from: "hub", done: 0, error: "disk: needs 10 B, more than --models-max-bytes 4 B allows" }]);
    t.f.stop();
  });

  test("a revision's room counts what the revisions already let in still miss", async () => {
    const needs: number[] = [];
    const models = scratchDir("llmgw-room-");
    const f = new WeightsFetcher({
      modelsDir: models,
      scheduler: new ManualScheduler(),
      log,
      // Transfers that never end: the first revision stays missing.
      fetch: (() => new Promise<Response>(() => undefined)) as unknown as typeof fetch,
      makeRoom: async (need) => {
        needs.push(need);
        return { fits: true, reason: null };
      },
    });
    f.apply([manifest], [hubOrder]);
    await until("the first revision let in", () => needs.length === 1);
    const other: WeightsManifest = { repo: "org/n", revision: REV, files: [{ ...file, size: 7, sha256: "cd".repeat(32) }] };
    f.apply([manifest, other], [hubOrder]);
    await until("the second asked about", () => needs.length === 2);
    expect(needs).toEqual([10, 17]);
    f.stop();
  });

  test("a checksum failure from the Hub makes the revision unobtainable, naming the file and the checksum; from a peer it does not", async () => {
    const hub = fetcher({ fits: true });
    hub.f.apply([manifest], [hubOrder]);
    await until("the transfer failed", () => hub.f.transfers()[0]?.error ?? undefined);
    expect(hub.fetched()).toBe(1);
    const failed = hub.f.progress("org/m", REV)?.failed;
    expect(failed).toContain("w.safetensors: checksum mismatch");
    expect(failed).toContain("from the Hub");
    // Not tried again from the same source; a new want list without it forgets it.
    hub.f.apply([manifest], [hubOrder]);
    expect(hub.fetched()).toBe(1);
    hub.f.apply([], []);
    hub.f.apply([manifest], []);
    expect(hub.f.progress("org/m", REV)?.failed).toBeUndefined();
    hub.f.stop();

    const peer = fetcher();
    peer.f.apply([manifest], [peerOrder]);
    await until("the transfer failed", () => peer.f.transfers()[0]?.error ?? undefined);
    expect(peer.f.progress("org/m", REV)?.error).toContain("checksum mismatch");
    expect(peer.f.progress("org/m", REV)?.failed).toBeUndefined();
    peer.f.stop();
  });
});
