// `llmgw version`: what this binary is (release, commit, platform, and the protocol version it
// speaks to agents and control planes), as a line for people or JSON for upgrade scripts that
// check every node runs the same build before and after.

import { UsageError } from "../config/flags";
import { PROTOCOL_VERSION } from "../protocol/version";
import { COMMIT, VERSION } from "../version";
import type { Command } from "./command";

export interface VersionInfo {
  version: string;
  commit: string;
  /** The platform the binary runs on, as release files name it: linux-x64, linux-arm64. */
  platform: string;
  protocol: number;
}

export function versionInfo(platform: string = process.platform, arch: string = process.arch): VersionInfo {
  return { version: VERSION, commit: COMMIT, platform: `${platform}-${arch}`, protocol: PROTOCOL_VERSION };
}

export function renderVersion(info: VersionInfo, format: "text" | "json"): string {
  if (format === "json") return `${JSON.stringify(info)}\n`;
  return `llmgw ${info.version} (commit ${info.commit}, ${info.platform}, protocol ${info.protocol})\n`;
}

export const command: Command = {
  name: "version",
  summary: "Print the llmgw version.",
  usage: "llmgw version [-o json]",
  flags: {
    output: { kind: "string", short: "o", value: "FORMAT", choices: ["text", "json"], help: "text (default) or json: {version, commit, platform, protocol}" },
    help: { kind: "boolean", short: "h", help: "show this help" },
  },
  async run({ flags }) {
    const format = (flags.output as string | undefined) ?? "text";
    if (format !== "text" && format !== "json") throw new UsageError(`-o/--output must be one of text, json, not "${format}"`);
    process.stdout.write(renderVersion(versionInfo(), format));
  },
};
