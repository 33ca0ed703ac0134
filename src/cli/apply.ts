// `llmgw apply -f catalog.yaml`: create or replace the models a catalog file lists, all or
// none. The file is read here (YAML or JSON; a syntax error is reported at its line and
// column) and validated by the server, which names every problem at once by a path like
// models[llama-3.1-8b].profiles[0].gpu_class; each is printed on its own line with the line
// and column of the key it names, as a compiler does.

import { UsageError } from "../config/flags";
import { safeText } from "../lib/text";
import { catalogPath } from "../protocol/catalog";
import { parseDuration } from "../protocol/duration";
import { ApiCallError, CLIENT_FLAGS, CliError, resolveClient } from "./client";
import { STALL_AFTER, WAIT_TIMEOUT, waitForModels } from "./wait";
import { oneLine } from "../lib/format";
import type { ApplyDryRun } from "../protocol/views";
import type { Command } from "./command";
import { type Kind, pathSegments, positionOf, scanPositions, syntaxError } from "./catalog-file";

/** What the admin API accepts in one body (src/app/head.ts): a bigger file could not be applied anyway. */
const MAX_FILE_BYTES = 8 * 1024 * 1024;

export type CatalogText = { name: string; text: string; kind: Kind; data: unknown };

export async function readCatalogFile(path: string): Promise<CatalogText> {
  const name = path === "-" ? "(stdin)" : path;
  const text = path === "-" ? await new Response(Bun.stdin.stream()).text() : await Bun.file(path).text().catch(() => {
    throw new CliError(`cannot read ${path}: no such file or not readable`);
  });
  if (text.length > MAX_FILE_BYTES) throw new CliError(`${name}: ${(text.length / 1024 / 1024).toFixed(1)} MiB is more than the server accepts (${MAX_FILE_BYTES / 1024 / 1024} MiB)`);
  const kind: Kind = /\.json$/i.test(path) ? "json" : "yaml";
  try {
    const data: unknown = kind === "json" ? JSON.parse(text) : Bun.YAML.parse(text);
    if (data === null || data === undefined) throw new CliError(`${safeText(name)}: the file is empty; a catalog is a mapping with a models list (models: [...])`);
    duplicateKeys({ name, text, kind, data });
    return { name, text, kind, data };
  } catch (e) {
    if (e instanceof CliError) throw e;
    const { pos, message } = syntaxError(text, kind, (e as Error).message);
    const what = `not valid ${kind === "json" ? "JSON" : "YAML"}`;
    if (!pos) throw new CliError(safeText(`${name}: ${what}: ${message}`));
    throw new CliError([safeText(`${name}:${pos.line}:${pos.col}: ${what} at line ${pos.line}, column ${pos.col}: ${message}`), ...excerpt(text, pos)].join("\n"));
  }
}

/**
 * A key named twice in one mapping: the parsers keep the last one without a word, so an edit
 * that added a second `replicas:` would apply only half of what its author sees. Each is an
 * error at its line and column, naming where the first one is; nothing is sent.
 */
function duplicateKeys(file: CatalogText): void {
  const { duplicates } = scanPositions(file.text, file.kind);
  if (duplicates.length === 0) return;
  const models = (file.data as { models?: unknown } | null)?.models;
  const lines = duplicates.map(
    (d) => `${file.name}:${d.at.line}:${d.at.col}: ${catalogPath(d.path, d.path.length === 3 && d.path[2] === "name" ? undefined : models)}: duplicate key ${JSON.stringify(String(d.path.at(-1)))} (first at line ${d.first.line}, column ${d.first.col}); name each key once: only the last would count`,
  );
  const n = duplicates.length;
  throw new CliError([`${file.name}: ${n} problem${n > 1 ? "s" : ""}; nothing was applied`, ...lines].map((l) => safeText(l)).join("\n"));
}

