// The pass over a request body before it is parsed (src/router/body-scan.ts): depth and values
// counted as JSON.parse would see them, the first limit gone over, where the root's "model"
// value lies; and reading a body (src/router/request-body.ts): the refusals name the limit and
// its flag, the facts are the parsed body's, and a model name is put in place byte for byte.

import { describe, expect, test } from "bun:test";
import { scanJson } from "../../src/router/body-scan";
import { readBody, sizeRefusal, utf8Text, withModel } from "../../src/router/request-body";
import { prefixKey } from "../../src/router/prefix-key";
import { deepArrays, deepChat, deepMany, jsonShape, wideObject } from "../helpers/json-bodies";

const enc = new TextEncoder();
const b = (s: string) => enc.encode(s);
const WIDE = { maxDepth: 1000, maxValues: 1_000_000 };

const reference = (v: unknown) => jsonShape(v);

describe("scanJson counts as JSON.parse would see the body", () => {
  const cases = [
    "{}",
    "[]",
    '{"a":1}',
    '{"a":[1,2]}',
    "[[],[],[[]]]",
    '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}',
    ' \n\t{ "a" : [ 1 , { "b" : null } , "x" ] }  ',
    '["[{,:]}", "a\\"b", "\\\\", "\\\\\\"", "{\\"x\\":[1,2]}"]',
    '{"k\\u0041":{"deep":[[[[1]]]]},"e":[],"o":{}}',
    "\ufeff" + '{"a":[true,false,null,-1.5e3]}',
  ];
  for (const text of cases) {
    test(JSON.stringify(text).slice(0, 60), () => {
      const want = reference(JSON.parse(text.replace(/^\ufeff/, "")));
      const s = scanJson(b(text), WIDE);
      expect(s.over).toBeUndefined();
      expect(s.values).toBe(want.values);
      // Depth: exactly at the deepest level passes, one less refuses.
      if (want.depth > 0) {
        expect(scanJson(b(text), { maxDepth: want.depth, maxValues: 1e6 }).over).toBeUndefined();
        expect(scanJson(b(text), { maxDepth: want.depth - 1, maxValues: 1e6 }).over).toBe("depth");
      }
      if (want.values > 0) {
        expect(scanJson(b(text), { maxDepth: 1000, maxValues: want.values }).over).toBeUndefined();
        expect(scanJson(b(text), { maxDepth: 1000, maxValues: want.values - 1 }).over).toBe("values");
      }
    });
  }

  test("it stops at the first limit gone over, early, however large the rest", () => {
    const deep = deepArrays(1_000_000);
    const s = scanJson(deep, { maxDepth: 64, maxValues: 100_000 });
    expect(s.over).toBe("depth");
    const wide = wideObject(150_000);
    const w = scanJson(wide, { maxDepth: 64, maxValues: 100_000 });
    expect(w.over).toBe("values");
    expect(w.values).toBe(100_001);
  });

  test("the helpers' costly bodies are at the limits they say", () => {
    // The body's object, messages, the message, then the content's nesting.
    expect(scanJson(deepChat(61), { maxDepth: 64, maxValues: 1000 }).over).toBe(undefined);
    expect(scanJson(deepChat(62), { maxDepth: 64, maxValues: 1000 }).over).toBe("depth");
    const many = deepMany(64, 99_999);
    expect(scanJson(many, { maxDepth: 64, maxValues: 100_000 }).over).toBeUndefined();
    expect(scanJson(many, { maxDepth: 63, maxValues: 100_000 }).over).toBe("depth");
    expect(scanJson(wideObject(99_999, 30, "x"), { maxDepth: 64, maxValues: 100_000 }).over).toBeUndefined();
    expect(scanJson(wideObject(100_001, 30, "x"), { maxDepth: 64, maxValues: 100_000 }).over).toBe("values");
  });

  test("broken or hostile text never throws and always ends", () => {
    for (const text of ['{"a', '"\\', "\\\\\\", "]]]]}}}", "{{{", '{"model":', '{"model"', '"', "", "   ", "[1,,,,]", '{"a":"\\u12"}', "\u0000\u0001"]) {
      const s = scanJson(b(text), { maxDepth: 4, maxValues: 4 });
      expect(s.values).toBeGreaterThanOrEqual(0);
    }
  });
});

