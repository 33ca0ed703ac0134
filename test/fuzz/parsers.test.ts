// Property-based fuzzing of the parsers that take input from people and files, in process: the
// router's pass over request bodies (scanJson, readBody) never throws and never lets through a
// body JSON.parse finds deeper or fuller than the limits; the
// catalog schemas (ModelSpec, CatalogFile) never throw and name every problem's path, and what
// they accept survives storage and the GET → PUT round trip; loadConfig (serve and agent) with
// fuzzed flags, environment and TOML/YAML/JSON files always gives a valid config or a
// ConfigError whose every line names its key, never another exception.

import { afterAll, expect, test } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { EXTRA_KEYS, type Op, type Path, Raw, allPaths, applyOp, bodies, containerAt, mutated, own } from "../helpers/fuzz";
import { jsonShape } from "../helpers/json-bodies";
import { scanJson } from "../../src/router/body-scan";
import { readBody, utf8Text } from "../../src/router/request-body";
import { specToWire } from "../../src/api/admin";
import { AgentConfig, ConfigError, loadConfig, ServeConfig } from "../../src/config";
import { CatalogFile, ModelSpec } from "../../src/protocol/catalog";
import { scratchDir } from "../helpers/tmp";

const SEED = Number(process.env.FUZZ_SEED ?? 424242);
/** Multiplies every run count: FUZZ_SCALE=10 for a long soak, 0.1 for a quick look. */
const SCALE = Number(process.env.FUZZ_SCALE ?? 1);
const runs = (n: number) => Math.max(1, Math.round(n * SCALE));

// ---- JSON with tokens JSON.stringify cannot write ---------------------------------------


function toJson(v: unknown): string {
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
  if (typeof v === "bigint") return String(v);
  if (typeof v === "symbol" || typeof v === "function") return "null";
  return JSON.stringify(v) ?? "null";
}


// ---- hostile values ---------------------------------------------------------------------
// In process, values need not survive JSON: NaN, -0, bigints, dates, maps, symbols, null
// prototypes, sparse arrays, and what a TOML or YAML parser can hand back.

const MB = "x".repeat(1 << 20);
function deep(n: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < n; i++) v = { a: v };
  return v;
}
const HUGE: unknown[] = [MB, new Array(100_000).fill(0), new Array(100_000).fill("a"), deep(10_000), JSON.parse("[".repeat(10_000) + "]".repeat(10_000))];
const NUMBERS: unknown[] = [-1, -0, 0, 0.5, 1.5, -1.5, 1e308, -1e308, 2 ** 31, 2 ** 53 + 2, 65536, 1e21, 5e-324, NaN, Infinity, -Infinity];
const STRINGS = [
  "", " ", "\u0000", "a\u0000b", "😀", "👩‍👩‍👧‍👦", "\u202eevil", "مرحبا بالعالم", "\ud800", "\udfff", "a\ud800b", "../../etc/passwd", "a/../b", "/abs",
  "a//b", "x".repeat(129), "x".repeat(257), "x".repeat(4097), "__proto__", "constructor", "prototype", "30 m", "-5s", "1e309s", "true", "null", "NaN",
  "Infinity", "\n", "a b", "%00", "'; DROP TABLE models; --", "\ufeff", "a=b", "=", "A".repeat(64), "1", "0.0.0.0:99999", ":8000", "[::1]:8000", "http://", "1h30m", "1.5s",
  "9999999999999999999999d", `${"9".repeat(400)}s`, "0", "-1", "1e3",
];
const OBJECTS: unknown[] = [
  null, undefined, true, false, [], {}, [1], ["a"], [null], [[[]]], { a: 1 }, 10n, -1n, 2n ** 70n, new Date(0), new Date(NaN), new Map([["a", 1]]), new Set(["a"]),
  Symbol("s"), Object.create(null), Object.assign(Object.create(null), { name: "x" }), [, 1], new Uint8Array(3), new String("boxed"), new Number(1), /re/,
  JSON.parse('{"__proto__":{"polluted":1}}'), JSON.parse('{"constructor":{"prototype":{"polluted":1}}}'), JSON.parse('{"toString":1}'), JSON.parse('{"toString":1,"valueOf":1}'),
];