/** The line at `pos`, and a caret under its column, as compilers show them (a long line clipped around the column). */
function excerpt(text: string, pos: { line: number; col: number }): string[] {
  const line = text.split("\n")[pos.line - 1]?.replace(/\r$/, "");
  if (line === undefined) return [];
  const from = Math.max(0, pos.col - 60);
  // One visible character per character of the line: a tab or control character would shift the caret.
  const shown = [...line.slice(from, from + 120)].map((ch) => (ch === "\t" ? " " : safeText(ch).length === 1 ? ch : "?")).join("");
  const n = String(pos.line);
  return [`  ${n} | ${from > 0 ? "…" : ""}${shown}`, `  ${" ".repeat(n.length)} | ${from > 0 ? " " : ""}${" ".repeat(Math.max(0, pos.col - 1 - from))}^`];
}

/**
 * The server's problems with a file, one line each: `FILE:LINE:COL: PATH: MESSAGE` (the
 * position of the key the path names, when the file has it), in the file's order; those with
 * no position after, as the server gave them.
 */
export function problemLines(file: CatalogText, issues: readonly { path: string; message: string }[]): string[] {
  const positions = scanPositions(file.text, file.kind);
  const placed = issues.map((i, n) => {
    const segs = pathSegments(i.path, file.data);
    const pos = segs ? positionOf(positions, segs) : undefined;
    return { n, pos, line: safeText(`${file.name}${pos ? `:${pos.line}:${pos.col}` : ""}: ${oneLine(i.path, 300)}: ${oneLine(i.message, 500)}`) };
  });
  const rank = (p: (typeof placed)[number]) => (p.pos ? [p.pos.line, p.pos.col, p.n] : [Number.MAX_SAFE_INTEGER, 0, p.n]);
  return placed
    .sort((a, b) => {
      const [x, y] = [rank(a), rank(b)];
      return x[0]! - y[0]! || x[1]! - y[1]! || x[2]! - y[2]!;
    })
    .map((p) => p.line);
}

/** What a dry run would do, per model: its result, the replicas it would start where, and why not. */
export function renderDryRun(res: ApplyDryRun): string {
  const lines: string[] = [];
  const shard = (s: { node: string; gpus: readonly number[] }) => `${s.node} GPU ${s.gpus.join(",")}`;
  for (const r of res.results) {
    lines.push(safeText(r.message));
    for (const p of r.placements) lines.push(safeText(`  would start a replica (profile ${p.profile}) on ${p.shards.map(shard).join(" + ")}`));
    if (r.reason) lines.push(safeText(`  ${oneLine(r.reason, 400)}`));
    else if (r.placements.length === 0 && r.verdict === "fits") lines.push(safeText(`  ${oneLine(r.summary, 400)}`));
  }
  lines.push("dry run: nothing was changed");
  return lines.join("\n") + "\n";
}

/**
 * Per model of the file that cannot be placed (all its replicas, or some), the reason and
 * whether waiting can help: "never" is said as such, "not now" with how it may yet fit.
 */
export function placementLines(judged: ApplyDryRun): string[] {
  const lines: string[] = [];
  for (const r of judged.results) {
    if (r.verdict === "never" && r.reason) lines.push(`model/${r.name} ${oneLine(r.reason, 400)}`);
    else if (r.verdict === "not_now" && r.reason) {
      const why = oneLine(r.reason.replace(/^not now: /, ""), 400);
      const some = r.placements.length > 0 ? ` (${r.placements.length} of its new replicas can start now)` : "";
      lines.push(`model/${r.name} cannot be placed now${some}: ${why}; waiting can help: it starts once room frees up (\`llmgw explain ${r.name}\` says what would make room)`);
    }
  }
  return lines;
}

