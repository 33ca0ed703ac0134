// `llmgw serve`: the head node. Loads the configuration, starts the control plane and the
// admin/agent API, and stops cleanly on SIGINT/SIGTERM.

import { join } from "node:path";
import { ServeConfig, defaultText } from "../config";
import { type FlagSpecs, LOG_FORMAT_HELP, LOG_FORMATS, LOG_LEVELS } from "../config/flags";
import type { Command } from "./command";

/** A default as the schema states it: help never writes one of its own. */
const d = (key: keyof typeof ServeConfig.shape) => defaultText(ServeConfig, key);

export const SERVE_FLAGS: FlagSpecs = {
  config: { kind: "string", short: "c", value: "FILE", help: "config file (.toml, .yaml or .json; env LLMGW_CONFIG)" },
  "data-dir": { kind: "string", value: "DIR", help: `database, tokens and state (default ${d("data_dir")}; env LLMGW_DATA_DIR)` },
  listen: { kind: "string", value: "HOST:PORT", help: `router (OpenAI API) listener (default ${d("listen")})` },
  "admin-listen": { kind: "string", value: "HOST:PORT", help: `admin and agent API listener (default ${d("admin_listen")})` },
  "admin-token": { kind: "string", value: "TOKEN", help: "admin token (default: generated into <data-dir>/admin.token); several control planes on one store share one, which the store keeps only as a digest" },
  "join-token": { kind: "string", value: "TOKEN", help: "agent join token (default: generated into <data-dir>/join.token)" },
  "node-timeout": { kind: "string", value: "DURATION", help: `no heartbeat for this long makes a node unreachable (default ${d("node_timeout")})` },
  "heartbeat-interval": { kind: "string", value: "DURATION", help: `how often agents heartbeat (default ${d("heartbeat_interval")})` },
  "reconcile-interval": { kind: "string", value: "DURATION", help: `control loop tick (default ${d("reconcile_interval")})` },
  "start-timeout": { kind: "string", value: "DURATION", help: `how long an engine has to become healthy when its catalog profile sets no start_timeout; the agent is given it, and the server fails a replica still starting this + 2 heartbeat intervals + 1m after placement (default ${d("start_timeout")})` },
  "max-failures": { kind: "string", value: "N", help: `failed starts in a row, or crashes within --crash-window of becoming ready in a row, after which a model is parked (default ${d("max_failures")})` },
  "restart-backoff": { kind: "string", value: "DURATION", help: `first retry delay after a failure, doubling each time (default ${d("restart_backoff")})` },
  "restart-backoff-max": { kind: "string", value: "DURATION", help: `longest retry delay (default ${d("restart_backoff_max")})` },
  "crash-window": { kind: "string", value: "DURATION", help: `a replica that crashes within this long of becoming ready counts towards its model's crash loop (restarted after the restart backoff, parked after --max-failures in a row); one that stays ready this long ends the loop (default ${d("crash_window")})` },
  "drain-timeout": { kind: "string", value: "DURATION", help: `a replica replaced in a rolling restart (a catalog change to its args, env, revision or profile, or llmgw models restart) gets no new requests and is stopped once its requests in flight finish, or after this long (default ${d("drain_timeout")}; env LLMGW_DRAIN_TIMEOUT)` },
  "replace-after": { kind: "string", value: "DURATION", help: `how long a node may be unreachable before its replicas are replaced (default ${d("replace_after")})` },
  "usage-ledger": { kind: "string", value: "on|off", choices: ["on", "off"], help: `router: count each key's use per model and hour from the engines' usage (llmgw usage); off, streamed requests go to engines untouched and nothing is counted (default ${d("usage_ledger")})` },
  "hf-endpoint": { kind: "string", value: "URL", help: "the Hugging Face Hub, or a mirror or proxy cache of it, that catalog sources hf://ORG/NAME come from (default HF_ENDPOINT, else https://huggingface.co)" },
  "hf-token-file": { kind: "string", value: "FILE", help: "file holding a Hub token for gated and private repositories; it stays on the head node (agents get it only for the transfers that need it, never in an engine's environment or on disk)" },
  "usage-retention": { kind: "string", value: "DURATION", help: `how long the usage ledger's hourly rows are kept (default ${d("usage_retention")})` },
  "scale-down-delay": { kind: "string", value: "DURATION", help: `a model scaled on target_inflight scales down by one replica only after its load stayed low this long (default ${d("scale_down_delay")})` },
  "engine-base-port": {
    kind: "string",
    value: "PORT",
    help: `first port handed to engines on each node: engines get PORT…PORT+N-1 (N = --engine-port-range), multi-node replicas a rendezvous block of 16 ports each in PORT+N…PORT+2N-1; no other port is handed out, so a firewall can open exactly these (default ${d("engine_base_port")})`,
  },
  "engine-port-range": {
    kind: "string",
    value: "N",
    help: `how many engine ports each node address has from --engine-base-port on, so at most N replicas per address; with all N in use a replica is not placed there and its model says so (default ${d("engine_port_range")})`,
  },
  "first-byte-timeout": { kind: "string", value: "DURATION", help: `router: upstream's first byte within this (default ${d("first_byte_timeout")})` },
  "stream-idle-timeout": { kind: "string", value: "DURATION", help: `router: longest quiet gap in a stream (default ${d("stream_idle_timeout")})` },
  "cold-start-timeout": { kind: "string", value: "DURATION", help: `router: a request for an on-demand model with no replica waits this long, or as long as the server gives the model's replica to start when that is longer (its profiles' longest start timeout, else --start-timeout, + 2 heartbeat intervals + 1m) (default ${d("cold_start_timeout")})` },
  "cold-start-progress-interval": { kind: "string", value: "DURATION", help: `router: a streamed request (stream: true) held for a cold start gets 200 and text/event-stream at once, then an SSE comment line this often and when its node is known (": starting MODEL on NODE, 12 s"), so proxies do not cut it (default ${d("cold_start_progress_interval")})` },
  "max-held-per-model": { kind: "string", value: "N", help: `router: requests held for one cold model at once; past it 503 with Retry-After (default ${d("max_held_per_model")})` },
  "max-attempts": { kind: "string", value: "N", help: `router: attempts per request, retries only before the first byte (default ${d("max_attempts")})` },
  "max-body-bytes": { kind: "string", value: "BYTES", help: `router: largest request body; the default holds images of about 3 MiB in all as base64 data URLs (default ${d("max_body_bytes")})` },
  "max-json-depth": { kind: "string", value: "N", help: `router: deepest nesting of arrays and objects in a request body; deeper gets 400 before it is parsed (default ${d("max_json_depth")})` },
  "max-json-values": { kind: "string", value: "N", help: `router: JSON values (array elements and object members) in a request body; more gets 413 before it is parsed (default ${d("max_json_values")})` },
  "balance-load-factor": { kind: "string", value: "F", help: `router: load bound for placing a conversation, × its share of the requests in flight (default ${d("balance_load_factor")}); a conversation stays on its replica up to max(2, F) × its share` },
  "require-api-key": { kind: "boolean", help: `router: /v1/* needs a client key from \`llmgw keys create\` (default ${d("require_api_key")})` },
  "router-thread": { kind: "boolean", help: `router: run on its own thread, so control-plane work (heartbeats, applies, the store) never delays a request; --router-thread=false runs it in the main thread (default ${d("router_thread")})` },
  "endpoint-cooldown": { kind: "string", value: "DURATION", help: `router: pass a failing replica over this long (default ${d("endpoint_cooldown")})` },
  "head-timeout": { kind: "string", value: "DURATION", help: `both listeners: a request's head must arrive within this of its first byte, or 408 (default ${d("head_timeout")})` },
  "body-timeout": { kind: "string", value: "DURATION", help: `both listeners: a request's body must arrive within this of its head, plus 1 s per --body-min-rate bytes received, or 408 (default ${d("body_timeout")})` },
  "body-min-rate": { kind: "string", value: "BYTES", help: `both listeners: bytes/s of body that earn one more second past --body-timeout; 0 makes --body-timeout the whole budget (default ${d("body_min_rate")})` },
  "max-connections": { kind: "string", value: "N", help: `router listener: open connections at most; past it new ones get 503 and are closed (default ${d("max_connections")})` },
  "max-connections-per-address": { kind: "string", value: "N", help: `router listener: open connections from one source address at most (default ${d("max_connections_per_address")})` },
  "admin-max-connections": { kind: "string", value: "N", help: `admin/agent listener: open connections at most, apart from the router's (default ${d("admin_max_connections")})` },
  "admin-max-connections-per-address": { kind: "string", value: "N", help: `admin/agent listener: open connections from one source address at most (default ${d("admin_max_connections_per_address")})` },
  "approve-nodes": { kind: "boolean", help: `a new node waits as pending (no replicas placed on it) until \`llmgw nodes approve NAME\` (default ${d("approve_nodes")})` },
  "max-nodes": { kind: "string", value: "N", help: `nodes accepted in all; a new node beyond is refused (default ${d("max_nodes")})` },
  "heartbeat-rate": { kind: "string", value: "N", help: `agent API requests (heartbeats, assignment polls) per second per node before 429 (default ${d("heartbeat_rate")}; an agent needs well under 1)` },
  "heartbeat-burst": { kind: "string", value: "N", help: `requests per node allowed at once above --heartbeat-rate (default ${d("heartbeat_burst")})` },
  "tls-cert": { kind: "string", value: "FILE", help: "PEM certificate: both listeners serve HTTPS (with --tls-key; env LLMGW_TLS_CERT)" },
  "tls-key": { kind: "string", value: "FILE", help: "PEM private key of --tls-cert (env LLMGW_TLS_KEY)" },
  "log-level": { kind: "string", value: "LEVEL", choices: LOG_LEVELS, help: `trace, debug, info, warn, error (default ${d("log_level")})` },
  "log-format": { kind: "string", value: "FORMAT", choices: LOG_FORMATS, help: `${LOG_FORMAT_HELP} (default ${d("log_format")})` },
  store: { kind: "string", value: "URL", help: "where the state lives: postgres://user@db1:5432,db2:5432,db3:5432/llmgw?target_session_attrs=primary for several control planes, or a SQLite file (default <data-dir>/llmgw.db; env LLMGW_STORE)" },
  "db-query-timeout": { kind: "string", value: "DURATION", help: `PostgreSQL store: one call, its retries included, fails as the store being unavailable (503) past this; the server is given the same limit (statement_timeout, idle_in_transaction_session_timeout) (default ${d("db_query_timeout")})` },
  ha: { kind: "boolean", help: "several control planes on this store, one leading by a lease (on by itself with a PostgreSQL store; on SQLite only for control planes sharing one file on one machine)" },
  name: { kind: "string", value: "NAME", help: "this control plane's name among the others (default the hostname)" },
  "advertise-url": { kind: "string", value: "URL", help: "the admin URL other control planes and `llmgw status` reach this one at (default from --admin-listen)" },
  "lease-ttl": { kind: "string", value: "DURATION", help: `the leader lease lapses this long after its last renewal (default ${d("lease_ttl")})` },
  "lease-renew": { kind: "string", value: "DURATION", help: `how often the leader renews its lease (default ${d("lease_renew")})` },
  "floating-address": { kind: "string", value: "ADDRESS", help: "the address keepalived keeps on the leader (`llmgw install keepalived`); status says whether it answers as the leader" },
  patroni: { kind: "list", value: "URL,…", help: "the Patroni REST API of each store member (http://db1:8008,…): status shows them and their lag" },
  help: { kind: "boolean", short: "h", help: "show this help" },
};