const hostile: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...NUMBERS) },
  { weight: 8, arbitrary: fc.constantFrom(...STRINGS) },
  { weight: 8, arbitrary: fc.constantFrom(...OBJECTS) },
  { weight: 3, arbitrary: fc.double() },
  { weight: 3, arbitrary: fc.integer() },
  { weight: 3, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
  {
    weight: 3,
    arbitrary: fc.anything({ maxDepth: 2, maxKeys: 4, withBigInt: true, withDate: true, withMap: true, withSet: true, withNullPrototype: true, withSparseArray: true, withTypedArray: true, withBoxedValues: true }),
  },
  { weight: 1, arbitrary: fc.constantFrom(...HUGE) },
);


// ---- mutators of a valid value ------------------------------------------------------------






const describeOp = (o: Op): string => {
  const p = o.path.join(".") || "(root)";
  const show = (v: unknown) => {
    if (v instanceof Raw) return String(v);
    if (typeof v === "string" && v.length > 40) return `"${v.slice(0, 40)}…"[${v.length}]`;
    try {
      return toJson(v).slice(0, 60);
    } catch {
      return Object.prototype.toString.call(v); // 10,000 levels deep: too deep to write out
    }
  };
  if (o.op === "set") return `set ${p} = ${show(o.value)}`;
  if (o.op === "delete") return `delete ${p}`;
  if (o.op === "dup") return `duplicate first element of ${p}`;
  return `add ${p}[${JSON.stringify(o.key.slice(0, 20))}] = ${show(o.value)}`;
};



// ---- bookkeeping ----------------------------------------------------------------------------

interface Finding {
  count: number;
  example: string;
  size: number;
}
const findings = new Map<string, Finding>();
const counts = new Map<string, number>();
let total = 0;

function clip(s: string, n = 300): string {
  return s.length > n ? `${s.slice(0, n)}…[${s.length} chars]` : s;
}
/** Shows any value, even the ones JSON cannot (bigints, symbols, NaN). */
function show(v: unknown): string {
  try {
    return clip(Bun.inspect(v, { depth: 4 }).replace(/\s+/g, " "), 400);
  } catch {
    return String(v);
  }
}
/** Records a problem; "kind — detail": the kind groups findings, the detail goes with the example. */
function found(problem: string, input: string, outcome: string): void {
  const cut = problem.indexOf(" — ");
  const kind = cut < 0 ? problem : problem.slice(0, cut);
  const example = `${input}\n    → ${clip(outcome, 500)}${cut < 0 ? "" : `\n    ${problem.slice(cut + 3)}`}`;
  const f = findings.get(kind);
  if (!f) findings.set(kind, { count: 1, example, size: input.length });
  else {
    f.count++;
    // Keep the smallest input: a poor man's shrink.
    if (input.length < f.size) Object.assign(f, { example, size: input.length });
  }
}
function count(what: string): void {
  total++;
  counts.set(what, (counts.get(what) ?? 0) + 1);
}
function report(prefix: string): string[] {
  const out: string[] = [];
  for (const [k, f] of findings) if (k.startsWith(prefix)) out.push(`${k} (${f.count}×)\n    ${f.example}`);
  if (out.length) console.log(`FINDINGS ${prefix}\n${out.join("\n")}`);
  return out;
}

const dir = scratchDir("llmgw-fuzz-config-");
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  const rows = [...counts].map(([k, n]) => `  ${k.padEnd(44)} ${String(n).padStart(6)} cases`);
  console.log(`parsers fuzz (seed ${SEED}, scale ${SCALE}):\n${rows.join("\n")}\nparsers fuzz total: ${total} cases`);
});

const isPlainObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v) && Object.getPrototypeOf(v) === Object.prototype;

/** Problems with a failed safeParse: every issue needs a path (an array) and a message; inside an object, a non-empty path. */
function issueProblems(input: unknown, issues: readonly { path: readonly PropertyKey[]; message: string; code: string }[]): string[] {
  const p: string[] = [];
  if (issues.length === 0) p.push("failed with no issues");
  for (const i of issues) {
    if (!Array.isArray(i.path)) p.push(`an issue without a path — ${i.code}`);
    else if (typeof i.message !== "string" || i.message.trim() === "") p.push(`an issue without a message — at ${i.path.map(String).join(".")}`);
    else if (isPlainObject(input) && i.path.length === 0 && i.code !== "unrecognized_keys") p.push(`an issue at the root of an object names no field — ${i.code}: ${i.message}`);
  }
  return p;
}

