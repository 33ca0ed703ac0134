// `llmgw install serve|agent` writes a systemd unit that runs this binary with the given flags,
// hardened (no new privileges, read-only system, writable only where it must write), restarted
// on failure; `--print` shows the unit instead. `llmgw uninstall` removes it again.
// `llmgw install keepalived` writes keepalived's configuration for the floating address
// (keepalived.ts), checked with `keepalived -t` when keepalived is here. `llmgw install
// prometheus|grafana` prints (or writes) an example Prometheus configuration scraping the
// routers' /metrics with the admin token, and the Grafana dashboard for it (prometheus.ts).

import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { type FlagValues, UsageError } from "../config/flags";
import { CliError } from "./client";
import type { Command } from "./command";
import { KEEPALIVED_DEFAULTS, keepalivedOptions, renderKeepalived } from "./keepalived";
import { PROMETHEUS_DEFAULTS, grafanaDashboard, prometheusOptions, renderPrometheus } from "./prometheus";

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
${killMode(o)}
TimeoutStopSec=${serve ? "30s" : "90s"}
LimitNOFILE=65536
NoNewPrivileges=yes
${serve ? "# Lets the router thread run at a higher CPU priority than the control plane (nice), nothing more.\nAmbientCapabilities=CAP_SYS_NICE\n" : ""}ProtectSystem=strict
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

/**
 * How systemd stops the service. An agent started with --keep-replicas leaves its engines running
 * when it stops (an upgrade adopts them), so systemd must signal the agent alone, not its engines.
 */
function killMode(o: UnitOptions): string {
  if (o.role === "serve") return "# The server stops gracefully on SIGTERM; give it time.\nKillMode=mixed";
  if (o.args.includes("--keep-replicas"))
    return "# --keep-replicas: only the agent is stopped; its engines keep serving and the next agent adopts them.\nKillMode=process";
  return "# The agent stops its engines (SIGTERM, then SIGKILL) on SIGTERM; give it time.\nKillMode=mixed";
}

export const UNIT_DIR = "/etc/systemd/system";
const unitName = (role: string) => `llmgw-${role}.service`;

function compiledBinary(): string | undefined {
  return Bun.main.startsWith("/$bunfs/") ? process.execPath : undefined;
}

