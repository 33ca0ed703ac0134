// `llmgw __complete nodes|models|replicas|keys|teams|subjects [--server URL] [--token T] [--ca FILE]
// [--data-dir DIR]`: the names shell completion offers, one a line, from the server found the
// way every command finds it. Hidden from help: only the completion script calls it. It prints
// nothing at all on any failure (no server, a refusal, a timeout): a completion must never
// print an error into the operator's command line, nor hold the shell longer than a moment.

import { parseFlags } from "../config/flags";
import { CLIENT_FLAGS, resolveClient } from "./client";

/** How long the server has to answer a completion: a person is waiting at a TAB. */
export const COMPLETE_TIMEOUT_MS = 1500;

/** A name the shell may be given: what the protocol allows a name to be, nothing a shell or a terminal would act on. */
const SAFE = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$/;

type Kind = "nodes" | "models" | "replicas" | "keys" | "teams" | "subjects";
const KINDS: readonly Kind[] = ["nodes", "models", "replicas", "keys", "teams", "subjects"];

export async function completeNames(argv: string[], env = process.env): Promise<string[]> {
  const kind = argv[0] as Kind;
  if (!KINDS.includes(kind)) return [];
  const { flags } = parseFlags(argv.slice(1), CLIENT_FLAGS);
  const client = resolveClient(flags, env, { timeoutMs: COMPLETE_TIMEOUT_MS });
  const names = async (k: Exclude<Kind, "subjects">): Promise<string[]> => {
    if (k === "replicas") return (await client.get<{ id: string }[]>("/api/v1/replicas")).map((r) => r.id);
    return (await client.get<{ name: string }[]>(`/api/v1/${k}`)).map((v) => v.name);
  };
  let out: string[];
  if (kind === "subjects") {
    const [nodes, models, replicas] = await Promise.all([names("nodes"), names("models"), names("replicas")]);
    out = [...nodes.map((n) => `node/${n}`), ...models.map((m) => `model/${m}`), ...replicas.map((r) => `replica/${r}`)];
  } else out = await names(kind);
  return [...new Set(out.filter((n) => typeof n === "string" && SAFE.test(n)))];
}

/** The hidden command: names on stdout, exit 0; on any failure nothing at all, exit 1. */
export async function runComplete(argv: string[]): Promise<number> {
  try {
    const names = await completeNames(argv);
    if (names.length > 0) process.stdout.write(`${names.join("\n")}\n`);
    return 0;
  } catch {
    return 1;
  }
}
