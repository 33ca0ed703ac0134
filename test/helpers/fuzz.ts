// Input generators shared by the fuzz tests (test/fuzz): hostile values, one-field mutations of
// valid bodies, damaged JSON text and plain garbage, with fast-check.

import fc from "fast-check";

export const SEED = Number(process.env.FUZZ_SEED ?? 424242);
/** Multiplies every run count: FUZZ_SCALE=10 for a long soak, 0.1 for a quick look. */
export const SCALE = Number(process.env.FUZZ_SCALE ?? 1);
export const runs = (n: number) => Math.max(1, Math.round(n * SCALE));

// ---- JSON with tokens JSON.stringify cannot write ---------------------------------------

/** Text written into the JSON as is: NaN, 1e999, -0, deep nesting, huge arrays. */
export class Raw {
  constructor(readonly text: string) {}
  toString() {
    return `Raw(${this.text.length > 40 ? `${this.text.slice(0, 40)}…[${this.text.length}]` : this.text})`;
  }
}

export function toJson(v: unknown): string {
  if (v instanceof Raw) return v.text;
  // NaN and Infinity come out as bare words: malformed JSON, on purpose.
  if (typeof v === "number") return Object.is(v, -0) ? "-0" : String(v);
  if (Array.isArray(v)) return `[${v.map(toJson).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .map((k) => `${JSON.stringify(k)}:${toJson(o[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(v) ?? "null";
}

/** Sets an own property, even "__proto__", without touching any prototype. */
export function own(o: Record<string, unknown>, k: string, v: unknown): void {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

// ---- hostile values ---------------------------------------------------------------------

export const MB = "x".repeat(1 << 20);
export const HUGE = {
  string1MB: MB,
  numbers100k: new Raw(`[${new Array(100_000).fill("0").join(",")}]`),
  strings100k: new Raw(`[${new Array(100_000).fill('"a"').join(",")}]`),
  deepArray: new Raw("[".repeat(10_000) + "]".repeat(10_000)),
  deepObject: new Raw('{"a":'.repeat(10_000) + "1" + "}".repeat(10_000)),
};

export const NUMBERS: unknown[] = [-1, -0, 0, 0.5, 1.5, -1.5, 1e308, -1e308, 2 ** 31, 2 ** 53 + 2, 65536, 1e21, 5e-324, NaN, Infinity, -Infinity];
export const RAW_NUMBERS = ["1e999", "-1e999", "NaN", "Infinity", "0x10", "01", "+1", ".5", "1.", "-", "1e", "1_000"].map((t) => new Raw(t));
export const STRINGS = [
  "", " ", "\u0000", "a\u0000b", "😀", "👩‍👩‍👧‍👦", "\u202eevil", "مرحبا بالعالم", "\ud800", "\udfff", "a\ud800b", "../../etc/passwd", "a/../b", "/abs",
  "a//b", "x".repeat(129), "x".repeat(257), "x".repeat(4097), "__proto__", "constructor", "prototype", "30 m", "-5s", "1e309s", "true", "null", "NaN",
  "Infinity", "\n", "a b", "%00", "<script>alert(1)</script>", "'; DROP TABLE models; --", "\ufeff", "a=b", "=", "A".repeat(64), "1",
];
/** Objects built by JSON.parse, so "__proto__" is an own key as on the wire. */
export const OBJECTS: unknown[] = [
  null, true, false, [], {}, [1], ["a"], [null], [[[]]], { a: 1 },
  JSON.parse('{"__proto__":{"polluted":1}}'), JSON.parse('{"constructor":{"prototype":{"polluted":1}}}'), JSON.parse('{"toString":1}'),
  JSON.parse('{"toString":1,"valueOf":1}'), JSON.parse('{"__proto__":null}'), JSON.parse('{"hasOwnProperty":"x"}'),
];

export const hostile: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...NUMBERS, ...RAW_NUMBERS) },
  { weight: 8, arbitrary: fc.constantFrom(...STRINGS) },
  { weight: 8, arbitrary: fc.constantFrom(...OBJECTS) },
  { weight: 3, arbitrary: fc.double() },
  { weight: 3, arbitrary: fc.integer() },
  { weight: 3, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>(...Object.values(HUGE)) },
);

export const EXTRA_KEYS = ["__proto__", "constructor", "prototype", "toString", "hasOwnProperty", "extra", "", "\u0000", "😀", "x".repeat(300)];

// ---- mutators of a valid value ------------------------------------------------------------

export type Path = (string | number)[];

export function allPaths(v: unknown, at: Path = []): Path[] {
  const out: Path[] = [at];
  if (Array.isArray(v)) v.forEach((x, i) => out.push(...allPaths(x, [...at, i])));
  else if (v !== null && typeof v === "object") for (const [k, x] of Object.entries(v)) out.push(...allPaths(x, [...at, k]));
  return out;
}

export function containerAt(root: unknown, path: Path): unknown {
  let cur = root;
  for (const k of path) {
    if (cur === null || typeof cur !== "object" || !Object.prototype.hasOwnProperty.call(cur, k)) return undefined;
    cur = (cur as Record<string | number, unknown>)[k];
  }
  return cur;
}

export type Op = { op: "set"; path: Path; value: unknown } | { op: "delete"; path: Path } | { op: "add"; path: Path; key: string; value: unknown } | { op: "dup"; path: Path };

export function applyOp(root: unknown, o: Op): void {
  const parentPath = o.op === "add" || o.op === "dup" ? o.path : o.path.slice(0, -1);
  const parent = containerAt(root, parentPath);
  if (parent === null || typeof parent !== "object") return;
  if (o.op === "dup") {
    // The same element again, by reference: serialising writes it twice.
    if (Array.isArray(parent) && parent.length > 0) parent.push(parent[0]);
    return;
  }
  if (o.op === "add") {
    if (Array.isArray(parent)) parent.push(o.value);
    else own(parent as Record<string, unknown>, o.key, o.value);
    return;
  }
  const key = o.path[o.path.length - 1]!;
  if (o.op === "delete") {
    if (Array.isArray(parent) && typeof key === "number") parent.splice(key, 1);
    else delete (parent as Record<string | number, unknown>)[key];
    return;
  }
  if (Array.isArray(parent) && typeof key === "number") parent[key] = o.value;
  else own(parent as Record<string, unknown>, String(key), o.value);
}

export const describeOp = (o: Op): string => {
  const p = o.path.join(".") || "(root)";
  const show = (v: unknown) => (v instanceof Raw ? String(v) : typeof v === "string" && v.length > 40 ? `"${v.slice(0, 40)}…"[${v.length}]` : toJson(v).slice(0, 60));
  if (o.op === "set") return `set ${p} = ${show(o.value)}`;
  if (o.op === "delete") return `delete ${p}`;
  if (o.op === "dup") return `duplicate first element of ${p}`;
  return `add ${p}[${JSON.stringify(o.key.slice(0, 20))}] = ${show(o.value)}`;
};

/** One to three mutations of a valid value: a bad value in one field, a missing field, an extra key, a duplicate element. */
export function mutated(valid: unknown): fc.Arbitrary<{ value: unknown; note: string }> {
  const paths = allPaths(valid);
  const fields = paths.filter((p) => p.length > 0);
  const objects = paths.filter((p) => {
    const v = containerAt(valid, p);
    return v !== null && typeof v === "object";
  });
  const arrays = paths.filter((p) => Array.isArray(containerAt(valid, p)));
  const top = fields.filter((p) => p.length === 1);
  const ops: fc.Arbitrary<Op>[] = [
    // Top-level fields get as many hits as all the nested ones together.
    fc.record({ path: fc.oneof(fc.constantFrom(...fields), fc.constantFrom(...top)), value: hostile }).map((r): Op => ({ op: "set", ...r })),
    fc.constantFrom(...fields).map((path): Op => ({ op: "delete", path })),
    fc.record({ path: fc.constantFrom(...objects), key: fc.oneof(fc.constantFrom(...EXTRA_KEYS), fc.string({ maxLength: 10 })), value: hostile }).map((r): Op => ({ op: "add", ...r })),
  ];
  if (arrays.length > 0) ops.push(fc.constantFrom(...arrays).map((path): Op => ({ op: "dup", path })));
  const one = fc.oneof({ weight: 6, arbitrary: ops[0]! }, { weight: 2, arbitrary: ops[1]! }, { weight: 2, arbitrary: ops[2]! }, ...(ops[3] ? [{ weight: 1, arbitrary: ops[3] }] : []));
  // Mostly one mutation, so the server's answer is about that one; sometimes a few at once.
  const list = fc.oneof({ weight: 4, arbitrary: one.map((o) => [o]) }, { weight: 1, arbitrary: fc.array(one, { minLength: 2, maxLength: 3 }) });
  return list.map((list) => {
    const value = structuredClone(valid);
    for (const o of list) applyOp(value, o);
    return { value, note: list.map(describeOp).join("; ") };
  });
}

// ---- mutators of the JSON text ------------------------------------------------------------

export const enc = new TextEncoder();
export const INVALID_UTF8 = [[0xff], [0xfe, 0xff], [0xc3, 0x28], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0x80], [0xe2, 0x82]];
export const TRAILING = ["}", "]", ",", "x", "\u0000", " {}", '\n{"a":1}', "//c", "/*", "garbage", "]]]]", ",,", "\ufeff"];
export const LEADING = ["\ufeff", "\ufeff\ufeff", "x", ",", "[", ")]}'\n", "\u0000", "/*c*/"];

