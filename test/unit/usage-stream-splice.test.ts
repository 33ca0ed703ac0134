// The router's include_usage splice (src/router/usage-stream.ts withUsage): the option goes in
// right after the body's opening brace and every other byte stays as the client sent it, whether
// the body is a Buffer (as the server hands it over) or a plain Uint8Array, empty, spaced or
// not; and the splice is made only when the ledger is on and the client did not ask itself.

import { describe, expect, test } from "bun:test";
import { readBody } from "../../src/router/request-body";
import { addsUsage, withUsage } from "../../src/router/usage-stream";

const enc = new TextEncoder();
const dec = new TextDecoder();
const LIMITS = { maxDepth: 64, maxValues: 1000 };
const OPTION = '"stream_options":{"include_usage":true}';

function spliced(text: string, asBuffer: boolean): string {
  const bytes = asBuffer ? Buffer.from(text) : enc.encode(text);
  const facts = readBody(bytes, LIMITS).facts!;
  return dec.decode(withUsage(bytes, facts));
}

describe("withUsage", () => {
  for (const asBuffer of [false, true]) {
    const kind = asBuffer ? "a Buffer" : "a Uint8Array";
    test(`${kind}: the option right after the brace, the rest byte for byte`, () => {
      const body = '{"model":"m","stream":true,"messages":[{"role":"user","content":"héllo {\\"x\\"}"}]}';
      expect(spliced(body, asBuffer)).toBe(`{${OPTION},${body.slice(1)}`);
      const spaced = ' \n{ "model" : "m", "stream" : true }\n';
      expect(spliced(spaced, asBuffer)).toBe(` \n{${OPTION}, "model" : "m", "stream" : true }\n`);
      expect(JSON.parse(spliced(spaced, asBuffer))).toEqual({ model: "m", stream: true, stream_options: { include_usage: true } });
    });

    test(`${kind}: a body with nothing but a model and stream, and one whose brace closes at once, stay valid JSON`, () => {
      expect(JSON.parse(spliced('{"model":"m","stream":true}', asBuffer))).toEqual({ model: "m", stream: true, stream_options: { include_usage: true } });
      const bytes = asBuffer ? Buffer.from("{ }") : enc.encode("{ }");
      const facts = { model: "m", stream: true, key: 0, modelStart: -1, modelEnd: -1 };
      expect(dec.decode(withUsage(bytes, facts))).toBe(`{${OPTION} }`);
    });
  }

  test("added only to streamed chat and completions requests whose client did not ask for include_usage", () => {
    const facts = (body: object) => readBody(enc.encode(JSON.stringify(body)), LIMITS).facts!;
    expect(addsUsage("/v1/chat/completions", facts({ model: "m", stream: true }))).toBe(true);
    expect(addsUsage("/v1/completions", facts({ model: "m", stream: true, stream_options: { continuous_usage_stats: true } }))).toBe(true);
    expect(addsUsage("/v1/chat/completions", facts({ model: "m", stream: true, stream_options: { include_usage: true } }))).toBe(false);
    expect(addsUsage("/v1/chat/completions", facts({ model: "m" }))).toBe(false);
    expect(addsUsage("/v1/embeddings", facts({ model: "m", stream: true }))).toBe(false);
  });
});
