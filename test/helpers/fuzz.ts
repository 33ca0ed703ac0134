// Input generators shared by the fuzz tests (test/fuzz): hostile values, one-field mutations of
// valid bodies, damaged JSON text and plain garbage, with fast-check.

import fc from "fast-check";
import { diffDumps, dumpStore, dumpText, storeWrites } from "./dump";
import type { TestServer } from "./server";

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
  const show = (v: unknown) => {
    try {
      if (v instanceof Raw) return String(v);
      if (typeof v === "string" && v.length > 40) return `"${v.slice(0, 40)}…"[${v.length}]`;
      return toJson(v).slice(0, 60);
    } catch {
      // A value with no way to become text (a null-prototype object inside), or too deep to write out.
      return Object.prototype.toString.call(v);
    }
  };
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

// ---- the harness: send, judge, record findings, watch the store ---------------------------


export interface Req {
  method: string;
  path: string;
  body?: Uint8Array;
  ct?: string | null;
  note?: string;
  /** Agent API: use the admin token (to read back what an accepted heartbeat stored). */
  admin?: boolean;
  /** Router: the x-llmgw-pool header. */
  pool?: string;
}
export interface Res {
  status: number;
  text: string;
  headers?: Headers;
}
export interface Verdict {
  /** Accepted (2xx), or for the router the expected 503 for a known model. */
  accepted: boolean;
  problems: string[];
}
export type Judge = (res: Res) => Verdict | Promise<Verdict>;
interface Finding {
  count: number;
  example: string;
  size: number;
}
export interface Stat {
  cases: number;
  rejected: number;
  accepted: number;
}

export function clip(s: string, n = 300): string {
  return s.length > n ? `${s.slice(0, n)}…[${s.length} chars]` : s;
}
export function describeReq(r: Req): string {
  const body = r.body ? clip(JSON.stringify(new TextDecoder().decode(r.body))) : "(none)";
  return `${r.method} ${clip(r.path, 200)} content-type=${r.ct === undefined || r.ct === null ? "(none)" : JSON.stringify(r.ct)} body=${body}${r.note ? ` [${clip(r.note, 300)}]` : ""}`;
}

/**
 * The checks every error answer shares, whatever its shape: a 4xx (not a success, not a 5xx),
 * a JSON body with an `error` object. `error` is absent when there is nothing more to check.
 */
export function errorAnswer(res: Res): { problems: string[]; error?: Record<string, unknown> } {
  if (res.status === 0) return { problems: [res.text] };
  const problems: string[] = [];
  if (res.status >= 500) problems.push(`answered ${res.status}`);
  else if (res.status < 400) problems.push(`answered ${res.status} to a bad request`);
  // Bun's own answer to an over-long request line or header, before the app sees it.
  if (res.status === 431) return { problems };
  let j: unknown;
  try {
    j = JSON.parse(res.text);
  } catch {
    return { problems: [...problems, "error body is not JSON"] };
  }
  const error = (j as { error?: unknown } | null)?.error as Record<string, unknown> | undefined;
  if (!error || typeof error !== "object") return { problems: [...problems, "no error object"] };
  return { problems, error };
}

/** What is wrong with an error answer in the admin and agent API's shape; empty when it is a proper one. */
export function apiErrorProblems(res: Res): string[] {
  const { problems: p, error } = errorAnswer(res);
  if (error === undefined) return p;
  const e = error as { code?: unknown; message?: unknown; issues?: unknown };
  if (typeof e.code !== "string" || e.code === "") p.push("error.code missing");
  if (typeof e.message !== "string" || e.message.trim() === "") p.push("error.message empty");
  else if (/internal error/i.test(e.message) && res.status < 500) p.push(`message says internal error`);
  if (e.issues !== undefined) {
    if (!Array.isArray(e.issues) || e.issues.length === 0) p.push("issues is not a non-empty list");
    else
      for (const i of e.issues as { path?: unknown; message?: unknown }[])
        if (typeof i?.path !== "string" || i.path === "" || typeof i.message !== "string" || i.message === "") {
          p.push("an issue without a path or message");
          break;
        }
  }
  if (e.code === "invalid_request" && typeof e.message === "string") {
    const first = Array.isArray(e.issues) ? (e.issues[0] as { path?: string } | undefined)?.path : undefined;
    if (first !== undefined && !e.message.startsWith(`${first}: `)) p.push("message does not start with the first issue's path");
    if (first === undefined && !/^\S+: \S/.test(e.message)) p.push("invalid_request message names no field");
  }
  return p;
}

/**
 * A mutating endpoint: 2xx is accepted (and must be allowed by the oracle, and `verify` then
 * checks what was stored), anything else must be a proper error.
 */
export function judgeWrite(ok: number[], oracle?: () => boolean | undefined, verify?: () => Promise<string[]>): Judge {
  return async (res) => {
    if (ok.includes(res.status)) {
      const local = oracle?.();
      if (local === false) return { accepted: true, problems: [`accepted (${res.status}) a body its schema rejects`] };
      return { accepted: true, problems: verify ? await verify() : [] };
    }
    const problems = apiErrorProblems(res);
    if (res.status === 400 && oracle?.() === true) problems.push("rejected (400) a body its schema accepts");
    return { accepted: false, problems };
  };
}

