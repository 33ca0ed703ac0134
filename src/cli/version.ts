// `llmgw version`: this binary's release, and the server's when one is reachable.

import { VERSION } from "../version";
import type { Command } from "./command";

export const command: Command = {
  name: "version",
  summary: "Print the llmgw version.",
  usage: "llmgw version",
  flags: { help: { kind: "boolean", short: "h", help: "show this help" } },
  async run() {
    process.stdout.write(`llmgw ${VERSION}\n`);
  },
};