// ---- catalog schemas ------------------------------------------------------------------------

const validModel = (name: string) => ({
  name,
  aliases: [`${name}-alias`, `${name}:latest`],
  replicas: { min: 1, max: 2 },
  on_demand: false,
  idle_timeout: "30m",
  pool: "default",
  weight: 1,
  placement: "binpack",
  target_inflight: 4,
  profiles: [
    { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1, nodes: 1, priority: 0, args: ["--max-model-len", "8192"], env: { HF_HOME: "/models", CUDA_LAUNCH_BLOCKING: "1" } },
    { name: "a100", engine: "sglang", gpu_class: "A100-80GB", gpus: 2, nodes: 2, priority: 1, args: [], env: {} },
  ],
});

/**
 * What an accepted spec must satisfy: every number is one JSON (and so the store) can hold, the
 * GET → PUT round trip through specToWire gives it back, and no key of a record was dropped.
 */
function acceptedProblems(input: unknown, spec: ModelSpec): string[] {
  const p: string[] = [];
  const walk = (v: unknown, at: string): void => {
    if (typeof v === "number" && !Number.isFinite(v)) p.push(`accepted a number JSON cannot hold, which the store keeps as null — ${at} = ${v}`);
    else if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${at}.${i}`));
    else if (v !== null && typeof v === "object") for (const [k, x] of Object.entries(v)) walk(x, at ? `${at}.${k}` : k);
  };
  walk(spec, "");
  const again = ModelSpec.safeParse(specToWire(spec));
  if (!again.success) p.push(`specToWire of an accepted spec does not parse again — ${again.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  else if (JSON.stringify(again.data) !== JSON.stringify(spec)) p.push("specToWire → parse does not give the accepted spec back");
  const profiles = isPlainObject(input) && Array.isArray(input.profiles) ? input.profiles : [];
  profiles.forEach((prof: unknown, i: number) => {
    const env = isPlainObject(prof) ? prof.env : undefined;
    if (env === null || typeof env !== "object") return;
    const want = Object.keys(env).sort();
    const got = Object.keys(spec.profiles[i]?.env ?? {}).sort();
    if (JSON.stringify(want) !== JSON.stringify(got)) p.push(`a record key accepted but dropped — profiles.${i}.env: accepted keys ${JSON.stringify(want)}, kept ${JSON.stringify(got)}`);
  });
  return p;
}

test("ModelSpec.safeParse never throws, names every problem's path, and what it accepts round-trips", () => {
  const arb = fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom("llama", "org/mistral", "q:7b").chain((n) => mutated(validModel(n))) },
    { weight: 1, arbitrary: fc.anything({ maxDepth: 3, withBigInt: true, withNullPrototype: true, withDate: true, withMap: true }).map((value) => ({ value, note: "fc.anything" })) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((value) => ({ value, note: "fc.jsonValue" })) },
  );
  fc.assert(
    fc.property(arb, ({ value, note }) => {
      count("ModelSpec.safeParse");
      let r: ReturnType<typeof ModelSpec.safeParse>;
      try {
        r = ModelSpec.safeParse(value);
      } catch (e) {
        found(`ModelSpec: safeParse threw ${(e as Error).name}`, `${show(value)} [${note}]`, (e as Error).message);
        return;
      }
      if (!r.success) for (const p of issueProblems(value, r.error.issues)) found(`ModelSpec: ${p}`, `${show(value)} [${note}]`, JSON.stringify(r.error.issues).slice(0, 300));
      else for (const p of acceptedProblems(value, r.data)) found(`ModelSpec: ${p}`, `${show(value)} [${note}]`, show(r.data));
    }),
    { numRuns: runs(2000), seed: SEED + 31 },
  );
  expect(report("ModelSpec")).toEqual([]);
}, 60_000);

