// Reading an engine's /metrics answer within caps (src/router/metrics-body.ts): lines whole
// however the body is cut into reads, every cap cutting the read (and cancelling the body so
// the engine stops sending), compressed answers refused unread, and I/O let in between slices.

import { describe, expect, test } from "bun:test";
import { METRICS_CAPS, type MetricsCaps, MetricsRefused, readLinesWithin } from "../../src/router/metrics-body";
import { LoadReader, readEngineLoad } from "../../src/router/engine-metrics";

const enc = new TextEncoder();

/** A Response whose body arrives as these reads; `cancelled()` tells whether the reader gave up. */
function answer(parts: (string | Uint8Array)[], headers: Record<string, string> = {}): { res: Response; cancelled: () => boolean; pulled: () => number } {
  let i = 0;
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>(
    {
      pull(c) {
        if (i >= parts.length) return c.close();
        const p = parts[i++]!;
        c.enqueue(typeof p === "string" ? enc.encode(p) : p);
      },
      cancel() {
        cancelled = true;
      },
    },
    { highWaterMark: 0 },
  );
  return { res: new Response(body, { headers }), cancelled: () => cancelled, pulled: () => i };
}

async function lines(res: Response, caps: MetricsCaps = METRICS_CAPS, onYield = () => {}): Promise<string[]> {
  const out: string[] = [];
  await readLinesWithin(res, caps, (t, a, b) => out.push(t.slice(a, b)), async () => onYield());
  return out;
}

async function refusal(p: Promise<unknown>): Promise<MetricsRefused> {
  try {
    await p;
  } catch (e) {
    if (e instanceof MetricsRefused) return e;
    throw e;
  }
  throw new Error("the read was not refused");
}

describe("readLinesWithin", () => {
  test("lines come whole however the reads cut them, a multi-byte character split included; the last needs no newline", async () => {
    const text = 'vllm:num_requests_running{model_name="é模型"} 3\r\n# HELP x\nvllm:num_requests_waiting 2';
    const bytes = enc.encode(text);
    // Every way of cutting the body in two, and byte by byte.
    for (let cut = 0; cut <= bytes.length; cut++) {
      const got = await lines(answer([bytes.subarray(0, cut), bytes.subarray(cut)]).res);
      expect(got).toEqual(['vllm:num_requests_running{model_name="é模型"} 3\r', "# HELP x", "vllm:num_requests_waiting 2"]);
    }
    const one = [...bytes].map((b) => new Uint8Array([b]));
    expect(await lines(answer(one).res)).toHaveLength(3);
    expect(await lines(answer(["a 1\n"]).res)).toEqual(["a 1"]);
    expect(await lines(answer([]).res)).toEqual([]);
  });

  test("feeds the same load as readEngineLoad over the whole text", async () => {
    const text = "vllm:num_requests_running 2\nvllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 0.5\n";
    const r = new LoadReader();
    await readLinesWithin(answer([text.slice(0, 20), text.slice(20)]).res, METRICS_CAPS, (t, a, b) => r.line(t, a, b), async () => {});
    expect(r.load("vllm")).toEqual(readEngineLoad(text, "vllm"));
  });

  test("a compressed answer is refused unread and its body cancelled; identity is accepted", async () => {
    for (const ce of ["gzip", "br", "zstd", "deflate", " GZIP "]) {
      const a = answer(["vllm:num_requests_running 0\n"], { "content-encoding": ce });
      const e = await refusal(lines(a.res));
      expect(e.cap).toBe("encoding");
      expect(e.message).toContain("identity");
      expect(a.pulled()).toBe(0);
      expect(a.cancelled()).toBe(true);
    }
    expect(await lines(answer(["a 1\n"], { "content-encoding": "identity" }).res)).toEqual(["a 1"]);
  });

  test("the byte cap: a declared length over it is refused before reading, a streamed body is cut at it", async () => {
    const caps = { maxBytes: 1000, maxLines: 1e6, maxLineBytes: 1e6 };
    const declared = answer(["x 1\n"], { "content-length": "1001" });
    expect((await refusal(lines(declared.res, caps))).cap).toBe("bytes");
    expect(declared.pulled()).toBe(0);
    const line = "vllm:num_requests_running 0\n";
    const parts = Array.from({ length: 1000 }, () => line.repeat(10));
    const a = answer(parts);
    const e = await refusal(lines(a.res, caps));
    expect(e.cap).toBe("bytes");
    expect(e.limit).toBe(1000);
    expect(e.message).toContain("1000 bytes");
    // Cut at the read that crossed the cap: the rest was never asked for.
    expect(a.pulled()).toBe(Math.ceil(1001 / (line.length * 10)));
    expect(a.cancelled()).toBe(true);
    expect(await lines(answer(["a 1\n".repeat(250)]).res, caps)).toHaveLength(250);
  });

  test("the line cap and the line-length cap, a long line split over reads included", async () => {
    const caps = { maxBytes: 1e9, maxLines: 100, maxLineBytes: 50 };
    expect(await lines(answer(["a 1\n".repeat(100)]).res, caps)).toHaveLength(100);
    const many = answer(["a 1\n".repeat(60), "a 1\n".repeat(60), "a 1\n".repeat(60)]);
    const e = await refusal(lines(many.res, caps));
    expect(e.cap).toBe("lines");
    expect(e.limit).toBe(100);
    expect(many.pulled()).toBe(2);
    expect(many.cancelled()).toBe(true);
    expect((await refusal(lines(answer([`a{x="${"y".repeat(60)}"} 1\n`]).res, caps))).cap).toBe("line length");
    // A line that never ends is cut once it is too long, not read to the end of the body.
    const endless = answer(Array.from({ length: 100 }, () => "z".repeat(20)));
    expect((await refusal(lines(endless.res, caps))).cap).toBe("line length");
    expect(endless.pulled()).toBeLessThan(5);
  });

  test("I/O is let in between slices of a long body, not only between reads", async () => {
    const text = "vllm:num_requests_running 0\n".repeat(20_000); // 560,000 characters in one read
    let yields = 0;
    const got = await lines(answer([text]).res, { maxBytes: 1e9, maxLines: 1e9, maxLineBytes: 1e6 }, () => yields++);
    expect(got).toHaveLength(20_000);
    expect(yields).toBeGreaterThanOrEqual(8);
  });
});
