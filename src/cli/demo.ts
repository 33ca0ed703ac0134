// `llmgw demo`: a whole simulated cluster in one process — the head node plus simulated GPU
// nodes running the built-in fake engine — with a demo catalog, so anyone can watch llmgw place,
// start, fail, park and drain replicas on a laptop.

import { readdirSync, readFileSync, rmSync, writeSync } from "node:fs";
import { join, relative } from "node:path";
import { LOG_FORMAT_HELP, LOG_FORMATS, LOG_LEVELS, UsageError } from "../config/flags";
import type { Command } from "./command";
import type { LogFormat } from "../log";

export const command: Command = {
  name: "demo",
  summary: "Run a whole simulated cluster in one process: head node, simulated GPU nodes, fake engines, a demo catalog.",
  usage: "llmgw demo [--nodes N] [--data-dir DIR] [--admin-listen HOST:PORT]",
  flags: {
    nodes: { kind: "string", value: "N", help: "simulated nodes (default 4: 2×H100 in ib-a; A100 with MIG and a broken card, L40S in ib-b)" },
    "data-dir": { kind: "string", value: "DIR", help: "where the demo keeps its state (default ./llmgw-data; wiped at start)" },
    "admin-listen": { kind: "string", value: "HOST:PORT", help: "admin API (default 127.0.0.1:8001)" },
    listen: { kind: "string", value: "HOST:PORT", help: "router (default 127.0.0.1:8000)" },
    "engine-base-port": { kind: "string", value: "PORT", help: "first port for the fake engines (default 8100)" },
    "log-level": { kind: "string", value: "LEVEL", choices: LOG_LEVELS, help: "server log level (default warn: the demo prints what matters)" },
    "log-format": { kind: "string", value: "FORMAT", choices: LOG_FORMATS, help: `${LOG_FORMAT_HELP} (default auto)` },
    help: { kind: "boolean", short: "h", help: "show this help" },
  },
  examples: ["llmgw demo", "llmgw demo --nodes 12", "llmgw status   # in another terminal, same directory"],
  async run({ flags }) {
    const nodesFlag = flags.nodes as string | undefined;
    const count = nodesFlag === undefined ? undefined : Number(nodesFlag);
    if (count !== undefined && (!Number.isInteger(count) || count < 1 || count > 200)) throw new UsageError(`--nodes must be a whole number from 1 to 200, not "${nodesFlag}"`);
    const logFormat = (flags["log-format"] as string | undefined) ?? "auto";
    if (!(LOG_FORMATS as readonly string[]).includes(logFormat)) throw new UsageError(`--log-format must be auto, text or json, not "${logFormat}"`);
    const logLevel = (flags["log-level"] as string | undefined) ?? "warn";
    if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) throw new UsageError(`--log-level must be one of ${LOG_LEVELS.join(", ")}, not "${logLevel}"`);
    const dataDir = (flags["data-dir"] as string | undefined) ?? process.env.LLMGW_DATA_DIR ?? "./llmgw-data";

    const { holdsServerData, startCluster } = await import("../app/cluster");
    // Never wipe a real server's data: only a previous demo's.
    if (holdsServerData(dataDir)) throw new UsageError(`${dataDir} holds a real server's data; give the demo its own --data-dir`);
    for (const f of ["llmgw.db", "llmgw.db-wal", "llmgw.db-shm"]) rmSync(join(dataDir, f), { force: true });
    // A demo killed with SIGKILL could not stop its engines: stop what it left before taking its ports.
    const leftovers = stopLeftoverEngines(join(dataDir, "agents"));
    // Written at once (not queued on a pipe), so it is not lost if the demo is stopped right away.
    if (leftovers > 0) writeSync(2, `llmgw demo: stopped ${leftovers} fake engine(s) a previous demo left running\n`);
    rmSync(join(dataDir, "agents"), { recursive: true, force: true });
    // Engines started from here exit by themselves if this process dies without stopping them.
    process.env.LLMGW_EXIT_WITH_PARENT = String(process.pid);

    const { createLogger } = await import("../log");
    const { demoNodes, demoCatalog, startDemoHub } = await import("../sim/demo");
    const { ModelSpec } = await import("../protocol/catalog");
    const format = logFormat as LogFormat;
    const log = createLogger({ level: logLevel, role: "demo", format });
    const nodes = demoNodes(count);
    // tiny-llm's weights come from here: its node fetches them before its engine starts.
    const hub = startDemoHub(join(dataDir, "hub"));
    const cluster = await startCluster({
      serve: {
        data_dir: dataDir,
        hf_endpoint: hub.url,
        admin_listen: (flags["admin-listen"] as string | undefined) ?? "127.0.0.1:8001",
        listen: (flags.listen as string | undefined) ?? "127.0.0.1:8000",
        heartbeat_interval: "1s",
        node_timeout: "5s",
        replace_after: "10s",
        restart_backoff: "1s",
        start_timeout: "60s",
        log_format: format,
        ...(flags["engine-base-port"] ? { engine_base_port: flags["engine-base-port"] } : {}),
      },
      nodes,
      log,
      // Engine exits are the demo's point (one model fails on purpose); `llmgw events` tells
      // them better than warnings scrolling past here.
      agentLog: createLogger({ level: "error", role: "demo-agent", format }),
      demo: { catalog: demoCatalog().map((m) => ModelSpec.parse(m)) },
    }).catch((e: unknown) => {
      hub.stop();
      throw e;
    });

    const byFabric = new Map<string, string[]>();
    for (const n of nodes) byFabric.set(n.fabric, [...(byFabric.get(n.fabric) ?? []), n.name]);
    const dirFlag = flags["data-dir"] ? ` --data-dir ${shellWord(dataDir)}` : "";
    const me = selfCommand();
    const tour = [
      [`${me} status${dirFlag}`, "the fleet at a glance"],
      [`${me} models${dirFlag}`, "what each model has and why not"],
      [`${me} replicas -o wide${dirFlag}`, "where replicas run (tiny-llm: fetching its weights, then ready)"],
      [`${me} events -f${dirFlag}`, "what the control plane does, as it does it"],
      [`${me} drain h100-1${dirFlag}`, "watch the 405b move… (it cannot: no other 2 whole H100 nodes)"],
      [`${me} cordon l40s-1${dirFlag}`, "stop placement on a node"],
    ];
    const pad = Math.max(...tour.map(([c]) => c!.length)) + 2;
    process.stdout.write(
      [
        "llmgw demo: a simulated cluster is running.",
        "",
        `  OpenAI API ${cluster.server.routerUrl}/v1   (e.g. curl ${cluster.server.routerUrl}/v1/models)`,
        `  admin API  ${cluster.server.adminUrl}   (token: ${join(dataDir, "admin.token")})`,
        `  nodes      ${[...byFabric].map(([f, ns]) => `${ns.join(" ")} (${f})`).join(", ")}`,
        "  catalog    llama-3.1-8b (min 2), qwen2.5-7b (on demand), llama-3.1-405b (2 nodes),",
        "             deepseek-v3 (needs H200s: cannot fit), mistral-7b-broken (fails every start: parks),",
        "             tiny-llm (source: hf://demo/tiny-llm: its node fetches its weights first, shown as fetching)",
        `  Hub        ${hub.url}   (a stand-in Hugging Face Hub serving tiny-llm)`,
        "",
        "Try, in another terminal in this directory:",
        ...tour.map(([c, what]) => `  ${c!.padEnd(pad)}${what}`),
        "",
        "Ctrl-C stops the cluster and every fake engine.",
        "",
      ].join("\n"),
    );
    await new Promise<void>((resolve) => {
      let stopping = false;
      const stop = () => {
        if (stopping) return;
        stopping = true;
        process.stdout.write("\nstopping the demo cluster…\n");
        cluster
          .stop()
          .finally(() => hub.stop())
          .then(resolve, resolve);
      };
      process.on("SIGINT", stop);
      process.on("SIGTERM", stop);
    });
  },
};