/** A read: 200 is fine; otherwise a proper error. */
export function judgeRead(res: Res): Verdict {
  if (res.status === 200) {
    try {
      JSON.parse(res.text);
      return { accepted: true, problems: [] };
    } catch {
      return { accepted: true, problems: ["200 with a body that is not JSON"] };
    }
  }
  return { accepted: false, problems: apiErrorProblems(res) };
}

/**
 * The body as the server will see it: the same decoding, the same JSON parser. The admin API
 * refuses other content types; the agent API parses whatever the content type says.
 */
export function serverView(r: Req, opts: { anyContentType?: boolean } = {}): { ok: true; value: unknown } | { ok: false } {
  if (!opts.anyContentType && r.ct && !/^application\/json\b/i.test(r.ct)) return { ok: false };
  const text = new TextDecoder().decode(r.body ?? new Uint8Array());
  if (text.trim() === "") return { ok: false };
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false };
  }
}

/**
 * Sends fuzzed requests to one listener of a real server, judges the answers, records problems
 * as findings (the smallest input of each kind kept) instead of throwing, and checks that a
 * rejected request (or any read) leaves every table of the store as it was.
 */
export class FuzzHarness {
  readonly findings = new Map<string, Finding>();
  readonly stats = new Map<string, Stat>();
  total = 0;
  private snapshot = "";
  private writes = -1;
  private sinceHealth = 0;
  private sinceDump = 0;

  constructor(
    private readonly o: {
      server: () => TestServer;
      /** The listener's base URL. */
      base: (s: TestServer) => string;
      /** The headers a request carries (the token of the listener's kind). */
      headers: (s: TestServer, r: Req) => Record<string, string>;
    },
  ) {}

  exec = async (r: Req): Promise<Res> => {
    const s = this.o.server();
    const headers = this.o.headers(s, r);
    if (r.ct !== null && r.ct !== undefined) headers["content-type"] = r.ct;
    try {
      const res = await fetch(`${this.o.base(s)}${r.path}`, { method: r.method, headers, body: r.body, signal: AbortSignal.timeout(10_000) });
      return { status: res.status, text: await res.text(), headers: res.headers };
    } catch (e) {
      return { status: 0, text: `no answer: ${(e as Error).name}: ${(e as Error).message}` };
    }
  };

  /** Records a problem; "kind — detail": the kind groups findings, the detail goes with the example. */
  found = (problem: string, r: Req, res: Res, extra = ""): void => {
    const cut = problem.indexOf(" — ");
    const kind = cut < 0 ? problem : problem.slice(0, cut);
    const detail = cut < 0 ? extra : [problem.slice(cut + 3), extra].filter(Boolean).join("\n    ");
    const example = `${describeReq(r)}\n    → ${res.status} ${clip(res.text)}${detail ? `\n    ${detail}` : ""}`;
    const size = (r.body?.length ?? 0) + r.path.length;
    const f = this.findings.get(kind);
    if (!f) this.findings.set(kind, { count: 1, example, size });
    else {
      f.count++;
      // Keep the smallest input: a poor man's shrink.
      if (size < f.size) Object.assign(f, { example, size });
    }
  };

  health = async (): Promise<void> => {
    this.sinceHealth = 0;
    const base = this.o.base(this.o.server());
    const r = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(5000) }).catch((e: Error) => e);
    if (r instanceof Error || r.status !== 200) throw new Error(`${base}/healthz does not answer after fuzzing: ${r instanceof Error ? r.message : r.status}`);
  };

  /**
   * Sends one request, judges the answer, and checks the store: a rejected request (or any GET)
   * must leave every table as it was. `after` runs after an accepted request (to restore seeds).
   */
  run = async (endpoint: string, r: Req, judge: Judge, opts: { readOnly?: boolean; after?: () => Promise<void> } = {}): Promise<void> => {
    const store = this.o.server().db;
    if (this.snapshot === "") {
      this.snapshot = dumpText(store);
      this.writes = storeWrites(store);
    }
    const res = await this.exec(r);
    const v = await judge(res);
    // FUZZ_DEBUG=1 prints every case, to see what the generators make.
    if (process.env.FUZZ_DEBUG) console.log(`DEBUG ${endpoint} ${res.status} ${describeReq(r)}`);
    this.total++;
    const st = this.stats.get(endpoint) ?? { cases: 0, rejected: 0, accepted: 0 };
    st.cases++;
    if (v.accepted) st.accepted++;
    else st.rejected++;
    this.stats.set(endpoint, st);
    for (const p of v.problems) this.found(`${endpoint}: ${p}`, r, res);
    // The full dump when anything was written (and every 25 cases regardless); otherwise the
    // store cannot have changed.
    const w = storeWrites(store);
    if (w !== this.writes || ++this.sinceDump >= 25) {
      const now = dumpText(store);
      if ((!v.accepted || opts.readOnly) && now !== this.snapshot)
        this.found(`${endpoint}: store changed by a ${v.accepted ? "read" : "rejected request"}`, r, res, diffDumps(JSON.parse(this.snapshot), dumpStore(store)).join("\n    "));
      this.snapshot = now;
      this.writes = w;
      this.sinceDump = 0;
    }
    if (v.accepted && opts.after) {
      await opts.after();
      this.snapshot = dumpText(store);
      this.writes = storeWrites(store);
    }
    if (++this.sinceHealth >= 250) await this.health();
  };

  /** The findings whose kind starts with `prefix`, printed; the tests assert there are none. */
  report = (prefix: string): string[] => {
    const out: string[] = [];
    for (const [k, f] of this.findings) if (k.startsWith(prefix)) out.push(`${k} (${f.count}×)\n    ${f.example}`);
    if (out.length) console.log(`FINDINGS ${prefix}\n${out.join("\n")}`);
    return out;
  };

  /** One line per endpoint: cases, rejected, accepted. */
  rows(): string {
    return [...this.stats].map(([e, st]) => `  ${e.padEnd(44)} ${String(st.cases).padStart(6)} cases  ${String(st.rejected).padStart(6)} rejected  ${String(st.accepted).padStart(5)} accepted`).join("\n");
  }
}