export const install: Command = {
  name: "install",
  summary: "Install llmgw serve or agent as a systemd service (or --print the unit), write keepalived's configuration for the floating address, or print Prometheus's scrape configuration and a Grafana dashboard.",
  usage:
    "llmgw install serve|agent [--print] [--user USER] [--data-dir DIR] [--models-dir DIR] [-- FLAGS…]\n  llmgw install keepalived --interface IF --address VIP/PREFIX [--peer ADDR …] [--router-id N] [--priority N] [--server URL] [--for llmgw|database] [--patroni URL] [--print]\n  llmgw install prometheus [--router URL …] [--token-file FILE] [--interval DUR] [--ca FILE] --print|--conf FILE\n  llmgw install grafana --print|--conf FILE",
  flags: {
    print: { kind: "boolean", help: "print the unit (keepalived: the configuration; prometheus, grafana: the file) instead of writing it" },
    user: { kind: "string", value: "USER", help: `user the service runs as (default ${INSTALL_DEFAULTS.user})` },
    "data-dir": { kind: "string", value: "DIR", help: `serve: data dir (default ${INSTALL_DEFAULTS.serveDataDir}); agent: state dir (default ${INSTALL_DEFAULTS.agentStateDir})` },
    "models-dir": { kind: "string", value: "DIR", help: `agent: where model weights live (default ${INSTALL_DEFAULTS.modelsDir})` },
    binary: { kind: "string", value: "PATH", help: "the llmgw binary to run (default: this one)" },
    "unit-dir": { kind: "string", value: "DIR", help: `where to write the unit (default ${UNIT_DIR})` },
    interface: { kind: "string", value: "IF", help: "keepalived: the interface the floating address goes on, e.g. eth0" },
    address: { kind: "string", value: "VIP/PREFIX", help: "keepalived: the floating address with its prefix length, e.g. 10.0.0.100/24" },
    peer: { kind: "list", value: "ADDR", help: "keepalived: another head node's address, for unicast adverts (repeat, or ADDR,ADDR; default multicast)" },
    "router-id": { kind: "string", value: "N", help: `keepalived: virtual_router_id, 1 to 255, the same on every head node and unique on the network (default ${KEEPALIVED_DEFAULTS.routerId.llmgw}; ${KEEPALIVED_DEFAULTS.routerId.database} --for database)` },
    priority: { kind: "string", value: "N", help: `keepalived: this node's VRRP priority, 1 to 254 (default ${KEEPALIVED_DEFAULTS.priority})` },
    server: { kind: "string", value: "URL", help: `keepalived: the local serve's admin URL the check asks (default ${KEEPALIVED_DEFAULTS.server})` },
    for: { kind: "string", value: "WHAT", choices: ["llmgw", "database"], help: "keepalived: llmgw (the address follows the llmgw leader; default) or database (it follows Patroni's primary)" },
    patroni: { kind: "string", value: "URL", help: `keepalived --for database: the local Patroni REST API (default ${KEEPALIVED_DEFAULTS.patroni})` },
    "auth-pass": { kind: "string", value: "PASS", help: "keepalived: VRRP password, at most 8 characters, the same on every head node (default llmgw + the router id)" },
    "script-user": { kind: "string", value: "USER", help: `keepalived: the user the check runs as (default ${KEEPALIVED_DEFAULTS.scriptUser})` },
    conf: { kind: "string", value: "FILE", help: `keepalived: where to write the configuration (default ${KEEPALIVED_DEFAULTS.confPath}); prometheus, grafana: where to write it` },
    router: { kind: "list", value: "URL", help: `prometheus: a head node's router URL to scrape (repeat for each head node; default ${PROMETHEUS_DEFAULTS.router})` },
    "token-file": { kind: "string", value: "FILE", help: `prometheus: the file Prometheus reads the admin token from (default ${PROMETHEUS_DEFAULTS.tokenFile})` },
    interval: { kind: "string", value: "DUR", help: `prometheus: scrape interval (default ${PROMETHEUS_DEFAULTS.interval})` },
    ca: { kind: "string", value: "FILE", help: "prometheus: the CA file that verifies https:// routers" },
    help: { kind: "boolean", short: "h", help: "show this help" },
  },
  details: "Flags after `--` are passed to the command, e.g. the agent's --server and --fabric. Secrets (--token, --admin-token) belong in /etc/llmgw/ROLE.env as LLMGW_TOKEN=… (mode 0600), which the unit reads.\n\ninstall keepalived writes /etc/keepalived/keepalived.conf (--conf FILE elsewhere, --print to show it), checked with keepalived -t: the floating address follows the control plane whose `llmgw healthz --leader` passes (--for database: Patroni's primary, by curl on its GET /primary). Write it on every head node, each listing the others as --peer.\n\ninstall prometheus prints a Prometheus configuration (--conf FILE writes it) that scrapes each --router's GET /metrics with the admin token as a bearer token, read from --token-file; check it with promtool check config. install grafana prints the dashboard JSON for those series (import it in Grafana: Dashboards, New, Import).",
  examples: [
    "sudo ./llmgw install serve",
    "sudo ./llmgw install agent -- --server http://10.0.0.1:8001 --fabric ib-a",
    "./llmgw install serve --print",
    "sudo ./llmgw install keepalived --interface eth0 --address 10.0.0.100/24 --peer 10.0.0.2 --peer 10.0.0.3",
    "./llmgw install keepalived --for database --interface eth0 --address 10.0.0.200/24 --print",
    "./llmgw install prometheus --router http://10.0.0.1:8000 --router http://10.0.0.2:8000 --print > prometheus.yml",
    "./llmgw install grafana --print > llmgw-dashboard.json",
  ],
  async run({ flags, positionals }) {
    const role = positionals[0];
    if (role === "keepalived") return installKeepalived(flags, positionals.slice(1));
    if (role === "prometheus" || role === "grafana") return installMonitoring(role, flags, positionals.slice(1));
    if (role !== "serve" && role !== "agent") throw new UsageError("install takes serve, agent, keepalived, prometheus or grafana");
    for (const f of KEEPALIVED_ONLY) if (flags[f] !== undefined) throw new UsageError(`--${f} is for install keepalived`);
    for (const f of PROMETHEUS_ONLY) if (flags[f] !== undefined) throw new UsageError(`--${f} is for install prometheus`);
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

const KEEPALIVED_ONLY = ["interface", "address", "peer", "router-id", "priority", "server", "for", "patroni", "auth-pass", "script-user", "conf"] as const;
const PROMETHEUS_ONLY = ["router", "token-file", "interval", "ca"] as const;
const SERVICE_ONLY = ["user", "data-dir", "models-dir", "unit-dir"] as const;

/** install prometheus|grafana: the scrape configuration or the dashboard, printed or written to --conf. */
function installMonitoring(role: "prometheus" | "grafana", flags: FlagValues, rest: string[]): void {
  if (rest.length > 0) throw new UsageError(`install ${role} takes flags only, not "${rest[0]}"`);
  for (const f of [...SERVICE_ONLY, ...KEEPALIVED_ONLY.filter((k) => k !== "conf"), ...(role === "grafana" ? PROMETHEUS_ONLY : [])])
    if (flags[f] !== undefined) throw new UsageError(`--${f} is not a flag of install ${role}`);
  const text = role === "prometheus" ? renderPrometheus(prometheusOptions(flags)) : grafanaDashboard();
  if (flags.print) {
    process.stdout.write(text);
    return;
  }
  const path = flags.conf as string | undefined;
  if (path === undefined) throw new UsageError(`install ${role} needs --print (to show it) or --conf FILE (to write it)`);
  try {
    writeFileSync(path, text, { mode: 0o644 });
  } catch (e) {
    throw new CliError(`cannot write ${path}: ${(e as Error).message}`);
  }
  process.stdout.write(`wrote ${path}\n`);
  if (role === "prometheus") process.stdout.write(`next: promtool check config ${path}, copy the admin token to the --token-file path, and reload Prometheus\n`);
  else process.stdout.write("next: import it in Grafana (Dashboards, New, Import) and pick your Prometheus data source\n");
}

/**
 * keepalived's own config test (`keepalived -t -f FILE`): whether it accepts the file and what it
 * said; undefined when keepalived is not installed. keepalived 2.2.7 (Debian 12) kills itself
 * during -t whenever scripts run as a non-root script_user (upstream issues #2587 and #2617, fixed
 * in 2.2.8), although the daemon runs them fine; so the test reads a copy with script_user root,
 * which parses the same everywhere else. It also checks that the interfaces exist: `wrap` runs it
 * where they do (another network namespace).
 */
export function keepalivedTest(conf: string, wrap: (argv: string[]) => string[] = (argv) => argv): { ok: boolean; output: string } | undefined {
  const bin = Bun.which("keepalived") ?? Bun.which("keepalived", { PATH: "/usr/sbin:/sbin" });
  if (!bin) return undefined;
  const dir = mkdtempSync(join(tmpdir(), "llmgw-keepalived-"));
  try {
    const path = join(dir, "keepalived.conf");
    writeFileSync(path, conf.replace(/^([ \t]*script_user)[ \t].*$/m, "$1 root"), { mode: 0o600 });
    const p = Bun.spawnSync(wrap([bin, "-t", "-f", path]), { stdout: "pipe", stderr: "pipe" });
    const output = (p.stdout.toString() + p.stderr.toString()).trim();
    return { ok: p.exitCode === 0, output: output || `keepalived -t exited with ${p.exitCode ?? `signal ${p.signalCode}`} and said nothing` };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function installKeepalived(flags: FlagValues, rest: string[]): Promise<void> {
  if (rest.length > 0) throw new UsageError(`install keepalived takes flags only, not "${rest[0]}" (flags after -- are for serve and agent)`);
  for (const f of SERVICE_ONLY) if (flags[f] !== undefined) throw new UsageError(`--${f} is for install serve and agent, not keepalived`);
  for (const f of PROMETHEUS_ONLY) if (flags[f] !== undefined) throw new UsageError(`--${f} is for install prometheus, not keepalived`);
  const binary = (flags.binary as string | undefined) ?? compiledBinary() ?? "/usr/local/bin/llmgw";
  const curl = Bun.which("curl") ?? "/usr/bin/curl";
  const conf = renderKeepalived(keepalivedOptions(flags, isAbsolute(binary) ? binary : resolve(binary), curl));
  if (flags.print) {
    process.stdout.write(conf);
    return;
  }
  const path = (flags.conf as string | undefined) ?? KEEPALIVED_DEFAULTS.confPath;
  try {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, conf, { mode: 0o644 });
  } catch (e) {
    throw new CliError(`cannot write ${path}: ${(e as Error).message} (run with sudo, or --print and install it yourself)`);
  }
  process.stdout.write(`wrote ${path}\n`);
  const test = keepalivedTest(conf);
  if (!test) process.stdout.write("keepalived is not installed here: sudo apt-get install keepalived, then check the file with keepalived -t -f " + path + "\n");
  else if (!test.ok) throw new CliError(`keepalived -t refuses ${path}:\n${test.output}`);
  process.stdout.write(`next: write the same on every head node (each listing the others as --peer), then sudo systemctl restart keepalived\n`);
}

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