export const command: Command = {
  name: "apply",
  summary: "Create or replace the models in a catalog file (YAML or JSON).",
  usage: "llmgw apply -f FILE [--dry-run [-o json] | --wait [--timeout DURATION] [--stall DURATION]]",
  flags: {
    file: { kind: "string", short: "f", value: "FILE", help: "catalog file (.yaml, .yml or .json; - for stdin)" },
    wait: { kind: "boolean", short: "w", help: "follow the models until each is ready, parked, or known never to fit this fleet (exit 1 for either of those, at once)" },
    timeout: { kind: "string", value: "DURATION", help: `give up waiting after this long, exit 1 with what each model waits on (default ${WAIT_TIMEOUT})` },
    stall: { kind: "string", value: "DURATION", help: `say so, with the model's reason, when its ready count has not risen for this long, and keep waiting (default ${STALL_AFTER})` },
    "dry-run": { kind: "boolean", help: "change nothing: validate the file, say per model what would change and where each new replica would go (node and GPUs), or why not (never, or not now)" },
    output: { kind: "string", short: "o", value: "FORMAT", choices: ["text", "json"], help: "with --dry-run: text (default) or json" },
    ...CLIENT_FLAGS,
  },
  details:
    "Models not in the file are left alone; remove one with `llmgw models delete NAME`. A file with problems changes nothing: each is printed on its own line as FILE:LINE:COL: PATH: MESSAGE (PATH like models[llama-3.1-8b].profiles[0].gpu_class), all of them at once; a syntax error is given at its line and column. With --dry-run the server validates the file as apply does and answers what it would do, writing nothing (no model, replica or event); `llmgw explain MODEL` says more about one that would not fit.",
  examples: ["llmgw apply -f catalog.yaml", "llmgw apply -f catalog.yaml --dry-run", "llmgw apply -f catalog.yaml --dry-run -o json", "llmgw apply -f catalog.yaml --wait"],
  async run({ flags }) {
    const file = flags.file as string | undefined;
    if (!file) throw new UsageError("apply needs -f FILE");
    const dry = flags["dry-run"] === true;
    if (dry && flags.wait) throw new UsageError("--dry-run changes nothing, so there is nothing to --wait for: use one or the other");
    const output = (flags.output as string | undefined) ?? "text";
    if (!dry && flags.output !== undefined) throw new UsageError("-o/--output is for --dry-run");
    if (output !== "text" && output !== "json") throw new UsageError(`-o/--output must be text or json, not "${output}"`);
    const timeout = parseDuration((flags.timeout as string | undefined) ?? WAIT_TIMEOUT);
    if (timeout === undefined) throw new UsageError(`--timeout must be a duration like 10m, not "${flags.timeout}"`);
    const stall = parseDuration((flags.stall as string | undefined) ?? STALL_AFTER);
    if (stall === undefined || stall <= 0) throw new UsageError(`--stall must be a duration like 2m, not "${flags.stall}"`);
    const catalog = await readCatalogFile(file);
    const client = resolveClient(flags);
    const refused = (e: unknown): never => {
      if (!(e instanceof ApiCallError) || (e.status !== 400 && e.status !== 409) || e.issues.length === 0) throw e;
      const n = e.issues.length;
      throw new CliError([`${safeText(catalog.name)}: ${n} problem${n > 1 ? "s" : ""}; nothing was applied`, ...problemLines(catalog, e.issues)].join("\n"));
    };
    if (dry) {
      const res = await client.send<ApplyDryRun>("POST", "/api/v1/apply?dry_run=1", catalog.data).catch(refused);
      process.stdout.write(output === "json" ? `${JSON.stringify(res, null, 2)}\n` : renderDryRun(res));
      return;
    }
    // Placement judged on the state the file is applied to (the server's dry run, which writes
    // nothing), so what cannot be placed is said now, with whether waiting helps: no tick
    // needs to pass to know it.
    const judged = await client.send<ApplyDryRun>("POST", "/api/v1/apply?dry_run=1", catalog.data).catch(refused);
    const res = await client.send<{ results: { name: string; message: string }[] }>("POST", "/api/v1/apply", catalog.data).catch(refused);
    for (const r of res.results) process.stdout.write(`${safeText(r.message)}\n`);
    for (const line of placementLines(judged)) process.stdout.write(`${safeText(line)}\n`);
    if (!flags.wait) return;
    const final = await waitForModels(client, res.results.map((r) => r.name), { timeoutMs: timeout, stallMs: stall });
    const parked = final.filter((m) => m.parked);
    const never = final.filter((m) => !m.parked && m.never_fits && m.ready < m.desired);
    const problems = [
      ...(parked.length > 0 ? [`${parked.map((m) => m.name).join(", ")} parked: see \`llmgw models\` for why`] : []),
      ...never.map((m) => `${m.name} ${oneLine(m.reason ?? "can never fit on this fleet", 300)}`),
    ];
    if (problems.length > 0) throw new CliError(problems.join("; "));
    process.stdout.write("all models ready\n");
  },
};
