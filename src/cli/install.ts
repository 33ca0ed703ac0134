// `llmgw install serve|agent` writes a systemd unit that runs this binary with the given flags,
// hardened (no new privileges, read-only system, writable only where it must write), restarted
// on failure; `--print` shows the unit instead. `llmgw uninstall` removes it again.

import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { UsageError } from "../config/flags";
import { CliError } from "./client";
import type { Command } from "./command";

/** What an installed service gets unless a flag says otherwise: its user and its directories. */
const INSTALL_DEFAULTS = { user: "llmgw", serveDataDir: "/var/lib/llmgw", agentStateDir: "/var/lib/llmgw-agent", modelsDir: "/var/lib/llmgw/models" } as const;

export interface UnitOptions {
  role: "serve" | "agent";
  binary: string;
  user: string;
  /** serve: the data dir; agent: the state dir. */
  dataDir: string;
  /** agent: where weights live (read, and written by engines' caches). */
  modelsDir?: string;
  /** Flags passed through to the command. */
  args: string[];
  /** Secrets go in an EnvironmentFile readable only by root, never on the command line. */
  envFile?: string;
}

/** Quotes one argument for a systemd ExecStart line. */
function q(arg: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(arg) ? arg : `"${arg.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\$/g, "$$$$")}"`;
}

export function renderUnit(o: UnitOptions): string {
  const serve = o.role === "serve";
  const dataFlag = serve ? ["--data-dir", o.dataDir] : ["--state-dir", o.dataDir];
  const exec = [o.binary, o.role, ...dataFlag, ...(o.modelsDir && !serve ? ["--models-dir", o.modelsDir] : []), ...o.args].map(q).join(" ");
  const writable = [o.dataDir, ...(o.modelsDir && !serve ? [o.modelsDir] : [])];
  return `# Written by \`llmgw install ${o.role}\`; remove with \`llmgw uninstall ${o.role}\`.
[Unit]
Description=${serve ? "llmgw head node: control plane, admin API and OpenAI-compatible router" : "llmgw node agent: reports GPUs and runs model replicas"}
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart=${exec}
User=${o.user}
${o.envFile ? `EnvironmentFile=-${o.envFile}\n` : ""}Environment=HOME=${o.dataDir}
WorkingDirectory=${o.dataDir}
Restart=on-failure
RestartSec=2s
# The ${serve ? "server stops gracefully" : "agent stops its engines (SIGTERM, then SIGKILL)"} on SIGTERM; give it time.
KillMode=mixed
TimeoutStopSec=${serve ? "30s" : "90s"}
LimitNOFILE=65536
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
LockPersonality=yes
ReadWritePaths=${writable.join(" ")}
${serve ? "PrivateDevices=yes\n" : "# GPUs are devices: the agent and its engines need /dev/nvidia*.\n"}
[Install]
WantedBy=multi-user.target
`;
}

export const UNIT_DIR = "/etc/systemd/system";
const unitName = (role: string) => `llmgw-${role}.service`;

function compiledBinary(): string | undefined {
  return Bun.main.startsWith("/$bunfs/") ? process.execPath : undefined;
}

