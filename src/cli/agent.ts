// `llmgw agent`: the daemon on each GPU node. Loads its settings, registers with the head node,
// runs the engines it is assigned, and stops them (or leaves them for the next agent) on
// SIGINT/SIGTERM.

import { basename, join } from "node:path";
import { AgentConfig, defaultText } from "../config";
import { type FlagSpecs, LOG_FORMAT_HELP, LOG_FORMATS, LOG_LEVELS } from "../config/flags";
import type { Command } from "./command";

/** A flag's default as its schema writes it: help states defaults from there, never twice. */
const d = (key: keyof typeof AgentConfig.shape) => defaultText(AgentConfig, key);

export const AGENT_FLAGS: FlagSpecs = {
  config: { kind: "string", short: "c", value: "FILE", help: "config file (.toml, .yaml or .json; env LLMGW_CONFIG)" },
  server: {
    kind: "string",
    value: "URL[,URL…]",
    help: "the head node's admin URL, e.g. http://10.0.0.1:8001, or https://… when it serves TLS (required). With several control planes: each one's, comma-separated (the agent fails over between them), or their floating address",
  },
  "server-ca": { kind: "string", value: "FILE", help: "PEM CA to trust for an https --server, e.g. the head node's self-signed --tls-cert" },
  "server-fingerprint": { kind: "string", value: "SHA256", help: "pin: the server's certificate must have this SHA-256 fingerprint (as `openssl x509 -noout -fingerprint -sha256` prints it); with several servers, every one's" },
  token: { kind: "string", value: "TOKEN", help: "join token from <data-dir>/join.token on the head node, for the first start only (prefer --token-file or env LLMGW_TOKEN: a command line shows in ps)" },
  "token-file": { kind: "string", value: "FILE", help: "read the join token from this file (a copy of <data-dir>/join.token on the head node)" },
  name: { kind: "string", value: "NAME", help: "node name (default: the hostname)" },
  address: {
    kind: "string",
    value: "ADDR",
    help: "address other machines reach this node's engines at (default: first non-internal IPv4). It must be the address the head node sees this node's heartbeats come from; for another one (NAT, a separate data network, a host name) allow it on the head node first: llmgw nodes allow-address NAME ADDR",
  },
  "engine-host": { kind: "string", value: "HOST", help: `address engines listen on (default ${d("engine_host")})` },
  fabric: { kind: "list", value: "NAME", help: "network fabric this node is on, e.g. an InfiniBand island" },
  label: { kind: "list", value: "KEY=VALUE", help: "label to report for this node" },
  "models-dir": { kind: "string", value: "DIR", help: `where model weights are (default ${d("models_dir")})` },
  "models-max-bytes": {
    kind: "string",
    value: "BYTES",
    help: "most bytes of weights llmgw keeps under --models-dir, e.g. 500G or 1.5T (K M G T: powers of 1000; Ki Mi Gi Ti: of 1024). To make room, weights of models with no replica on the node are removed, least recently used first; never files in use, never weights llmgw did not fetch (default: no bound)",
  },
  "weights-max-rate": { kind: "string", value: "BYTES/s", help: "bytes per second this node's weight transfers move together, fetches from the Hub or peers and copies served to peers, e.g. 500M/s: copying weights leaves the rest of the link to the engines' traffic (default: no bound)" },
  "weights-max-transfers": { kind: "string", value: "N", help: `weight files fetched at once, and served to peers at once (default ${d("weights_max_transfers")})` },
  "logs-listen": { kind: "string", value: "HOST:PORT", help: `where the head node fetches engine logs for \`llmgw logs\`, and the peers of this node's fabric copy weights it holds, each with the head node's grant (default ${d("logs_listen")}; off to disable both)` },
  "state-dir": { kind: "string", value: "DIR", help: `this node's credential (node.credential), engine logs and replica state files; kept 0700 (default ${d("state_dir")})` },
  simulate: { kind: "string", value: "SPEC", help: "report simulated GPUs instead of asking nvidia-smi, e.g. H100-80GB:8,A100-80GB/3g.40gb:2; engines run the built-in fake engine" },
  "simulate-unhealthy": { kind: "list", value: "INDEX", help: "simulated GPU index to report unhealthy" },
  "simulate-models": { kind: "list", value: "MODEL", help: "model whose weights a simulated node reports as present" },
  "gpu-class": { kind: "list", value: "NAME=CLASS", help: "report GPUs of this name or class as another class" },
  "nvidia-smi": { kind: "string", value: "PATH", help: `nvidia-smi to run (default: ${d("nvidia_smi")} on PATH)` },
  vllm: { kind: "string", value: "PATH", help: `vLLM's CLI to run (default: ${d("vllm")} on PATH), e.g. /opt/vllm/bin/vllm in a virtualenv` },
  "sglang-python": { kind: "string", value: "PATH", help: `the Python SGLang is installed in (default: ${d("sglang_python")} on PATH)` },
  "llama-server": { kind: "string", value: "PATH", help: `llama-server to run (default: ${d("llama_server")} on PATH)` },
  "vllm-version": { kind: "string", value: "VERSION", help: "vLLM's version, stated instead of asking `vllm --version` (launch templates are chosen by it)" },
  "sglang-version": { kind: "string", value: "VERSION", help: "SGLang's version, stated instead of importing sglang to ask" },
  "llama-server-version": { kind: "string", value: "BUILD", help: "llama-server's build number (e.g. b6869), stated instead of asking `llama-server --version`" },
  "keep-replicas": { kind: "boolean", help: "leave engines running when the agent stops and adopt them when it starts again" },
  "engine-auth": { kind: "string", value: "on|off", help: `default ${d("engine_auth")}. on: every engine gets its replica's own key and answers only the router; off: engines take no key and answer anyone who reaches their port (private networks and benchmarks only; the agent warns at start)` },
  "stop-grace": { kind: "string", value: "DURATION", help: `time between an engine's SIGTERM and SIGKILL (default ${d("stop_grace")})` },
  "start-timeout": { kind: "string", value: "DURATION", help: `how long an engine has to become healthy (default ${d("start_timeout")})` },
  "health-interval": { kind: "string", value: "DURATION", help: `how often a starting engine's /health is polled (default ${d("health_interval")})` },
  "inventory-interval": { kind: "string", value: "DURATION", help: `how often GPUs (nvidia-smi) and weights are looked at again, so a card turning unhealthy reaches the head node (default ${d("inventory_interval")})` },
  "log-level": { kind: "string", value: "LEVEL", choices: LOG_LEVELS, help: `trace, debug, info, warn, error (default ${d("log_level")})` },
  "log-format": { kind: "string", value: "FORMAT", choices: LOG_FORMATS, help: `${LOG_FORMAT_HELP} (default ${d("log_format")})` },
  help: { kind: "boolean", short: "h", help: "show this help" },
};

