// `llmgw apply -f catalog.yaml`: create or replace the models a catalog file lists, all or
// none. The file is read here (YAML or JSON) and validated by the server, which names the
// path of every problem (e.g. models.1.profiles.0.gpus).

import { UsageError } from "../config/flags";
import { safeText } from "../lib/text";
import { parseDuration } from "../protocol/duration";
import { CLIENT_FLAGS, CliError, resolveClient } from "./client";
import { STALL_AFTER, WAIT_TIMEOUT, waitForModels } from "./wait";
import { oneLine } from "../lib/format";
import type { ModelView } from "../protocol/views";
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

export const command: Command = {
  name: "apply",
  summary: "Create or replace the models in a catalog file (YAML or JSON).",
  usage: "llmgw apply -f FILE [--wait [--timeout DURATION] [--stall DURATION]]",
  flags: {
    file: { kind: "string", short: "f", value: "FILE", help: "catalog file (.yaml, .yml or .json; - for stdin)" },
    wait: { kind: "boolean", short: "w", help: "follow the models until each is ready, parked, or known never to fit this fleet (exit 1 for either of those, at once)" },
    timeout: { kind: "string", value: "DURATION", help: `give up waiting after this long, exit 1 with what each model waits on (default ${WAIT_TIMEOUT})` },
    stall: { kind: "string", value: "DURATION", help: `say so, with the model's reason, when its ready count has not risen for this long, and keep waiting (default ${STALL_AFTER})` },
    ...CLIENT_FLAGS,
  },
  details: "Models not in the file are left alone; remove one with DELETE /api/v1/models/NAME.",
  examples: ["llmgw apply -f catalog.yaml", "llmgw apply -f catalog.yaml --wait"],
  async run({ flags }) {
    const file = flags.file as string | undefined;
    if (!file) throw new UsageError("apply needs -f FILE");
    const data = await readCatalogFile(file);
    const client = resolveClient(flags);
    const timeout = parseDuration((flags.timeout as string | undefined) ?? WAIT_TIMEOUT);
    if (timeout === undefined) throw new UsageError(`--timeout must be a duration like 10m, not "${flags.timeout}"`);
    const stall = parseDuration((flags.stall as string | undefined) ?? STALL_AFTER);
    if (stall === undefined || stall <= 0) throw new UsageError(`--stall must be a duration like 2m, not "${flags.stall}"`);
    const res = await client.send<{ results: { name: string; message: string }[] }>("POST", "/api/v1/apply", data);
    for (const r of res.results) process.stdout.write(`${safeText(r.message)}\n`);
    // What can never run on this fleet is said now: no tick needs to pass to know it.
    const applied = new Set(res.results.map((r) => r.name));
    const hopeless = (await client.get<ModelView[]>("/api/v1/models")).filter((m) => applied.has(m.name) && m.never_fits && !m.parked);
    for (const m of hopeless) process.stdout.write(`${safeText(`model/${m.name} ${oneLine(m.reason ?? "can never fit on this fleet", 300)}`)}\n`);
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
