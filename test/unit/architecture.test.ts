// The house as DESIGN.md draws it, checked by reading the source: who may import whom, that
// the request path's files import each other in no circle, that time comes only through the
// Scheduler in the roles that keep it, that secrets are hashed and compared in one module, and
// that nothing outgrows what a reader can hold: no function over 120 lines (a screen), no class
// over 500, no source file over 1,000, in every folder of src.

import { describe, expect, test } from "bun:test";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import ts from "typescript";

const SRC = resolve(import.meta.dir, "../../src");

function files(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...files(p));
    else if (/\.tsx?$/.test(e) && !e.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

const ALL = files(SRC).map((p) => ({ path: p, rel: relative(SRC, p), text: readFileSync(p, "utf8") }));
const folder = (rel: string) => (rel.includes("/") ? rel.split("/")[0]! : "");

/** Each file parsed once, however many checks read it. */
const parsed = new Map<string, ts.SourceFile>();
function parse(f: { path: string; text: string }): ts.SourceFile {
  let sf = parsed.get(f.path);
  if (!sf) {
    sf = ts.createSourceFile(f.path, f.text, ts.ScriptTarget.Latest, true, f.path.endsWith(".tsx") ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
    parsed.set(f.path, sf);
  }
  return sf;
}

/** Folders each src folder must never import from. */
const FORBIDDEN: Record<string, string[]> = {
  lib: ["agent", "api", "app", "cli", "config", "control", "protocol", "router", "sim", "store"],
  protocol: ["agent", "api", "app", "cli", "config", "control", "router", "sim", "store"],
  // The HTTP/1.1 wire (server, engine client, what they share): lib only.
  http: ["agent", "api", "app", "cli", "config", "control", "protocol", "router", "sim", "store"],
  // The Hugging Face Hub's API and cache layout, for the control plane and the agent: protocol and lib only.
  hub: ["agent", "api", "app", "cli", "config", "control", "router", "sim", "store"],
  control: ["router", "store", "api", "app", "cli", "agent", "sim"],
  router: ["control", "store", "api", "app", "cli", "agent", "sim"],
  store: ["router", "api", "app", "cli", "agent", "sim"],
  api: ["store", "app", "cli", "agent", "sim"],
  agent: ["control", "store", "router", "api", "app", "cli", "sim"],
  sim: ["api", "app", "cli", "store"],
  cli: ["store"],
};

function importsOf(f: { path: string; text: string }): string[] {
  const out: string[] = [];
  const visit = (n: ts.Node) => {
    if ((ts.isImportDeclaration(n) || ts.isExportDeclaration(n)) && n.moduleSpecifier && ts.isStringLiteral(n.moduleSpecifier)) out.push(n.moduleSpecifier.text);
    if (ts.isCallExpression(n) && n.expression.kind === ts.SyntaxKind.ImportKeyword && n.arguments[0] && ts.isStringLiteral(n.arguments[0])) out.push(n.arguments[0].text);
    ts.forEachChild(n, visit);
  };
  visit(parse(f));
  return out;
}

describe("layering", () => {
  for (const [from, banned] of Object.entries(FORBIDDEN)) {
    test(`${from}/ imports none of ${banned.join(", ")}`, () => {
      const bad: string[] = [];
      for (const f of ALL.filter((f) => folder(f.rel) === from)) {
        for (const spec of importsOf(f)) {
          if (!spec.startsWith(".")) continue;
          const target = relative(SRC, resolve(join(SRC, f.rel, ".."), spec)).split("/")[0]!;
          if (banned.includes(target)) bad.push(`${f.rel} imports ${spec}`);
        }
      }
      expect(bad).toEqual([]);
    });
  }
});

/** Folders whose files may not import each other in a circle: the request path's, read one way. */
const ACYCLIC = ["http", "router"];

describe("no import circles", () => {
  for (const dir of ACYCLIC) {
    test(`${dir}/ files import each other in no circle`, () => {
      const inDir = ALL.filter((f) => folder(f.rel) === dir);
      const edges = new Map<string, string[]>();
      for (const f of inDir) {
        const targets = importsOf(f)
          .filter((s) => s.startsWith("."))
          .map((s) => relative(SRC, resolve(join(SRC, f.rel, ".."), s)).replace(/\.tsx?$/, ""))
          .filter((t) => folder(t) === dir);
        edges.set(f.rel.replace(/\.tsx?$/, ""), targets);
      }
      // Depth-first: a file met again while its own imports are being walked closes a circle.
      const circles: string[] = [];
      const state = new Map<string, "walking" | "done">();
      const walk = (at: string, path: string[]) => {
        state.set(at, "walking");
        for (const next of edges.get(at) ?? []) {
          if (state.get(next) === "walking") circles.push([...path.slice(path.indexOf(next)), at, next].join(" -> "));
          else if (!state.has(next)) walk(next, [...path, at]);
        }
        state.set(at, "done");
      };
      for (const f of edges.keys()) if (!state.has(f)) walk(f, []);
      expect(circles).toEqual([]);
    });
  }
});

const TIMED = ["router", "control", "agent", "app", "http", "hub"];

describe("time only through the Scheduler", () => {
  for (const dir of TIMED) {
    test(`${dir}/ calls no setTimeout, setInterval, Date.now() or performance.now()`, () => {
      const bad: string[] = [];
      for (const f of ALL.filter((f) => folder(f.rel) === dir)) {
        const sf = parse(f);
        const visit = (n: ts.Node) => {
          if (ts.isCallExpression(n)) {
            const e = n.expression.getText(sf);
            if (/^(globalThis\.)?(setTimeout|setInterval|Date\.now|performance\.now)$/.test(e)) bad.push(`${f.rel}:${sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1} ${e}()`);
          }
          if (ts.isNewExpression(n) && n.expression.getText(sf) === "Date" && (!n.arguments || n.arguments.length === 0)) bad.push(`${f.rel}:${sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1} new Date()`);
          ts.forEachChild(n, visit);
        };
        visit(sf);
      }
      expect(bad).toEqual([]);
    });
  }
});

describe("secrets hashed and compared in one place (lib/digest.ts)", () => {
  test("no createHash, createHmac, timingSafeEqual or Bun.CryptoHasher elsewhere, and no second Bearer pattern", () => {
    const bad: string[] = [];
    for (const f of ALL.filter((f) => f.rel !== "lib/digest.ts")) {
      f.text.split("\n").forEach((line, i) => {
        if (/\b(createHash|createHmac|timingSafeEqual|CryptoHasher)\b/.test(line) && !/^\s*(\/\/|\*)/.test(line)) bad.push(`${f.rel}:${i + 1} ${line.trim()}`);
        if (/\^Bearer/.test(line)) bad.push(`${f.rel}:${i + 1} ${line.trim()}`);
      });
    }
    expect(bad).toEqual([]);
  });
});

/** Every folder of src, and the files at its top ("" below): the size limits hold everywhere. */
const FOLDERS = ["", ...readdirSync(SRC).filter((e) => statSync(join(SRC, e)).isDirectory())].sort();
const MAX_FUNCTION = 120;
const MAX_CLASS = 500;
const MAX_FILE = 1_000;

/** A function's or class's name as a reader finds it: its own, or the variable, property or method it is bound to. */
function nameOf(n: ts.Node, sf: ts.SourceFile): string {
  const own = (n as ts.FunctionDeclaration | ts.ClassDeclaration).name;
  if (own) return own.getText(sf);
  if (ts.isConstructorDeclaration(n)) return "constructor";
  const p = n.parent;
  if (p && (ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p) || ts.isPropertyDeclaration(p)) && p.name) return p.name.getText(sf);
  return "(anonymous)";
}

/** What outgrew its limit in one file: "path:line what name is N lines (limit M)". */
function oversized(f: { path: string; rel: string; text: string }): string[] {
  const out: string[] = [];
  const lines = f.text.split("\n").length - (f.text.endsWith("\n") ? 1 : 0);
  if (lines > MAX_FILE) out.push(`${f.rel} is ${lines} lines (limit ${MAX_FILE})`);
  const sf = parse(f);
  const visit = (n: ts.Node) => {
    const isFunction = ts.isFunctionLike(n) && "body" in n && n.body !== undefined;
    const isClass = ts.isClassDeclaration(n) || ts.isClassExpression(n);
    if (isFunction || isClass) {
      const a = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line;
      const length = sf.getLineAndCharacterOfPosition(n.getEnd()).line - a + 1;
      const [what, limit] = isClass ? ["class", MAX_CLASS] : ["function", MAX_FUNCTION];
      if (length > limit) out.push(`${f.rel}:${a + 1} ${what} ${nameOf(n, sf)} is ${length} lines (limit ${limit})`);
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

describe(`no function over ${MAX_FUNCTION} lines, no class over ${MAX_CLASS}, no file over ${MAX_FILE.toLocaleString("en")}`, () => {
  test("every folder of src is checked", () => {
    expect(FOLDERS).toContain("agent");
    expect(FOLDERS.length).toBeGreaterThan(10);
  });
  for (const dir of FOLDERS) {
    test(dir === "" ? "src/ (its top)" : `${dir}/`, () => {
      const bad = ALL.filter((f) => folder(f.rel) === dir).flatMap(oversized);
      expect(bad).toEqual([]);
    });
  }
});