/**
 * How the agent runs this program's built-in fake engine: the compiled binary is self-contained;
 * from source it is bun plus the entry point.
 */
export function selfExe(): string[] {
  const compiled = Bun.main.startsWith("/$bunfs/") || !/^bun(-[a-z]+)?(\.exe)?$/i.test(basename(process.execPath));
  return compiled ? [process.execPath] : [process.execPath, join(import.meta.dir, "..", "main.ts")];
}

export const command: Command = {
  name: "agent",
  summary: "Run the node agent on a GPU node: report GPUs and weights to the head node and run the engines it assigns.",
  usage: "llmgw agent --server URL[,URL…] --token-file FILE [--name NAME] [--fabric NAME]… [--label KEY=VALUE]… [--simulate SPEC] …",
  flags: AGENT_FLAGS,
  details:
    "Every flag has an environment variable (LLMGW_ + the flag's name in capitals with _ for -; repeatable flags take comma-separated values there) and a config file key (the flag's name with _ for -). Precedence: flags, environment, config file, defaults.\n\n" +
    "The agent keeps running while the head node is unreachable (its engines keep serving) and reconnects by itself.\n\n" +
    "Several control planes: give each one's URL (--server URL1,URL2,URL3; a list in a config file) or their floating address. The agent talks to one at a time and stays with it while it answers; when it does not (no connection, no answer in time, a 5xx such as a 503 from one standing by), the agent moves to the next, keeping its credential and engines, and says so in its log. Every answer names the leader epoch it comes from: the agent keeps the highest in <state-dir>/leader.epoch and refuses assignments from an older leader (it keeps running what it runs), also after a restart. Going back to one head node: remove <state-dir>/leader.epoch on each node and restart its agent, or the single head node must carry on the epoch.\n\n" +
    "Joining: the join token only admits a new node. The first heartbeat's answer carries the node's own credential, which the agent keeps in <state-dir>/node.credential (0600) and uses from then on, also after a restart; the join token is then no longer needed. A node name that has joined cannot join again with the join token: run `llmgw nodes delete NAME` on the head node, remove <state-dir>/node.credential here, and start the agent again.\n\n" +
    "Address: the head node accepts only the address a node's heartbeats come from, unless `llmgw nodes allow-address NAME ADDR` allowed another for it. A host name as --address is refused unless allowed that way.",
  examples: [
    "llmgw agent --server http://10.0.0.1:8001 --token-file /etc/llmgw/join.token --fabric ib-a",
    "LLMGW_TOKEN=\"$(cat /etc/llmgw/join.token)\" llmgw agent --server http://10.0.0.1:8001 --fabric ib-a",
    "llmgw agent --server https://10.0.0.1:8001 --server-fingerprint 9E:3D:…:C4 --fabric ib-a",
    "llmgw agent --server http://10.0.0.1:8001,http://10.0.0.2:8001,http://10.0.0.3:8001 --token-file /etc/llmgw/join.token",
    "llmgw agent -c /etc/llmgw/agent.toml --models-dir /data/models --label rack=r12",
    "llmgw agent --server http://127.0.0.1:8001 --token-file llmgw-data/join.token --address 127.0.0.1 --name sim-01 --simulate H100-80GB:8 --simulate-models llama-3.1-8b",
  ],
  async run({ flags }) {
    const { loadConfig, AgentConfig } = await import("../config");
    const { createLogger } = await import("../log");
    const { NodeAgent, AgentError } = await import("../agent/agent");
    const config = await loadConfig(AgentConfig, { flags, env: process.env });
    const log = createLogger({ level: config.log_level, role: "agent", format: config.log_format });
    const { engineAuthWarning } = await import("../agent/engines");
    const off = engineAuthWarning(config.engine_auth);
    if (off) log.warn(off.fields, off.message);
    const agent = new NodeAgent({ config, log, selfExe: selfExe() });

    let signalled = false;
    const stopped = new Promise<void>((resolve) => {
      const stop = (sig: string) => {
        if (signalled) return;
        signalled = true;
        log.info({ signal: sig }, "shutting down");
        agent.stop().then(resolve, (e) => {
          log.error({ err: e }, "stopping the agent failed");
          resolve();
        });
      };
      process.once("SIGINT", () => stop("SIGINT"));
      process.once("SIGTERM", () => stop("SIGTERM"));
    });
    try {
      await agent.start();
    } catch (e) {
      // Ctrl-C while still waiting for the server is a normal way to give up.
      if (e instanceof AgentError && e.stopped) {
        await stopped;
        return 0;
      }
      throw e;
    }
    process.stderr.write(`llmgw agent: node ${agent.name} (${agent.address}) registered with ${agent.server}\n`);
    await stopped;
  },
};