export interface Body {
  bytes: Uint8Array;
  note: string;
}
export const textBody = (text: string, note: string): Body => ({ bytes: enc.encode(text), note });

export function textMutations(text: string): fc.Arbitrary<Body> {
  const n = Math.max(1, text.length);
  const brackets = [...text.matchAll(/[{}[\]]/g)].map((m) => m.index!);
  return fc.oneof(
    fc.nat({ max: n - 1 }).map((i) => textBody(text.slice(0, i), `truncated at ${i} of ${text.length}`)),
    fc.constantFrom(...TRAILING).map((g) => textBody(text + g, `trailing ${JSON.stringify(g)}`)),
    fc.constantFrom(...LEADING).map((g) => textBody(g + text, `leading ${JSON.stringify(g)}`)),
    fc.nat({ max: Math.max(0, brackets.length - 1) }).map((i) => {
      const at = brackets[i] ?? 0;
      const swap: Record<string, string> = { "{": "[", "}": "]", "[": "{", "]": ")" };
      return textBody(text.slice(0, at) + (swap[text[at] ?? "{"] ?? "(") + text.slice(at + 1), `wrong bracket at ${at}`);
    }),
    fc.record({ i: fc.nat({ max: n }), bad: fc.constantFrom(...INVALID_UTF8) }).map(({ i, bad }) => {
      const head = enc.encode(text.slice(0, i));
      const tail = enc.encode(text.slice(i));
      const bytes = new Uint8Array(head.length + bad.length + tail.length);
      bytes.set(head);
      bytes.set(bad, head.length);
      bytes.set(tail, head.length + bad.length);
      return { bytes, note: `invalid UTF-8 ${bad.map((b) => b.toString(16)).join(" ")} at ${i}` };
    }),
    fc.record({ i: fc.nat({ max: n }), c: fc.constantFrom("{", "}", "[", "]", ":", ",", '"', "\\", " ", "\u0000", "'") }).map(({ i, c }) =>
      textBody(text.slice(0, i) + c + text.slice(i), `inserted ${JSON.stringify(c)} at ${i}`),
    ),
    fc.nat({ max: n - 1 }).map((i) => textBody(text.slice(0, i) + text.slice(i + 1), `deleted char ${i}`)),
    fc.constant(textBody(text.replace(/"/g, "'"), "single quotes")),
    fc.constant(textBody(text.replace(/}$/, ",}"), "trailing comma")),
  );
}

/** Bodies that have nothing to do with the expected shape. */
export const garbage: fc.Arbitrary<Body> = fc.oneof(
  { weight: 4, arbitrary: fc.json({ maxDepth: 3 }).map((t) => textBody(t, "fc.json")) },
  { weight: 3, arbitrary: fc.anything({ maxDepth: 2, maxKeys: 5 }).map((v) => textBody(toJson(v), "fc.anything")) },
  { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 100 }).map((t) => textBody(t, "random text")) },
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 100 }).map((bytes) => ({ bytes, note: "random bytes" })) },
  {
    weight: 3,
    arbitrary: fc
      .constantFrom("", " ", "\n\t", "null", "true", "0", "-0", "[]", "{}", '""', "{", "}", "[", "{]", '{"a"}', "\u0000", "\ufeff", "undefined", "NaN", "'x'", "{'a':1}", "[1,]", '{"a":1,}', "1e999")
      .map((t) => textBody(t, "small garbage")),
  },
  { weight: 1, arbitrary: fc.constantFrom(HUGE.deepArray.text, HUGE.deepObject.text, "[".repeat(200_000)).map((t) => textBody(t, `deep nesting, ${t.length} chars`)) },
);

export const CONTENT_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonp", "application/xml", "*/*", "json", "", "application/json; charset=latin1", "APPLICATION/JSON"];
export const contentType: fc.Arbitrary<string | null> = fc.oneof(
  { weight: 14, arbitrary: fc.constant("application/json") },
  { weight: 2, arbitrary: fc.constantFrom<string | null>(...CONTENT_TYPES, null) },
);

/** Near-valid bodies (one field mutated, JSON text damaged) and pure garbage. */
export function bodies(valid: unknown): fc.Arbitrary<Body> {
  return fc.oneof(
    { weight: 10, arbitrary: mutated(valid).map(({ value, note }) => textBody(toJson(value), note)) },
    { weight: 4, arbitrary: textMutations(JSON.stringify(valid)) },
    { weight: 3, arbitrary: garbage },
    { weight: 1, arbitrary: fc.constant(textBody(JSON.stringify(valid), "valid")) },
  );
}
