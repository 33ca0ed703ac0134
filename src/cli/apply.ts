// `llmgw apply -f catalog.yaml`: create or replace the models a catalog file lists, all or
// none. The file is read here (YAML or JSON) and validated by the server, which names the
// path of every problem (e.g. models.1.profiles.0.gpus).

import { UsageError } from "../config/flags";
import { CLIENT_FLAGS, CliError, resolveClient } from "./client";
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
  usage: "llmgw apply -f FILE",
  flags: { file: { kind: "string", short: "f", value: "FILE", help: "catalog file (.yaml, .yml or .json; - for stdin)" }, ...CLIENT_FLAGS },
  details: "Models not in the file are left alone; remove one with DELETE /api/v1/models/NAME.",
  examples: ["llmgw apply -f catalog.yaml"],
  async run({ flags }) {
    const file = flags.file as string | undefined;
    if (!file) throw new UsageError("apply needs -f FILE");
    const data = await readCatalogFile(file);
    const client = resolveClient(flags);
    const res = await client.send<{ results: { message: string }[] }>("POST", "/api/v1/apply", data);
    for (const r of res.results) process.stdout.write(`${r.message}\n`);
  },
};
