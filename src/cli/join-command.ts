// `llmgw join-command`: the exact `llmgw agent …` line to run on each GPU node, with this head
// node's reachable address and its join token. `serve` prints it on first start too.

import { networkInterfaces } from "node:os";
import { DEFAULT_DATA_DIR, readServerInfo, readTokenFile } from "../config/datadir";
import { CliError } from "./client";
import type { Command } from "./command";

/** The first non-internal IPv4 address, which other machines are most likely to reach. */
export function primaryAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  return undefined;
}

export function joinCommand(adminUrl: string, token: string, address?: string): string {
  const url = new URL(adminUrl);
  // A server listening on all addresses records 127.0.0.1 for local use; GPU nodes need a real one.
  if ((url.hostname === "127.0.0.1" || url.hostname === "localhost") && address) url.hostname = address;
  return `llmgw agent --server ${url.origin} --token ${token}`;
}

export const command: Command = {
  name: "join-command",
  summary: "Print the command that joins a GPU node to this head node.",
  usage: "llmgw join-command [--address HOST] [--data-dir DIR]",
  flags: {
    address: { kind: "string", value: "HOST", help: "address GPU nodes reach this head node at (default: first non-loopback IPv4)" },
    "data-dir": { kind: "string", value: "DIR", help: `the server's data dir (default ${DEFAULT_DATA_DIR})` },
    help: { kind: "boolean", short: "h", help: "show this help" },
  },
  details: "Run it on the head node, beside `llmgw serve`; it reads the join token from the data dir. Treat the printed line as a secret.",
  examples: ["./llmgw join-command", "./llmgw join-command --address 10.0.0.1"],
  async run({ flags }) {
    const dataDir = (flags["data-dir"] as string | undefined) ?? process.env.LLMGW_DATA_DIR ?? DEFAULT_DATA_DIR;
    const info = readServerInfo(dataDir);
    const token = readTokenFile(dataDir, "join.token");
    if (!info || !token) throw new CliError(`no server data in ${dataDir}: run this beside \`llmgw serve\` (or pass --data-dir)`);
    process.stdout.write(`${joinCommand(info.admin_url, token, (flags.address as string | undefined) ?? primaryAddress())}\n`);
  },
};