export const command: Command = {
  name: "serve",
  summary: "Run the head node: control plane, admin and agent API, and the OpenAI-compatible router.",
  usage: "llmgw serve [--data-dir DIR] [--admin-listen HOST:PORT] [--config FILE] …",
  flags: SERVE_FLAGS,
  details:
    "Every flag has an environment variable (LLMGW_ + the flag's name in capitals with _ for -) and a config file key (the flag's name with _ for -). Precedence: flags, environment, config file, defaults.\n\nThe connection caps of both listeners together must fit under the process's open-file limit (a router connection may hold a second descriptor to its engine): when they do not, they are lowered at start in proportion, with a warning, so accept() never runs out of descriptors.",
  examples: ["llmgw serve", "llmgw serve --data-dir /var/lib/llmgw --admin-listen 10.0.0.1:8001", "LLMGW_NODE_TIMEOUT=30s llmgw serve -c /etc/llmgw/serve.toml", "llmgw serve --tls-cert /etc/llmgw/cert.pem --tls-key /etc/llmgw/key.pem"],
  async run({ flags }) {
    const { loadConfig, ServeConfig } = await import("../config");
    const { createLogger } = await import("../log");
    const { startServer } = await import("../app/head");
    // --patroni URL,URL,… as the help says (and as LLMGW_PATRONI takes it), or repeated.
    const patroni = flags["patroni"];
    if (Array.isArray(patroni)) flags = { ...flags, patroni: patroni.flatMap((v) => v.split(",").map((u) => u.trim()).filter(Boolean)) };
    const config = await loadConfig(ServeConfig, { flags, env: process.env });
    const log = createLogger({ level: config.log_level, role: "serve", format: config.log_format });
    const server = await startServer({ config, log });
    // Synchronously after the listener opened: no heartbeat is handled before this.
    process.stderr.write(`llmgw serve: admin API on ${server.adminUrl}, OpenAI API on ${server.routerUrl}/v1 (data dir ${server.dataDir})\n`);
    if (server.exposure.open)
      process.stderr.write(
        `llmgw serve: router: open, no API key required: anyone who reaches ${server.exposure.listen} can use every model (--require-api-key, then \`llmgw keys create NAME\`)\n`,
      );
    if (server.admission.open)
      process.stderr.write(
        `llmgw serve: nodes join without approval: anyone who holds the join token and reaches ${server.admission.listen} is given replicas, prompts and the catalog's env (--approve-nodes, then \`llmgw nodes approve NAME\`)\n`,
      );
    if (server.firstStart) {
      // First start: say how GPU nodes join. `llmgw join-command` prints it again later.
      const { joinAddress, joinInstructions } = await import("./join-command");
      const { readServerInfo } = await import("../config/datadir");
      const { networkInterfaces } = await import("node:os");
      const info = readServerInfo(server.dataDir) ?? { admin_url: server.adminUrl };
      process.stderr.write(`\n${joinInstructions(joinAddress(info, undefined, networkInterfaces()), join(server.dataDir, "join.token"))}\n`);
    }
    if (server.tls)
      process.stderr.write(`llmgw serve: TLS on; agents can pin the certificate with --server-fingerprint ${server.tls.fingerprint256}\n`);
    await new Promise<void>((resolve) => {
      let stopping = false;
      const stop = (sig: string) => {
        // A second signal (a terminal's Ctrl-C reaches both this process and the one that
        // started it) must not cut the graceful stop short.
        if (stopping) return;
        stopping = true;
        log.info({ signal: sig }, "shutting down");
        server.stop().then(resolve, resolve);
      };
      process.on("SIGINT", () => stop("SIGINT"));
      process.on("SIGTERM", () => stop("SIGTERM"));
    });
  },
};
