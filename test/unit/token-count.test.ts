// Output tokens of one answer as the router counts them (src/router/traffic.ts): the engine's
// usage from the answer's last bytes when there is one, else the non-empty content chunks of an
// SSE stream; never a field that only looks like usage.

import { describe, expect, test } from "bun:test";
import { TokenCount, contentKey } from "../../src/router/traffic";

const enc = new TextEncoder();
function count(path: string, sse: boolean, ...parts: string[]): number {
  const t = new TokenCount();
  if (sse) t.key = contentKey(path);
  for (const p of parts) {
    // Each part inside a larger read, as the engine client hands them over.
    const d = enc.encode(`xx${p}yy`);
    t.feed(d, 2, d.length - 2);
  }
  return t.total();
}

describe("TokenCount", () => {
  test("a whole answer: its usage, with or without spaces; the Responses API's output_tokens, not max_output_tokens", () => {
    expect(count("/v1/chat/completions", false, '{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":12,"total_tokens":15}}')).toBe(12);
    expect(count("/v1/chat/completions", false, '{"usage": {"completion_tokens": 9}}')).toBe(9);
    expect(count("/v1/responses", false, '{"max_output_tokens":64,"usage":{"input_tokens":2,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0}}}')).toBe(5);
    expect(count("/v1/responses", false, '{"max_output_tokens":64}')).toBe(0);
    expect(count("/v1/embeddings", false, '{"usage":{"prompt_tokens":4,"total_tokens":4}}')).toBe(0);
  });

  test("a stream: non-empty content chunks counted (not the role chunk, not null, not the finish chunk), unless a usage chunk says", () => {
    const chunk = (c: string) => `data: {"choices":[{"index":0,"delta":${c},"finish_reason":null}]}\n\n`;
    const frames = [chunk('{"role":"assistant","content":""}'), chunk('{"content":"a"}'), chunk('{"content": "b"}'), chunk('{"content":null}'), chunk("{}"), "data: [DONE]\n\n"];
    expect(count("/v1/chat/completions", true, ...frames)).toBe(2);
    expect(count("/v1/chat/completions", true, ...frames.slice(0, -1), 'data: {"choices":[],"usage":{"completion_tokens":40}}\n\n', "data: [DONE]\n\n")).toBe(40);
    expect(count("/v1/completions", true, 'data: {"choices":[{"text":"x"}]}\n\n', 'data: {"choices":[{"text":""}]}\n\n')).toBe(1);
    expect(count("/v1/responses?x=1", true, 'event: response.output_text.delta\ndata: {"delta":"hi"}\n\n')).toBe(1);
    // Bytes beyond a range are not counted, even in the same read.
    const t = new TokenCount();
    t.key = contentKey("/v1/chat/completions");
    const d = enc.encode('"content":"a" "content":"b"');
    t.feed(d, 0, 14);
    expect(t.total()).toBe(1);
  });

  test("the usage is found in whichever kept range of one read holds it, never past a range's end, and in an older read after a newer one without it", () => {
    const chunk = (c: string) => `data: {"choices":[{"index":0,"delta":{"content":"${c}"}}]}\n\n`;
    const usage = 'data: {"choices":[],"usage":{"completion_tokens":7}}\n\n';
    // Several ranges of one read, the usage in each position among them (the engine client's
    // chunked decoder hands ranges of one read in order, framing bytes between them).
    const parts = [chunk("a"), chunk("b"), chunk("c"), "data: [DONE]\n\n"];
    for (let at = 0; at < parts.length; at++) {
      const ranges = [...parts.slice(0, at), usage, ...parts.slice(at)];
      let text = "";
      const bounds: [number, number][] = [];
      for (const r of ranges) {
        text += "1f\r\n";
        bounds.push([text.length, text.length + r.length]);
        text += `${r}\r\n`;
      }
      const d = enc.encode(text);
      const t = new TokenCount();
      t.key = contentKey("/v1/chat/completions");
      for (const [a, b] of bounds) t.feed(d, a, b);
      // Only the last four ranges are kept: a usage older than them is not seen, and the chunks are counted.
      expect(t.total()).toBe(ranges.length - ranges.indexOf(usage) <= 4 ? 7 : 3);
    }
    // A usage in the read after the range's end is not the answer's.
    const after = enc.encode(`${chunk("a")}${usage}`);
    const t = new TokenCount();
    t.key = contentKey("/v1/chat/completions");
    t.feed(after, 0, chunk("a").length);
    expect(t.total()).toBe(1);
    // An older read holds the usage; the newer ones hold none.
    const old = new TokenCount();
    old.key = contentKey("/v1/chat/completions");
    const r1 = enc.encode(`xx${usage}`);
    const r2 = enc.encode(`${chunk("a")}${chunk("b")}`);
    old.feed(r1, 2, r1.length);
    old.feed(r2, 0, chunk("a").length);
    old.feed(r2, chunk("a").length, r2.length);
    expect(old.total()).toBe(7);
  });

  test("the prompt's tokens from the engine's usage (prompt_tokens, the Responses API's input_tokens), -1 without one; the streamed chunks so far", () => {
    const prompt = (...parts: string[]) => {
      const t = new TokenCount();
      t.key = contentKey("/v1/chat/completions");
      for (const p of parts) {
        const d = enc.encode(`xx${p}yy`);
        t.feed(d, 2, d.length - 2);
      }
      return [t.prompt(), t.streamed];
    };
    expect(prompt('{"usage":{"prompt_tokens":31,"prompt_tokens_details":{"cached_tokens":16},"completion_tokens":2}}')).toEqual([31, 0]);
    expect(prompt('{"usage":{"input_tokens": 7,"input_tokens_details":{"cached_tokens":0},"output_tokens":5}}')).toEqual([7, 0]);
    expect(prompt('data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\n', 'data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":1}}\n\n')).toEqual([12, 1]);
    expect(prompt('data: {"choices":[{"delta":{"content":"a"}}]}\n\n', 'data: {"choices":[{"delta":{"content":"b"}}]}\n\n')).toEqual([-1, 2]);
  });

  test("a whole answer whose usage comes before a long body (vLLM's rerank) is read from its first read; total_tokens alone is the prompt", () => {
    const prompt = (path: string, ...parts: string[]) => {
      const t = new TokenCount();
      for (const p of parts) {
        const d = enc.encode(`xx${p}yy`);
        t.feed(d, 2, d.length - 2);
      }
      return t.prompt();
    };
    const results = `[${Array.from({ length: 200 }, (_, i) => `{"index":${i},"document":{"text":"${"lorem ipsum ".repeat(8)}"},"relevance_score":0.5}`).join(",")}]`;
    expect(results.length).toBeGreaterThan(4 * 4096);
    // In one read, and across several (the head in the first).
    expect(prompt("/v1/rerank", `{"id":"rerank-1","model":"r","usage":{"prompt_tokens":977,"total_tokens":977},"results":${results}}`)).toBe(977);
    const whole = `{"id":"rerank-1","model":"r","usage":{"prompt_tokens":41,"total_tokens":41},"results":${results}}`;
    const cut = [whole.slice(0, 100), ...Array.from({ length: 8 }, (_, i) => whole.slice(100 + i * 3000, 100 + (i + 1) * 3000)), whole.slice(24_100)];
    expect(cut.join("")).toBe(whole);
    expect(prompt("/v1/rerank", ...cut)).toBe(41);
    // Older vLLM: {"usage":{"total_tokens":N}} — all of it prompt; not when a completion is given.
    expect(prompt("/rerank", `{"id":"x","model":"r","usage":{"total_tokens":12},"results":${results}}`)).toBe(12);
    expect(prompt("/v1/chat/completions", '{"usage":{"completion_tokens":3,"total_tokens":12}}')).toBe(-1);
    expect(prompt("/v1/embeddings", '{"data":[]}')).toBe(-1);
  });
});