test("CatalogFile.safeParse never throws, names every problem's path, and accepts no name twice", () => {
  const valid = { models: [validModel("llama"), validModel("org/mistral"), validModel("embed")] };
  const arb = fc.oneof(
    { weight: 8, arbitrary: mutated(valid) },
    { weight: 1, arbitrary: fc.anything({ maxDepth: 4, withNullPrototype: true }).map((value) => ({ value: { models: [value] }, note: "models: [fc.anything]" })) },
    { weight: 1, arbitrary: fc.anything({ maxDepth: 3 }).map((value) => ({ value, note: "fc.anything" })) },
  );
  fc.assert(
    fc.property(arb, ({ value, note }) => {
      count("CatalogFile.safeParse");
      let r: ReturnType<typeof CatalogFile.safeParse>;
      try {
        r = CatalogFile.safeParse(value);
      } catch (e) {
        found(`CatalogFile: safeParse threw ${(e as Error).name}`, `${show(value)} [${note}]`, (e as Error).message);
        return;
      }
      if (!r.success) {
        for (const p of issueProblems(value, r.error.issues)) found(`CatalogFile: ${p}`, `${show(value)} [${note}]`, JSON.stringify(r.error.issues).slice(0, 300));
        return;
      }
      const names = r.data.models.flatMap((m) => [m.name, ...m.aliases]);
      if (new Set(names).size !== names.length) found("CatalogFile: accepted a name or alias used twice", `${show(value)} [${note}]`, JSON.stringify(names));
      r.data.models.forEach((m, i) => {
        for (const p of acceptedProblems((value as { models: unknown[] }).models[i], m)) found(`CatalogFile: models.${i}: ${p}`, `${show(value)} [${note}]`, show(m));
      });
    }),
    { numRuns: runs(800), seed: SEED + 32 },
  );
  expect(report("CatalogFile")).toEqual([]);
}, 60_000);

// ---- config files, flags and environment ------------------------------------------------------

/** A TOML writer good enough for fuzzing: inline tables and arrays, quoted keys, TOML's own inf/nan. */
function toToml(top: Record<string, unknown>): string {
  const key = (k: string) => (/^[A-Za-z0-9_-]+$/.test(k) ? k : JSON.stringify(k));
  const val = (v: unknown): string => {
    if (v instanceof Raw) return v.text;
    if (typeof v === "number") return Number.isNaN(v) ? "nan" : v === Infinity ? "inf" : v === -Infinity ? "-inf" : String(v);
    if (typeof v === "bigint" || typeof v === "boolean") return String(v);
    if (typeof v === "string") return JSON.stringify(v);
    if (v instanceof Date) return Number.isNaN(v.getTime()) ? '"Invalid Date"' : v.toISOString();
    if (Array.isArray(v)) return `[${[...v].map((x) => val(x ?? "")).join(", ")}]`;
    if (v !== null && typeof v === "object") return `{ ${Object.keys(v).map((k) => `${key(k)} = ${val((v as Record<string, unknown>)[k])}`).join(", ")} }`;
    return '""';
  };
  return Object.keys(top)
    .filter((k) => top[k] !== undefined && top[k] !== null)
    .map((k) => `${key(k)} = ${val(top[k])}`)
    .join("\n");
}

/** A block-style YAML writer; scalars as JSON, which YAML reads. */
function toYaml(v: unknown, indent = ""): string {
  if (Array.isArray(v)) return v.length === 0 ? "[]" : [...v].map((x) => `\n${indent}- ${toYaml(x, `${indent}  `).trimStart()}`).join("");
  if (v !== null && typeof v === "object" && !(v instanceof Raw) && !(v instanceof Date)) {
    const keys = Object.keys(v);
    return keys.length === 0 ? "{}" : keys.map((k) => `\n${indent}${JSON.stringify(k)}: ${toYaml((v as Record<string, unknown>)[k], `${indent}  `)}`).join("");
  }
  if (v instanceof Raw) return v.text;
  if (typeof v === "bigint") return String(v);
  if (v instanceof Date) return Number.isNaN(v.getTime()) ? "~" : v.toISOString();
  if (typeof v === "number" && !Number.isFinite(v)) return Number.isNaN(v) ? ".nan" : v > 0 ? ".inf" : "-.inf";
  return JSON.stringify(v) ?? "~";
}