export const install: Command = {
  name: "install",
  summary: "Install llmgw serve or agent as a systemd service (or --print the unit).",
  usage: "llmgw install serve|agent [--print] [--user USER] [--data-dir DIR] [--models-dir DIR] [-- FLAGS…]",
  flags: {
    print: { kind: "boolean", help: "print the unit instead of writing it" },
    user: { kind: "string", value: "USER", help: `user the service runs as (default ${INSTALL_DEFAULTS.user})` },
    "data-dir": { kind: "string", value: "DIR", help: `serve: data dir (default ${INSTALL_DEFAULTS.serveDataDir}); agent: state dir (default ${INSTALL_DEFAULTS.agentStateDir})` },
    "models-dir": { kind: "string", value: "DIR", help: `agent: where model weights live (default ${INSTALL_DEFAULTS.modelsDir})` },
    binary: { kind: "string", value: "PATH", help: "the llmgw binary to run (default: this one)" },
    "unit-dir": { kind: "string", value: "DIR", help: `where to write the unit (default ${UNIT_DIR})` },
    help: { kind: "boolean", short: "h", help: "show this help" },
  },
  details: "Flags after `--` are passed to the command, e.g. the agent's --server and --fabric. Secrets (--token, --admin-token) belong in /etc/llmgw/ROLE.env as LLMGW_TOKEN=… (mode 0600), which the unit reads.",
  examples: [
    "sudo ./llmgw install serve",
    "sudo ./llmgw install agent -- --server http://10.0.0.1:8001 --fabric ib-a",
    "./llmgw install serve --print",
  ],
  async run({ flags, positionals }) {
    const role = positionals[0];
    if (role !== "serve" && role !== "agent") throw new UsageError("install takes serve or agent");
    const binary = (flags.binary as string | undefined) ?? compiledBinary();
    if (!binary) throw new CliError("run install from the compiled llmgw binary (or pass --binary /path/to/llmgw)");
    const abs = isAbsolute(binary) ? binary : resolve(binary);
    const dataDir = resolve((flags["data-dir"] as string | undefined) ?? (role === "serve" ? INSTALL_DEFAULTS.serveDataDir : INSTALL_DEFAULTS.agentStateDir));
    const modelsDir = role === "agent" ? resolve((flags["models-dir"] as string | undefined) ?? INSTALL_DEFAULTS.modelsDir) : undefined;
    const args = positionals.slice(1);
    if (args.some((a) => /^--(token|admin-token|join-token)(=|$)/.test(a)))
      throw new UsageError("keep tokens off the command line (they would show in ps and the unit): put LLMGW_TOKEN=… in /etc/llmgw/" + role + ".env instead");
    const unit = renderUnit({ role, binary: abs, user: (flags.user as string | undefined) ?? INSTALL_DEFAULTS.user, dataDir, modelsDir, args, envFile: `/etc/llmgw/${role}.env` });
    if (flags.print) {
      process.stdout.write(unit);
      return;
    }
    const dir = (flags["unit-dir"] as string | undefined) ?? UNIT_DIR;
    const path = `${dir}/${unitName(role)}`;
    try {
      mkdirSync(dataDir, { recursive: true, mode: 0o700 });
      writeFileSync(path, unit, { mode: 0o644 });
    } catch (e) {
      throw new CliError(`cannot write ${path}: ${(e as Error).message} (run with sudo, or --print and install it yourself)`);
    }
    process.stdout.write(`wrote ${path}\n`);
    const user = (flags.user as string | undefined) ?? INSTALL_DEFAULTS.user;
    if (Bun.spawnSync(["id", "-u", user]).exitCode !== 0) process.stdout.write(`the user ${user} does not exist yet: sudo useradd --system --home ${dataDir} --shell /usr/sbin/nologin ${user}\n`);
    process.stdout.write(`next: sudo chown -R ${user} ${dataDir} && sudo systemctl daemon-reload && sudo systemctl enable --now ${unitName(role)}\n`);
  },
};

export const uninstall: Command = {
  name: "uninstall",
  summary: "Stop and remove the systemd service written by `llmgw install`; data is kept.",
  usage: "llmgw uninstall serve|agent",
  flags: {
    "unit-dir": { kind: "string", value: "DIR", help: `where the unit is (default ${UNIT_DIR})` },
    help: { kind: "boolean", short: "h", help: "show this help" },
  },
  examples: ["sudo ./llmgw uninstall agent"],
  async run({ flags, positionals }) {
    const role = positionals[0];
    if (role !== "serve" && role !== "agent") throw new UsageError("uninstall takes serve or agent");
    const path = `${(flags["unit-dir"] as string | undefined) ?? UNIT_DIR}/${unitName(role)}`;
    if (!existsSync(path)) throw new CliError(`${path} does not exist: nothing to uninstall`);
    if (Bun.which("systemctl")) Bun.spawnSync(["systemctl", "disable", "--now", unitName(role)], { stdout: "ignore", stderr: "ignore" });
    rmSync(path);
    if (Bun.which("systemctl")) Bun.spawnSync(["systemctl", "daemon-reload"], { stdout: "ignore", stderr: "ignore" });
    process.stdout.write(`removed ${path}; the data dir is left as it was\n`);
  },
};
