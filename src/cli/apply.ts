// `llmgw apply -f catalog.yaml`: create or replace the models a catalog file lists, all or
// none. The file is read here (YAML or JSON) and validated by the server, which names the
// path of every problem (e.g. models.1.profiles.0.gpus).

import { UsageError } from "../config/flags";
import { safeText } from "../lib/text";
import { parseDuration } from "../protocol/duration";
import { CLIENT_FLAGS, CliError, resolveClient } from "./client";
import { WAIT_TIMEOUT, waitForModels } from "./wait";
import { oneLine } from "../lib/format";
import type { ApplyDryRun, ModelView } from "../protocol/views";
import type { Command } from "./command";

export async function readCatalogFile(path: string): Promise<unknown> {
  const text = path === "-" ? await new Response(Bun.stdin.stream()).text() : await Bun.file(path).text().catch(() => {
    throw new CliError(`cannot read ${path}: no such file or not readable`);
  });
  try {
    if (/\.json$/i.test(path)) return JSON.parse(text);
    return Bun.YAML.parse(text);
  } catch (e) {
    throw new CliError(`${path}: not valid ${/\.json$/i.test(path) ? "JSON" : "YAML"}: ${(e as Error).message}`);
  }
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

export const command: Command = {
  name: "apply",
  summary: "Create or replace the models in a catalog file (YAML or JSON).",
  usage: "llmgw apply -f FILE [--dry-run [-o json] | --wait]",
  flags: {
    file: { kind: "string", short: "f", value: "FILE", help: "catalog file (.yaml, .yml or .json; - for stdin)" },
    wait: { kind: "boolean", short: "w", help: "follow the models until each is ready, parked, or known never to fit this fleet (exit 1 for either of those, at once)" },
    timeout: { kind: "string", value: "DURATION", help: `give up waiting after this long (default ${WAIT_TIMEOUT})` },
    "dry-run": { kind: "boolean", help: "change nothing: validate the file, say per model what would change and where each new replica would go (node and GPUs), or why not (never, or not now)" },
    output: { kind: "string", short: "o", value: "FORMAT", help: "with --dry-run: text (default) or json" },
    ...CLIENT_FLAGS,
  },
  details: "Models not in the file are left alone; remove one with `llmgw models delete NAME`. With --dry-run the server validates the file as apply does and answers what it would do, writing nothing (no model, replica or event); `llmgw explain MODEL` says more about one that would not fit.",
  examples: ["llmgw apply -f catalog.yaml", "llmgw apply -f catalog.yaml --dry-run", "llmgw apply -f catalog.yaml --dry-run -o json", "llmgw apply -f catalog.yaml --wait"],
  async run({ flags }) {
    const file = flags.file as string | undefined;
    if (!file) throw new UsageError("apply needs -f FILE");
    const dry = flags["dry-run"] === true;
    if (dry && flags.wait) throw new UsageError("--dry-run changes nothing, so there is nothing to --wait for: use one or the other");
    const output = (flags.output as string | undefined) ?? "text";
    if (!dry && flags.output !== undefined) throw new UsageError("-o/--output is for --dry-run");
    if (output !== "text" && output !== "json") throw new UsageError(`-o/--output must be text or json, not "${output}"`);
    const data = await readCatalogFile(file);
    const client = resolveClient(flags);
    if (dry) {
      const res = await client.send<ApplyDryRun>("POST", "/api/v1/apply?dry_run=1", data);
      process.stdout.write(output === "json" ? `${JSON.stringify(res, null, 2)}\n` : renderDryRun(res));
      return;
    }
    const timeout = parseDuration((flags.timeout as string | undefined) ?? WAIT_TIMEOUT);
    if (timeout === undefined) throw new UsageError(`--timeout must be a duration like 10m, not "${flags.timeout}"`);
    const res = await client.send<{ results: { name: string; message: string }[] }>("POST", "/api/v1/apply", data);
    for (const r of res.results) process.stdout.write(`${safeText(r.message)}\n`);
    // What can never run on this fleet is said now: no tick needs to pass to know it.
    const applied = new Set(res.results.map((r) => r.name));
    const hopeless = (await client.get<ModelView[]>("/api/v1/models")).filter((m) => applied.has(m.name) && m.never_fits && !m.parked);
    for (const m of hopeless) process.stdout.write(`${safeText(`model/${m.name} ${oneLine(m.reason ?? "can never fit on this fleet", 300)}`)}\n`);
    if (!flags.wait) return;
    const final = await waitForModels(client, res.results.map((r) => r.name), timeout);
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