const FILE_GARBAGE = [
  "", "\ufeff", 'a = [1, "x"\n', "[table]\na = 1\n[table]\nb = 2", "a = 1\na = 2", "data_dir = 1979-05-27T07:32:00Z", "[[x]]\n", "a = '''", "= 1", "a.b.c = 1",
  "a: [\n  - {", "key: &a [*a]", "a: *nowhere", "!!binary aGVsbG8=", "? [a]\n: 1", "<<: {a: 1}", "a: !!js/function 'x'", "\ta: 1", "%YAML 1.1\n---\na: 1", "--- |\n  text",
  "a: 1\n---\nb: 2", "- 1\n- 2", "null", "42", '"string"', "{", '{"a":1}{', "[]",
  '{"__proto__":{"log_level":"debug"}}', "__proto__:\n  log_level: debug", '[__proto__]\nlog_level = "debug"', '{"constructor":{"prototype":{"log_level":"debug"}}}',
  "[".repeat(10_000) + "]".repeat(10_000), `a = ${"[".repeat(10_000)}${"]".repeat(10_000)}`, '{"a":'.repeat(10_000) + "1" + "}".repeat(10_000),
];
const EXTS = [".toml", ".yaml", ".yml", ".json", ".TOML", ".Json", ".txt", "", ".toml.bak", ".ini"];

type FileSpec = { kind: "none" } | { kind: "missing" } | { kind: "dir" } | { kind: "file"; ext: string; content: Uint8Array; note: string };

const enc = new TextEncoder();
function fileSpecs(valid: Record<string, unknown>): fc.Arbitrary<FileSpec> {
  // Keys as people write them: snake_case or kebab-case.
  const kebab = Object.fromEntries(Object.entries(valid).map(([k, v]) => [k.replace(/_/g, "-"), v]));
  const values = fc.oneof(mutated(valid), mutated(kebab), fc.anything({ maxDepth: 2, withDate: true, withBigInt: true }).map((value) => ({ value, note: "fc.anything" })));
  const structured = fc.record({ m: values, ext: fc.constantFrom(...EXTS) }).map(({ m, ext }): FileSpec => {
    const fmt = /toml/i.test(ext) ? "toml" : /ya?ml/i.test(ext) ? "yaml" : "json";
    const v = m.value;
    let text: string;
    try {
      text = fmt === "toml" ? (isPlainObject(v) ? toToml(v) : String(v)) : fmt === "yaml" ? toYaml(v) : toJson(v);
    } catch (e) {
      text = `# could not write: ${(e as Error).message}`;
    }
    return { kind: "file", ext, content: enc.encode(text), note: `${fmt}: ${m.note}` };
  });
  const garbage = fc
    .record({
      ext: fc.constantFrom(...EXTS),
      content: fc.oneof(
        fc.constantFrom(...FILE_GARBAGE).map((t) => ({ bytes: enc.encode(t), note: `garbage ${clip(JSON.stringify(t), 40)}` })),
        fc.uint8Array({ maxLength: 200 }).map((bytes) => ({ bytes, note: "random bytes" })),
        fc.string({ unit: "binary", maxLength: 200 }).map((t) => ({ bytes: enc.encode(t), note: "random text" })),
        fc.constant({ bytes: enc.encode(`data_dir = "${MB}"`), note: "1 MiB value" }),
        fc
          .constantFrom(new Uint8Array([0xff, 0xfe, 0x61, 0x3a, 0x20, 0x31]), new Uint8Array([0xef, 0xbb, 0xbf, 0x7b, 0x7d]), new Uint8Array([0xc3, 0x28]))
          .map((bytes) => ({ bytes, note: "invalid UTF-8 or a BOM" })),
      ),
    })
    .map(({ ext, content }): FileSpec => ({ kind: "file", ext, content: content.bytes, note: content.note }));
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant<FileSpec>({ kind: "none" }) },
    { weight: 6, arbitrary: structured },
    { weight: 3, arbitrary: garbage },
    { weight: 1, arbitrary: fc.constantFrom<FileSpec>({ kind: "missing" }, { kind: "dir" }) },
  );
}

const flagString = fc.oneof(fc.constantFrom(...STRINGS), fc.string({ maxLength: 30 }));
const flagValue: fc.Arbitrary<string | boolean | string[]> = fc.oneof(
  { weight: 6, arbitrary: flagString },
  { weight: 1, arbitrary: fc.boolean() },
  { weight: 2, arbitrary: fc.array(flagString, { maxLength: 3 }) },
);