describe("scanJson finds the root object's model value", () => {
  const at = (text: string) => {
    const s = scanJson(b(text), WIDE);
    return s.modelStart < 0 ? undefined : text.slice(s.modelStart, s.modelEnd);
  };
  test("plain, spaced, last of duplicates, escaped key, any value", () => {
    expect(at('{"model":"m"}')).toBe('"m"');
    expect(at('{ "stream" : true ,\n "model" :  "llama"  \n}')).toBe('"llama"');
    expect(at('{"model":"a","x":{"model":"inner"},"model":"b"}')).toBe('"b"');
    expect(at('{"mod\\u0065l":"esc"}')).toBe('"esc"');
    expect(at('{"model":{"a":[1,"]"]},"b":1}')).toBe('{"a":[1,"]"]}');
    expect(at('{"model":null}')).toBe("null");
    expect(at('{"x":{"model":"inner"}}')).toBeUndefined();
    expect(at('[{"model":"m"}]')).toBeUndefined();
    expect(at('{"models":"m","Model":"n"}')).toBeUndefined();
  });
});

describe("readBody", () => {
  const limits = { maxDepth: 64, maxValues: 100_000 };
  const json = (r: ReturnType<typeof readBody>) => JSON.parse(r.reply!.body) as { error: { message: string; code: string; param: string | null } };

  test("too deep: 400 json_too_deep, naming the limit and --max-json-depth", () => {
    const r = readBody(deepChat(100), limits);
    expect(r.reply?.status).toBe(400);
    expect(json(r).error.code).toBe("json_too_deep");
    expect(json(r).error.message).toContain("--max-json-depth 64");
  });

  test("too many values: 413 json_too_many_values, naming the limit and --max-json-values", () => {
    const r = readBody(wideObject(100_001, 8, "m"), limits);
    expect(r.reply?.status).toBe(413);
    expect(json(r).error.code).toBe("json_too_many_values");
    expect(json(r).error.message).toContain("--max-json-values 100000");
  });

  test("the listener's 413 for size names --max-body-bytes; its other refusals are left as they are", () => {
    expect(sizeRefusal("request body is 9 bytes; the limit is 8", "request_too_large")).toContain("--max-body-bytes");
    expect(sizeRefusal("malformed request line", "bad_request")).toBe("malformed request line");
  });

  test("not JSON, not an object, no model, a model or previous_response_id of the wrong type", () => {
    expect(json(readBody(b("{nope"), limits)).error.code).toBe("invalid_json");
    expect(json(readBody(b("[1]"), limits)).error.code).toBe("invalid_request");
    expect(json(readBody(b('{"messages":[]}'), limits)).error.code).toBe("missing_model");
    expect(json(readBody(b('{"model":7}'), limits)).error.message).toBe("model must be a string, not number");
    const prev = json(readBody(b('{"model":"m","previous_response_id":["x"]}'), limits));
    expect(prev.error.param).toBe("previous_response_id");
  });

  test("the facts are the parsed body's", () => {
    const body = { model: "m", stream: true, previous_response_id: "resp_1", input: [{ role: "user", content: "hi" }] };
    const r = readBody(b(JSON.stringify(body)), limits);
    expect(r.facts).toMatchObject({ model: "m", stream: true, previousResponseId: "resp_1", key: prefixKey(body) });
    expect(readBody(b('{"model":"m","previous_response_id":null}'), limits).facts?.previousResponseId).toBeUndefined();
  });

  test("withModel puts another name in place and leaves every other byte alone", () => {
    for (const text of ['{"model":"alias","messages":[{"role":"user","content":"é 😀"}]}', '{ "stream":false , "model" : "alias" }', '{"model":"a","model":"alias","x":1}', '{"mod\\u0065l":"alias"}']) {
      const bytes = b(text);
      const r = readBody(bytes, limits);
      const out = withModel(bytes, r.facts!, 'canon"ical');
      expect(JSON.parse(utf8Text(out))).toEqual({ ...JSON.parse(text), model: 'canon"ical' });
      const s = scanJson(bytes, limits);
      expect(utf8Text(out.subarray(0, s.modelStart))).toBe(text.slice(0, s.modelStart));
    }
  });
});