/**
 * Runs a property. A bad answer is recorded as a finding (the smallest input kept), not thrown,
 * so one bug does not stop the run and every kind of problem shows up in one go; the test then
 * asserts there are none. fast-check reports the seed only if the harness itself throws.
 */
export const assertRuns = <T>(arb: fc.Arbitrary<T>, numRuns: number, fn: (v: T) => Promise<void>, seedOffset: number) =>
  fc.assert(
    fc.asyncProperty(arb, async (v) => {
      await fn(v);
    }),
    { numRuns: runs(numRuns), seed: SEED + seedOffset },
  );

// ---- paths and queries (shared by the admin, agent and router fuzzers) ----------------------

export const enc1 = (s: string) => encodeURIComponent(s);
export const SEGMENTS = [
  "", ".", "..", "%00", "a%00b", "%2e%2e", "%2F", "..%2F..%2Fetc%2Fpasswd", "%ZZ", "%E0%A4%A", "%", "%ED%A0%80", "%FF%FE", "__proto__", "constructor", "toString",
  "hasOwnProperty", "%F0%9F%98%80", "%E2%80%AE", "x".repeat(129), "x".repeat(3000), "-x", "x%20y", "x%3Fy", "x%23y", ";", "@", "~", "%0A", "%0D%0Aset-cookie:x",
  "unpark", "cordon", "drain",
];
export function segment(known: string[]): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...SEGMENTS) },
    { weight: 2, arbitrary: fc.string({ unit: "grapheme", maxLength: 20 }).map(enc1) },
    { weight: 2, arbitrary: fc.record({ k: fc.constantFrom(...known), s: fc.constantFrom("%00", "x", "/", "/..", "%2F", ".", "%20", "\u00e9") }).map(({ k, s }) => enc1(k) + s) },
    { weight: 1, arbitrary: fc.constantFrom(...known).map(enc1) },
  );
}
export function pathParam(known: string[]): fc.Arbitrary<string> {
  return fc.array(segment(known), { minLength: 1, maxLength: 3 }).map((s) => s.join("/"));
}

export const QUERY_VALUES = [
  "abc", "-1", "0", "1", "-0", "1.5", "1e308", "-1e308", "1e999", "NaN", "Infinity", "-Infinity", "0x10", "1_000", "%201", "1%20", "", "%00", "%ZZ", "%",
  "9007199254740993", "99999999999999999999", "true", "null", "[]", "{}", "%F0%9F%98%80", "x".repeat(300), "1000", "1001", "60000", "60001", "%ED%A0%80",
];
export function query(keys: string[]): fc.Arbitrary<string> {
  const key = fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...keys) }, { weight: 1, arbitrary: fc.constantFrom("__proto__", "constructor", "toString", "", "a[]", "%00", "limit[0]") });
  const value = fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...QUERY_VALUES) }, { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 12 }).map(enc1) }, { weight: 1, arbitrary: fc.integer().map(String) }, { weight: 1, arbitrary: fc.double().map(String) });
  const pair = fc.oneof({ weight: 8, arbitrary: fc.tuple(key, value).map(([k, v]) => `${k}=${v}`) }, { weight: 1, arbitrary: key }, { weight: 1, arbitrary: value.map((v) => `=${v}`) });
  return fc.oneof(
    { weight: 12, arbitrary: fc.tuple(fc.array(pair, { minLength: 1, maxLength: 4 }), fc.constantFrom("&", "&", "&", ";", "&&")).map(([ps, sep]) => `?${ps.join(sep)}`) },
    { weight: 1, arbitrary: fc.constantFrom("", "?", "?&", "??", "?=", "?&&&") },
  );
}
