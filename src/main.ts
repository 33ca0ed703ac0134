// llmgw's entry point: subcommand dispatch only. Each command's code is loaded when it runs,
// so `llmgw status` does not pay for the server's imports.

import { UsageError } from "./config/flags";
import type { Command } from "./cli/command";

type Loader = () => Promise<Command>;

const COMMANDS: Record<string, { summary: string; load: Loader }> = {
  serve: { summary: "run the head node (control plane, admin API, router)", load: async () => (await import("./cli/serve")).command },
  status: { summary: "fleet summary: capacity, fabrics, replicas, models, what needs attention", load: async () => (await import("./cli/status")).command },
  nodes: { summary: "list nodes, or show one", load: async () => (await import("./cli/nodes")).command },
  replicas: { summary: "list replicas with placement and idle time", load: async () => (await import("./cli/replicas")).command },
  models: { summary: "list the catalog's models and whether they have what they want", load: async () => (await import("./cli/models")).command },
  apply: { summary: "create or replace models from a catalog file", load: async () => (await import("./cli/apply")).command },
  cordon: { summary: "stop placing replicas on a node", load: async () => (await import("./cli/node-admin")).cordon },
  uncordon: { summary: "allow placement on a node again", load: async () => (await import("./cli/node-admin")).uncordon },
  drain: { summary: "move a node's replicas away and leave it cordoned", load: async () => (await import("./cli/node-admin")).drain },
  healthz: { summary: "check that a control plane answers, or leads (exit 0 or 1): keepalived's check", load: async () => (await import("./cli/healthz")).command },
  backup: { summary: "write a consistent copy of the database while the server runs", load: async () => (await import("./cli/backup")).command },
  keys: { summary: "create, change, list and revoke client API keys for the router", load: async () => (await import("./cli/keys")).command },
  teams: { summary: "create, change, list and delete teams: limits their keys share", load: async () => (await import("./cli/teams")).command },
  usage: { summary: "show what each team, key and model used: requests, tokens, errors, aborted streams", load: async () => (await import("./cli/usage")).command },
  weights: { summary: "list, pull ahead of need and remove the model weights fetched from the Hub", load: async () => (await import("./cli/weights")).command },
  logs: { summary: "show a replica's engine log (-f to follow)", load: async () => (await import("./cli/logs")).command },
  events: { summary: "show what the control plane did and why (-f to follow)", load: async () => (await import("./cli/events")).command },
  explain: { summary: "why a model is (not) placed: per profile the nodes ruled out and why, and what would make it fit", load: async () => (await import("./cli/explain")).command },
  describe: { summary: "one model, node or replica in full: placement, recent events, why it is not what it should be", load: async () => (await import("./cli/describe")).command },
  agent: { summary: "run the node agent on a GPU node", load: async () => (await import("./cli/agent")).command },
  demo: { summary: "run a whole simulated cluster in one process", load: async () => (await import("./cli/demo")).command },
  "fake-engine": { summary: "run the built-in OpenAI-compatible fake engine", load: async () => (await import("./cli/fake-engine")).command },
  "join-token": { summary: "replace the join token (rotate)", load: async () => (await import("./cli/node-trust")).joinTokenCommand },
  "join-command": { summary: "print the command that joins a GPU node to this head node", load: async () => (await import("./cli/join-command")).command },
  install: { summary: "install serve or agent as a systemd service, or write keepalived's configuration", load: async () => (await import("./cli/install")).install },
  uninstall: { summary: "remove the systemd service written by install", load: async () => (await import("./cli/install")).uninstall },
  completion: {
    summary: "print a shell completion script (bash or zsh)",
    load: async () => (await import("./cli/completion")).completionCommand(allCommands),
  },
  version: { summary: "print the version", load: async () => (await import("./cli/version")).command },
};

/** Every command, loaded: what the completion script is generated from. */
export function allCommands(): Promise<Command[]> {
  return Promise.all(Object.values(COMMANDS).map((c) => c.load()));
}

function topHelp(): string {
  const w = Math.max(...Object.keys(COMMANDS).map((k) => k.length)) + 2;
  return [
    "llmgw: self-hosted LLM inference on a small GPU cluster, from one binary.",
    "",
    "Usage:",
    "  llmgw COMMAND [flags]",
    "",
    "Commands:",
    ...Object.entries(COMMANDS).map(([k, c]) => `  ${k.padEnd(w)}${c.summary}`),
    "",
    "Run `llmgw COMMAND --help` for a command's flags and examples.",
    "",
  ].join("\n");
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "help" || name === "--help" || name === "-h") {
    const target = name === "help" ? rest[0] : undefined;
    if (target && COMMANDS[target]) return main([target, "--help"]);
    process.stdout.write(topHelp());
    return name ? 0 : 2;
  }
  if (name === "--version" || name === "-v") return main(["version"]);
  // Hidden: the names shell completion offers (completion.ts); quiet on every failure.
  if (name === "__complete") return (await import("./cli/complete-names")).runComplete(rest);
  const entry = COMMANDS[name];
  if (!entry) {
    const { nearest, safeText } = await import("./lib/text");
    const guess = nearest(name, Object.keys(COMMANDS));
    process.stderr.write(`error: unknown command "${safeText(name)}"${guess ? `; did you mean \`llmgw ${guess}\`?` : ""} (run \`llmgw --help\` for the list)\n`);
    return 2;
  }
  const cmd = await entry.load();
  try {
    const { parseFor } = await import("./cli/command");
    const parsed = parseFor(cmd, rest);
    if (!parsed) return 0;
    const code = await cmd.run({ ...parsed, argv: rest });
    return typeof code === "number" ? code : 0;
  } catch (e) {
    const err = e as Error & { exitCode?: number };
    if (e instanceof UsageError) {
      process.stderr.write(`error: ${err.message}\nRun \`llmgw ${name} --help\` for usage.\n`);
      return 2;
    }
    // Errors meant for people (bad config, unreachable server, API refusals) are one line;
    // anything else is a bug and keeps its stack for the report.
    if ((err as { userFacing?: boolean }).userFacing) process.stderr.write(`error: ${err.message}\n`);
    else process.stderr.write(`error: ${err.stack ?? String(e)}\n`);
    return err.exitCode ?? 1;
  }
}

if (import.meta.main) {
  const code = await main(process.argv.slice(2));
  process.exitCode = code;
}
