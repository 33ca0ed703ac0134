// Where the router reads a request body (src/router/body-reader.ts): a small cheap body at once
// on the calling thread, any other on the body worker, with the same result as reading it here;
// a worker that does not answer in time gets its body answered 503, and one that fails has its
// bodies read on the calling thread instead, for good after a few failures.

import { afterEach, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ManualScheduler, realScheduler } from "../../src/lib/scheduler";
import { BodyReader, INLINE_BYTES, INLINE_VALUES } from "../../src/router/body-reader";
import { type BodyRead, readBody } from "../../src/router/request-body";
import { deepChat, imageChat, wideObject } from "../helpers/json-bodies";
import { scratchDir } from "../helpers/tmp";
import { until } from "../helpers/until";

const limits = { maxDepth: 64, maxValues: 100_000 };
const readers: BodyReader[] = [];
afterEach(() => {
  for (const r of readers.splice(0)) r.stop();
});
function reader(o: Partial<ConstructorParameters<typeof BodyReader>[0]> = {}): BodyReader {
  const r = new BodyReader({ limits, scheduler: realScheduler, ...o });
  readers.push(r);
  return r;
}
const off = (r: BodyReader, bytes: Uint8Array) => new Promise<BodyRead>((resolve) => r.readOff(bytes, resolve));
const chat = (extra = {}) => new TextEncoder().encode(JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], ...extra }));

describe("readNow: at once only what is small and cheap", () => {
  test("a small chat is read at once", () => {
    expect(reader().readNow(chat())?.facts?.model).toBe("m");
  });
  test("a body over INLINE_BYTES goes to the worker", () => {
    expect(reader().readNow(imageChat(INLINE_BYTES + 1))).toBeUndefined();
  });
  test("a small body with more than INLINE_VALUES values goes to the worker; a deep one is refused at once", () => {
    const many = wideObject(INLINE_VALUES + 10, 4, "m");
    expect(many.byteLength).toBeLessThan(INLINE_BYTES);
    expect(reader().readNow(many)).toBeUndefined();
    expect(reader().readNow(deepChat(100))?.reply?.status).toBe(400);
  });
  test("with a value limit below INLINE_VALUES, a small body over it is refused at once", () => {
    expect(reader({ limits: { maxDepth: 64, maxValues: 100 } }).readNow(wideObject(150, 4, "m"))?.reply?.status).toBe(413);
  });
});

describe("readOff: the body worker", () => {
  test("reads as the calling thread would, and leaves the caller's bytes alone", async () => {
    const r = reader();
    for (const bytes of [imageChat(200_000), wideObject(50_000, 8, "m"), wideObject(150_000, 8, "m"), deepChat(200), chat({ previous_response_id: "resp_7", pad: "x".repeat(INLINE_BYTES) })]) {
      const before = bytes.slice();
      const got = await off(r, bytes);
      expect(got).toEqual(readBody(bytes, limits));
      expect(bytes).toEqual(before);
    }
    expect(r.pending).toBe(0);
  });

  test("a body the worker has not answered within 30 s is answered 503", async () => {
    const dir = scratchDir("llmgw-body-worker-");
    const silent = join(dir, "silent.ts");
    writeFileSync(silent, 'import { parentPort } from "node:worker_threads";\nparentPort!.on("message", () => {});\n');
    const clock = new ManualScheduler();
    const r = reader({ scheduler: clock, module: silent });
    let got: BodyRead | undefined;
    r.readOff(imageChat(100_000), (read) => (got = read));
    clock.advance(29_000);
    expect(got).toBeUndefined();
    clock.advance(1_001);
    expect(got?.reply?.status).toBe(503);
    expect(JSON.parse(got!.reply!.body).error.code).toBe("body_read_timeout");
    expect(r.pending).toBe(0);
  });

  test("a worker that dies has its bodies read here; after three failures every body is", async () => {
    const dir = scratchDir("llmgw-body-worker-");
    const dying = join(dir, "dying.ts");
    writeFileSync(dying, 'import { parentPort } from "node:worker_threads";\nparentPort!.on("message", () => process.exit(3));\n');
    const warned: string[] = [];
    const r = reader({ module: dying, log: { warn: (_o, m) => warned.push(m ?? "") } });
    const big = imageChat(100_000);
    for (let i = 0; i < 3; i++) {
      expect(r.readNow(big)).toBeUndefined();
      expect((await off(r, big)).facts?.model).toBe("m");
    }
    await until("the third failure logged", () => warned.some((m) => m.includes("from now on")));
    expect(r.readNow(big)?.facts?.model).toBe("m");
  });
});