let fileNo = 0;
function materialise(f: FileSpec): string | undefined {
  if (f.kind === "none") return undefined;
  if (f.kind === "missing") return join(dir, `missing-${fileNo++}.toml`);
  if (f.kind === "dir") {
    const p = join(dir, `dir-${fileNo++}.yaml`);
    mkdirSync(p);
    return p;
  }
  const p = join(dir, `c${fileNo++}${f.ext}`);
  writeFileSync(p, f.content);
  return p;
}

/** The config file's top-level keys as loadConfig reads them (own keys, "-" as "_"); empty when it does not parse. */
async function fileKeys(path: string): Promise<string[]> {
  try {
    // Read the way loadConfig reads it (Bun.file honours a UTF-16 byte order mark, for one).
    const text = await Bun.file(path).text();
    const data: unknown = /\.toml$/i.test(path) ? Bun.TOML.parse(text) : /\.ya?ml$/i.test(path) ? Bun.YAML.parse(text) : /\.json$/i.test(path) ? JSON.parse(text) : undefined;
    return data !== null && typeof data === "object" && !Array.isArray(data) ? Object.keys(data).map((k) => k.replace(/-/g, "_")) : [];
  } catch {
    return [];
  }
}

async function fuzzConfig(name: string, schema: typeof ServeConfig | typeof AgentConfig, valid: Record<string, unknown>, validFlags: Record<string, string | boolean | string[]>, seed: number, numRuns: number): Promise<void> {
  const shape = schema.shape as Record<string, { safeParse(v: unknown): { success: boolean } }>;
  const keys = Object.keys(shape);
  const arb = fc.record({
    file: fileSpecs(valid),
    base: fc.boolean(),
    flags: fc.dictionary(fc.oneof(fc.constantFrom(...keys.map((k) => k.replace(/_/g, "-"))), fc.constantFrom("__proto__", "constructor", "no-such-flag")), flagValue, { maxKeys: 3 }),
    env: fc.dictionary(fc.constantFrom(...keys.map((k) => `LLMGW_${k.toUpperCase()}`), "LLMGW___PROTO__", "LLMGW_CONSTRUCTOR"), flagString, { maxKeys: 3 }),
    via: fc.constantFrom("flag", "input", "env"),
  });
  await fc.assert(
    fc.asyncProperty(arb, async ({ file, base, flags: fuzzed, env, via }) => {
      count(`loadConfig(${name})`);
      const path = materialise(file);
      const flags: Record<string, string | boolean | string[]> = { ...(base ? validFlags : {}), ...fuzzed };
      const envAll: Record<string, string | undefined> = { ...env };
      if (path && via === "flag") flags["config"] = path;
      if (path && via === "env") envAll["LLMGW_CONFIG"] = path;
      const input = { flags, env: envAll, ...(path && via === "input" ? { configPath: path } : {}) };
      const desc = `flags=${show(flags)} env=${show(envAll)} file=${file.kind === "file" ? `${file.ext} ${clip(JSON.stringify(new TextDecoder().decode(file.content)), 200)} [${file.note}]` : file.kind}`;
      const inFile = file.kind === "file" && path ? await fileKeys(path) : [];
      const unknownInFile = inFile.filter((k) => !keys.includes(k));
      let result: unknown;
      try {
        result = await loadConfig(schema, input);
      } catch (e) {
        if (!(e instanceof ConfigError)) {
          found(`loadConfig(${name}): threw ${(e as Error)?.constructor?.name ?? typeof e}, not ConfigError`, desc, String((e as Error)?.message ?? e));
          return;
        }
        if (!Array.isArray(e.problems) || e.problems.length === 0) found(`loadConfig(${name}): ConfigError with no problems`, desc, e.message);
        const named = new Set([...keys, ...inFile]);
        for (const p of e.problems) {
          if (typeof p !== "string" || p.trim() === "") found(`loadConfig(${name}): an empty problem`, desc, e.message);
          else if (!p.startsWith("config file ") && ![...named].some((k) => p.startsWith(k) && /^( \(from |: |\.)/.test(p.slice(k.length))))
            found(`loadConfig(${name}): a problem that names no key of the input`, desc, p);
        }
        for (const k of unknownInFile) if (!e.problems.some((p) => p.includes(k))) found(`loadConfig(${name}): an unknown key of the file is not among the problems — "${k}"`, desc, e.message);
        return;
      }
      if (unknownInFile.length > 0) found(`loadConfig(${name}): accepted a file with an unknown key — ${unknownInFile.map((k) => JSON.stringify(k)).join(", ")}`, desc, show(result));
      if (!isPlainObject(result)) found(`loadConfig(${name}): resolved to a non-object`, desc, show(result));
      else for (const k of keys) if (result[k] === undefined && !shape[k]!.safeParse(undefined).success) found(`loadConfig(${name}): a valid config without a required key — ${k}`, desc, show(result));
    }),
    { numRuns: runs(numRuns), seed },
  );
}

test("loadConfig(ServeConfig) gives a config or a ConfigError naming keys, never another exception", async () => {
  const valid = {
    data_dir: "/tmp/llmgw-fuzz",
    listen: "127.0.0.1:8000",
    admin_listen: "[::1]:8001",
    admin_token: "a".repeat(24),
    node_timeout: "15s",
    max_failures: 5,
    max_body_bytes: 1048576,
    require_api_key: false,
    engine_base_port: 8100,
    log_level: "info",
  };
  await fuzzConfig("ServeConfig", ServeConfig, valid, { "log-level": "warn", "max-attempts": "2" }, SEED + 41, 1000);
  expect(report("loadConfig(ServeConfig)")).toEqual([]);
}, 60_000);

test("loadConfig(AgentConfig) gives a config or a ConfigError naming keys, never another exception", async () => {
  const valid = {
    server: "http://10.0.0.1:8001",
    token: "b".repeat(24),
    name: "gpu-01",
    fabric: ["ib-a"],
    label: ["rack=r1"],
    simulate: "H100-80GB:8",
    simulate_unhealthy: [1],
    keep_replicas: true,
    stop_grace: "30s",
    log_level: "debug",
  };
  await fuzzConfig("AgentConfig", AgentConfig, valid, { server: "http://127.0.0.1:8001", token: "c".repeat(20) }, SEED + 42, 800);
  expect(report("loadConfig(AgentConfig)")).toEqual([]);
}, 60_000);

// ---- the router's pass over request bodies ------------------------------------------------

test("scanJson and readBody never throw; a body the scan passes parses within its limits, counted exactly", () => {
  const valid = {
    model: "m",
    stream: true,
    previous_response_id: "resp_1",
    messages: [
      { role: "system", content: "be brief" },
      { role: "user", content: [{ type: "text", text: 'say "hi" \\ [ok]' }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] },
    ],
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { type: "array", items: { type: "string" } } } } } }],
  };
  fc.assert(
    fc.property(bodies(valid), fc.integer({ min: 1, max: 10 }), fc.integer({ min: 1, max: 40 }), (body, maxDepth, maxValues) => {
      const limits = { maxDepth, maxValues };
      const s = scanJson(body.bytes, limits);
      const read = readBody(body.bytes, limits);
      let parsed: unknown;
      try {
        parsed = JSON.parse(utf8Text(body.bytes));
      } catch {
        // Not JSON: the scan only counts; JSON.parse refuses it (when the scan let it through).
        if (s.over === undefined) expect(read.reply?.status).toBe(400);
        return;
      }
      const shape = jsonShape(parsed);
      if (s.over === "depth") expect(shape.depth).toBeGreaterThan(maxDepth);
      else if (s.over === "values") expect(shape.values).toBeGreaterThan(maxValues);
      else {
        expect(shape.depth).toBeLessThanOrEqual(maxDepth);
        expect(s.values).toBe(shape.values);
        const model = (parsed as { model?: unknown } | null)?.model;
        if (typeof model === "string" && model !== "" && !Array.isArray(parsed)) {
          // Read, or refused for another field (a previous_response_id that is no string).
          if (read.facts !== undefined) expect(read.facts.model).toBe(model);
          else expect(read.reply?.status).toBe(400);
          expect(JSON.parse(utf8Text(body.bytes.subarray(s.modelStart, s.modelEnd)))).toBe(model);
        }
      }
    }),
    { seed: SEED + 50, numRuns: runs(3000) },
  );
});