/** `s` as one shell word: as it is when it needs no quoting, else in single quotes. */
export function shellWord(s: string): string {
  return /^[\w./@%+=:,-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`;
}

/**
 * This binary as the user ran it, for the commands the demo prints to copy: the path as typed
 * ("./dist/llmgw", "/opt/llmgw/llmgw", or "llmgw" when the shell found it on PATH), which works
 * from the same directory. Run from source (`bun src/main.ts demo`), bun and the script.
 */
export function selfCommand(p: { argv0: string; main: string; cwd: string } = { argv0: process.argv0, main: Bun.main, cwd: process.cwd() }): string {
  // A compiled binary's own code lives in Bun's embedded filesystem.
  const compiled = p.main.startsWith("/$bunfs/") || /^[A-Z]:[\\/]~BUN[\\/]/i.test(p.main);
  if (!compiled) return `bun ${shellWord(relative(p.cwd, p.main) || p.main)}`;
  return p.argv0 ? shellWord(p.argv0) : "llmgw";
}

/**
 * Kills the fake engines that a previous demo's simulated agents recorded in their replica
 * state files (agents/<node>/replicas/*.json) and that still run: only processes whose command
 * line is an llmgw fake engine, so a reused pid is never touched. Returns how many it stopped.
 */
export function stopLeftoverEngines(agentsDir: string): number {
  let stopped = 0;
  let nodes: string[];
  try {
    nodes = readdirSync(agentsDir);
  } catch {
    return 0;
  }
  for (const node of nodes) {
    const dir = join(agentsDir, node, "replicas");
    let files: string[];
    try {
      files = readdirSync(dir).filter((f) => f.endsWith(".json"));
    } catch {
      continue;
    }
    for (const f of files) {
      try {
        const pid = (JSON.parse(readFileSync(join(dir, f), "utf8")) as { pid?: unknown }).pid;
        if (typeof pid !== "number" || !Number.isInteger(pid) || pid <= 1) continue;
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0");
        if (!cmdline.includes("fake-engine")) continue;
        try {
          process.kill(-pid, "SIGKILL");
        } catch {
          process.kill(pid, "SIGKILL");
        }
        stopped++;
      } catch {
        // Unreadable state file or a process already gone: nothing to stop.
      }
    }
  }
  return stopped;
}
