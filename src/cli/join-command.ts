// `llmgw join-command`: the exact `llmgw agent …` line to run on each GPU node, with this head
// node's reachable address (or, with several control planes, the list the operator names),
// reading the join token from a file. `serve` prints it on first start too.

import { networkInterfaces } from "node:os";
import { resolve } from "node:path";
import { DEFAULT_DATA_DIR, readServerInfo, readTokenFile } from "../config/datadir";
import { bracketHost } from "../lib/net";
import { CliError } from "./client";
import type { Command } from "./command";

/** The first non-internal IPv4 address, which other machines are most likely to reach. */
export function primaryAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  return undefined;
}

/**
 * The agent command line, reading the join token from a file on the node: a token on a command
 * line ends up in shell history and in `ps`.
 */
export function joinCommand(adminUrl: string, tokenFile: string, address?: string, servers?: readonly string[]): string {
  if (servers && servers.length > 0) return `llmgw agent --server ${servers.join(",")} --token-file ${tokenFile}`;
  const url = new URL(adminUrl);
  // A server listening on all addresses records 127.0.0.1 for local use; GPU nodes need a real one.
  if ((url.hostname === "127.0.0.1" || url.hostname === "localhost") && address) url.hostname = bracketHost(address);
  return `llmgw agent --server ${url.origin} --token-file ${tokenFile}`;
}

/** What `serve` prints on first start and `join-command` prints: where the token is, and the command. */
export function joinInstructions(adminUrl: string, tokenPath: string, address?: string, servers?: readonly string[]): string {
  return [
    `To add a GPU node: the join token is in ${tokenPath} on this head node. Copy that file to the node (same path, mode 0600), then run there:`,
    "",
    `  ${joinCommand(adminUrl, tokenPath, address, servers)}`,
    "",
    `(or LLMGW_TOKEN="$(cat ${tokenPath})" llmgw agent --server …). The token admits new nodes only; each node then gets its own credential and no longer needs it. Keep it secret; \`llmgw join-token rotate\` replaces it.`,
    "",
  ].join("\n");
}

export const command: Command = {
  name: "join-command",
  summary: "Print the command that joins a GPU node to this head node.",
  usage: "llmgw join-command [--address HOST | --server-list URL,URL…] [--data-dir DIR]",
  flags: {
    address: { kind: "string", value: "HOST", help: "address GPU nodes reach this head node at (default: first non-loopback IPv4)" },
    "server-list": {
      kind: "string",
      value: "URL,URL…",
      help: "several control planes: the admin URLs (or the floating address) the agent is to fail over between, comma-separated, printed instead of this head node's",
    },
    "data-dir": { kind: "string", value: "DIR", help: `the server's data dir (default ${DEFAULT_DATA_DIR})` },
    help: { kind: "boolean", short: "h", help: "show this help" },
  },
  details:
    "Run it on the head node, beside `llmgw serve`. It says where the join token is (the data dir's join.token) and prints the agent command that reads it from a file (--token-file), never the token itself: a token on a command line ends up in shell history and `ps`.",
  examples: ["./llmgw join-command", "./llmgw join-command --address 10.0.0.1", "./llmgw join-command --server-list http://10.0.0.1:8001,http://10.0.0.2:8001,http://10.0.0.3:8001"],
  async run({ flags }) {
    const list = flags["server-list"] as string | undefined;
    if (list !== undefined && flags.address !== undefined) throw new CliError("give --address or --server-list, not both: the list names every address itself");
    let servers: string[] | undefined;
    if (list !== undefined) {
      const { ServerList } = await import("../config");
      const parsed = ServerList.safeParse(list);
      if (!parsed.success) throw new CliError(`--server-list: ${parsed.error.issues.map((i) => i.message).join("; ")}`);
      servers = parsed.data;
    }
    const dataDir = (flags["data-dir"] as string | undefined) ?? process.env.LLMGW_DATA_DIR ?? DEFAULT_DATA_DIR;
    const info = readServerInfo(dataDir);
    const token = readTokenFile(dataDir, "join.token");
    if (!info || !token) throw new CliError(`no server data in ${dataDir}: run this beside \`llmgw serve\` (or pass --data-dir)`);
    process.stdout.write(joinInstructions(info.admin_url, resolve(dataDir, "join.token"), (flags.address as string | undefined) ?? primaryAddress(), servers));
  },
};
