// config/: what the roles are configured with and how it is read.
//
// This file: the configuration of the long-running roles (serve, agent), one zod schema per role
// with every default in it, filled from four layers in order of precedence: defaults, a config
// file (TOML, YAML or JSON, `--config`), the environment (`LLMGW_*`) and flags. Every problem is
// reported at once, each naming its key and where the bad value came from. `--help` states a
// default through defaultText(), so each default is written once, in its schema.
// Beside it, free of zod so the CLI's quick commands stay quick: flags.ts (the one flag parser,
// for every command and the fake engine), datadir.ts (the data directory, its secrets and
// server.json); and limits.ts (connection caps fitted to the open-file limit).
//
// May import: protocol (shared field types such as Duration), lib, zod and node built-ins.
// Never the roles (control, router, api, agent, sim, store, app) or cli: they import config.

import { z } from "zod";
import { Duration, Name, SegmentName } from "../protocol/common";
import { DEFAULT_DATA_DIR } from "./datadir";
import { type FlagValues, LOG_FORMATS, LOG_LEVELS } from "./flags";

export const HostPort = z.string().transform((v, ctx) => {
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]*):(\d{1,5})$/.exec(v.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) {
    ctx.addIssue({ code: "custom", message: `"${v}" is not host:port (e.g. 0.0.0.0:8001 or 127.0.0.1:0)` });
    return z.NEVER;
  }
  const host = m[1] === "" ? "0.0.0.0" : m[1]!.replace(/^\[|\]$/g, "");
  return { host, port };
});
export type HostPort = z.infer<typeof HostPort>;

const Secret = z.string().min(16, "must be at least 16 characters").max(512).regex(/^[\x21-\x7e]+$/, "must be printable ASCII without spaces");
const LogLevel = z.enum(LOG_LEVELS);
/** auto: text on a terminal, JSON otherwise (src/log.ts). */
const LogFormat = z.enum(LOG_FORMATS, { message: "must be auto, text or json" });

export const ServeConfig = z.strictObject({
  data_dir: z.string().min(1).default(DEFAULT_DATA_DIR),
  /** The router's OpenAI-compatible listener. */
  listen: HostPort.prefault("0.0.0.0:8000"),
  /** Admin API, agent API (and later the dashboard). */
  admin_listen: HostPort.prefault("0.0.0.0:8001"),
  admin_token: Secret.optional(),
  join_token: Secret.optional(),
  node_timeout: Duration.prefault("15s"),
  heartbeat_interval: Duration.prefault("5s"),
  reconcile_interval: Duration.prefault("1s"),
  /**
   * How long an engine has to become healthy when its profile sets no start_timeout. 30 minutes:
   * a 70B model on TP=8 takes ~3.5 min with a warm page cache (vLLM #19824), over 10 min from a
   * cold disk (#10702), and a first torch.compile has taken 37 min (#34399). The server fails a
   * replica only this + 2 heartbeat intervals + 1 min after placement, so the agent, whose clock
   * starts later, always decides first.
   */
  start_timeout: Duration.prefault("30m"),
  /** Consecutive failed starts, or consecutive crashes soon after becoming ready, after which a model is parked. */
  max_failures: z.coerce.number().int().min(1).max(1000).default(5),
  /** First retry delay after a failure; doubles per consecutive failure (or crash), capped at restart_backoff_max. */
  restart_backoff: Duration.prefault("2s"),
  restart_backoff_max: Duration.prefault("5m"),
  /**
   * A replica that crashes within this long of becoming ready counts towards its model's crash
   * loop (parked at max_failures); one that stays ready this long ends it. 10 minutes, as
   * Kubernetes forgets a container's restart backoff.
   */
  crash_window: Duration.refine((ms) => ms >= 1000, "must be at least 1s").prefault("10m"),
  /** How long a node may stay unreachable before its replicas are replaced elsewhere. */
  replace_after: Duration.prefault("30s"),
  /**
   * How long a replica replaced in a rolling restart (a catalog change to how it starts, or
   * `models restart`) may go on finishing its requests in flight after the router stops sending
   * it new ones, before it is stopped anyway.
   */
  drain_timeout: Duration.prefault("30s"),
  /** How long a model's load (target_inflight) must stay low before it scales down by one replica, so replicas do not flap. */
  scale_down_delay: Duration.prefault("1m"),
  /**
   * The Hugging Face Hub (or a mirror or proxy cache of it) that hf:// sources come from. Absent:
   * HF_ENDPOINT as huggingface_hub reads it, else https://huggingface.co (app/hub.ts).
   */
  hf_endpoint: z
    .string()
    .url("must be a URL such as https://huggingface.co")
    .refine((u) => /^https?:\/\//.test(u), "must be an http:// or https:// URL")
    .optional(),
  /** A file holding the Hub token for gated and private repositories; it stays on the head node. */
  hf_token_file: z.string().min(1).optional(),
  /** How long the usage ledger's hourly rows are kept; older ones are deleted by the leader, at most once an hour. */
  usage_retention: Duration.refine((ms) => ms >= 3_600_000, "must be at least 1h").prefault("90d"),
  /**
   * Router: the usage ledger, on or off. Off, streamed requests reach the engine as the client sent
   * them (the router adds no stream_options.include_usage, so takes no usage chunk out) and no
   * rows are counted; token limits still count streamed tokens. Off gives up llmgw usage for the
   * last few µs per streamed request.
   */
  usage_ledger: z
    .union([z.boolean(), z.enum(["on", "off", "true", "false"])], { message: 'must be "on" or "off"' })
    .transform((v) => v === true || v === "on" || v === "true")
    .default(true),
  /** Router: upstream must send its first byte within this. */
  first_byte_timeout: Duration.prefault("5m"),
  /** Router: a stream quiet for this long between chunks is ended with an error event. */
  stream_idle_timeout: Duration.prefault("2m"),
  /** Router: how long a request for a cold on-demand model waits for its replica, at least; a model whose start timeout is longer is waited for that long. */
  cold_start_timeout: Duration.prefault("5m"),
  /**
   * Router: a streamed request held for a cold start gets its headers at once and then an SSE
   * comment line this often (and when its replica's node becomes known), saying what it waits
   * for: clients see progress, and proxies that cut a silent connection (often after 60 s) do not.
   */
  cold_start_progress_interval: Duration.refine((ms) => ms >= 100, "must be at least 100ms").prefault("5s"),
  /** Router: requests held for one cold model at once; past it a request is answered 503 with Retry-After. */
  max_held_per_model: z.coerce.number().int().min(1).max(1_000_000).default(64),
  /** Router: attempts per request (retries only before the first byte). */
  max_attempts: z.coerce.number().int().min(1).max(10).default(3),
  /**
   * Router: largest request body, bytes. 4 MiB holds a chat of about a million tokens of text, or
   * images sent inline as base64 data URLs of about 3 MiB in all (base64 is 4/3 of the bytes).
   */
  max_body_bytes: z.coerce.number().int().min(1024).max(1024 * 1024 * 1024).default(4 * 1024 * 1024),
  /** Router: deepest nesting of arrays and objects in a request body (the body itself is level 1); deeper is refused before parsing. */
  max_json_depth: z.coerce.number().int().min(8).max(10_000).default(64),
  /** Router: JSON values in a request body (array elements and object members, every level); more is refused before parsing. */
  max_json_values: z.coerce.number().int().min(1024).max(100_000_000).default(100_000),
  /**
   * Router: bounded-load factor of prefix affinity. An endpoint takes a request for its prefix
   * while it has fewer than this × the mean in flight; higher keeps conversations on their
   * cache longer, lower spreads load more evenly.
   */
  balance_load_factor: z.coerce.number().min(1).max(10).default(1.25),
  /** Router: a conversation stays on the replica that served it last while that replica has fewer than max(this, balance_load_factor) × its share in flight. */
  balance_sticky_load_factor: z.coerce.number().min(1).max(100).default(2),
  /** Router: slots of the conversation → replica table (fixed memory, two-way set associative). */
  balance_sticky_slots: z.coerce
    .number()
    .int()
    .min(2)
    .max(1 << 24)
    .refine((n) => (n & (n - 1)) === 0, "must be a power of two")
    .default(1 << 16),
  /** Router: virtual nodes per unit of replica weight on the hash ring. */
  balance_vnodes_per_weight: z.coerce.number().int().min(1).max(10_000).default(40),
  /** Router: a replica with this many requests in flight, or this many waiting in its engine, is saturated: passed over while any other is not. */
  balance_saturated_inflight: z.coerce.number().int().min(1).max(1_000_000).default(64),
  balance_saturated_queue: z.coerce.number().int().min(1).max(1_000_000).default(8),
  /** Router: an engine's KV-cache usage (0 to 1) above which its replica is passed over while others are not. */
  balance_kv_high: z.coerce.number().min(0).max(1).default(0.95),
  /** Router: an engine's waiting requests above which the same applies. */
  balance_queue_high: z.coerce.number().int().min(0).max(1_000_000).default(4),
  /** Router: how often each engine's /metrics (its queue and KV cache, for balancing) is read; 0 turns it off. */
  engine_metrics_interval: Duration.prefault("1s"),
  /** Router: require a client API key (`llmgw keys create`) on /v1/*. */
  require_api_key: z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")]).default(false),
  /** Run the router on its own thread (a Worker), apart from the control plane; false runs it in the main thread. */
  router_thread: z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")]).default(true),
  /** Router: how long a replica that failed (connection error, 5xx) is passed over. */
  endpoint_cooldown: Duration.prefault("5s"),
  /** Both listeners: a request head must arrive whole within this of its first byte. */
  head_timeout: Duration.prefault("30s"),
  /** Both listeners: a request body must arrive within this of its head, plus 1 s per body_min_rate bytes received. */
  body_timeout: Duration.prefault("30s"),
  /** Both listeners: bytes per second of body that earn it one more second past body_timeout; 0 makes body_timeout the whole budget. */
  body_min_rate: z.coerce.number().int().min(0).max(1024 * 1024 * 1024).default(8192),
  /**
   * Router listener: open client connections at most, and from one source address (clients
   * behind one proxy or NAT share an address). Past either, a connection is shed with a 503.
   */
  max_connections: z.coerce.number().int().min(1).max(1_000_000).default(8192),
  max_connections_per_address: z.coerce.number().int().min(1).max(1_000_000).default(2048),
  /** Admin/agent listener: the same caps, its own, so a flood on the router never starves heartbeats. */
  admin_max_connections: z.coerce.number().int().min(1).max(1_000_000).default(2048),
  admin_max_connections_per_address: z.coerce.number().int().min(1).max(1_000_000).default(512),
  /**
   * Engines get ports engine_base_port … +engine_port_range-1 on each node address; the
   * engine_port_range after them are rendezvous blocks of 16, one per multi-node replica, never
   * handed to anything else (control/reconcile/ports.ts). Nothing outside the two is handed out.
   */
  engine_base_port: z.coerce.number().int().min(1024).max(65534).default(8100),
  engine_port_range: z.coerce.number().int().min(1).max(32000).default(900),
  /** How long a write waits for a database lock held elsewhere before failing. */
  db_busy_timeout: Duration.prefault("5s"),
  /**
   * PostgreSQL store: how long one call may take, its tries included, before it fails as the
   * store being unavailable (503 to the API). A server or network that goes silent mid-failover
   * sends no error; without a deadline a call (and a `status` behind it) would wait for the socket.
   * 10 s: far above any call's own time, well below the CLI's 30 s.
   */
  db_query_timeout: Duration.refine((ms) => ms >= 100, "must be at least 100ms").prefault("10s"),
  /** A new node waits as pending until `llmgw nodes approve NAME`. */
  approve_nodes: z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")]).default(false),
  /** Nodes accepted in all; a new one beyond is refused. */
  max_nodes: z.coerce.number().int().min(1).max(1_000_000).default(5000),
  /** Agent API requests (heartbeats, assignment polls) per second per node, sustained. */
  heartbeat_rate: z.coerce.number().min(0.01).max(100_000).default(10),
  /** Agent API requests per node allowed at once above heartbeat_rate. */
  heartbeat_burst: z.coerce.number().int().min(1).max(1_000_000).default(100),
  log_level: LogLevel.default("info"),
  log_format: LogFormat.default("auto"),
  /** PEM certificate (chain) both listeners serve HTTPS with; needs tls_key. */
  tls_cert: z.string().min(1).optional(),
  /** PEM private key of tls_cert. */
  tls_key: z.string().min(1).optional(),
  // ---- several control planes on one store (README "High availability")
  /**
   * Where the state lives: a PostgreSQL URL (postgres://user@host1:5432,host2:5432/llmgw?target_session_attrs=primary)
   * shared by several control planes, or a SQLite file path; default SQLite in the data dir.
   */
  store: z.string().min(1).max(4096).optional(),
  /**
   * Several control planes on this store: a leader lease decides which one reconciles. On by
   * itself with a PostgreSQL store; with SQLite only for control planes sharing one file on one machine.
   */
  ha: z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")]).optional(),
  /** This control plane's name among the others; default the hostname. */
  name: SegmentName.optional(),
  /** The admin URL other control planes and status reach this one at; default from admin_listen (the first non-internal address when it listens on all). */
  advertise_url: z.string().url("must be a URL like http://10.0.0.2:8001").optional(),
  /** The leader lease lapses this long after its last renewal. */
  lease_ttl: Duration.prefault("15s"),
  /** How often the leader renews its lease (well within lease_ttl). */
  lease_renew: Duration.prefault("5s"),
  /** The address keepalived keeps on the leader (`llmgw install keepalived`): status says whether it answers as the leader. */
  floating_address: z.string().min(1).max(255).optional(),
  /** Patroni REST API URLs of the store's members (http://db1:8008,…): status shows them. */
  patroni: z.array(z.string().url("must be a URL like http://10.0.0.11:8008")).min(1).max(16).optional(),
}).superRefine((c, ctx) => {
  const last = c.engine_base_port + 2 * c.engine_port_range - 1;
  if (last > 65535)
    ctx.addIssue({
      code: "custom",
      path: ["engine_port_range"],
      message: `engine ports ${c.engine_base_port}…${c.engine_base_port + c.engine_port_range - 1} and their rendezvous ports after them would end at ${last}, past 65535: lower --engine-base-port or --engine-port-range`,
    });
  // Whether the files exist and match is checked when the server starts (startServer).
  if ((c.tls_cert === undefined) !== (c.tls_key === undefined)) {
    const missing = c.tls_cert === undefined ? "tls_cert" : "tls_key";
    ctx.addIssue({ code: "custom", path: [missing], message: "tls_cert and tls_key go together: give both (--tls-cert FILE --tls-key FILE) or neither" });
  }
});
export type ServeConfig = z.infer<typeof ServeConfig>;

/**
 * A SHA-256 certificate fingerprint as `openssl x509 -noout -fingerprint -sha256` prints it
 * (with or without its "sha256 Fingerprint=" prefix and colons), normalised to AA:BB:… form.
 */
export const Sha256Fingerprint = z.string().transform((v, ctx) => {
  const hex = v.trim().replace(/^(sha-?256\s*)?(fingerprint\s*)?[=:]?\s*/i, "").replace(/[:\s]/g, "");
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) {
    ctx.addIssue({ code: "custom", message: `"${v}" is not a SHA-256 fingerprint: 64 hex digits, colons optional (openssl x509 -in CERT -noout -fingerprint -sha256)` });
    return z.NEVER;
  }
  return hex.toUpperCase().match(/../g)!.join(":");
});

const SIZE_UNITS: Record<string, number> = { "": 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12, p: 1e15, ki: 2 ** 10, mi: 2 ** 20, gi: 2 ** 30, ti: 2 ** 40, pi: 2 ** 50 };

/**
 * Bytes as written in a flag: a number, or one with a unit, SI (500G = 500×10⁹, 1.5T) or binary
 * (64Gi = 64×2³⁰), a trailing B allowed (500GB, 64GiB); with `perSecond`, a trailing /s allowed
 * too. Undefined when it is none of these or not a whole positive number of bytes.
 */
export function parseByteSize(v: string, perSecond = false): number | undefined {
  const m = /^(\d+(?:\.\d+)?)\s*([kmgtp]i?)?b?$/i.exec(perSecond ? v.trim().replace(/\/s$/i, "") : v.trim());
  if (!m) return undefined;
  const n = Math.round(Number(m[1]) * SIZE_UNITS[(m[2] ?? "").toLowerCase()]!);
  return n >= 1 && Number.isSafeInteger(n) ? n : undefined;
}

/** A size in bytes (flag, environment or config file: "500G", "1.5T", "64GiB", or a number of bytes). */
function ByteSize(perSecond: boolean) {
  const example = perSecond ? "100M/s or 1G/s" : "500G, 1.5T or 64GiB";
  return z.union([z.string().max(64), z.number()]).transform((v, ctx) => {
    const n = typeof v === "number" ? (Number.isSafeInteger(v) && v >= 1 ? v : undefined) : parseByteSize(v, perSecond);
    if (n === undefined) {
      ctx.addIssue({ code: "custom", message: `"${String(v).slice(0, 40)}" is not a size in bytes (use e.g. ${example}: K M G T are powers of 1000, Ki Mi Gi Ti of 1024)` });
      return z.NEVER;
    }
    return n;
  });
}

export const KeyValue = z.string().regex(/^[A-Za-z0-9_.\/-]{1,63}=[^\n]{0,256}$/, "must be key=value");

/** A PEP 440 version as vLLM and SGLang print it, e.g. 0.10.1.1 or 0.4.3.post4. */
const EngineVersion = z.string().regex(/^\d+(\.\d+)*([._-]?(a|b|rc)\d*)?([._-]?post\d*)?([._-]?dev\d*)?(\+[A-Za-z0-9.]+)?$/i, "must be a version such as 0.10.1.1 or 0.4.3.post4");

/** How many control planes an agent may be given. */
export const MAX_SERVERS = 16;

/**
 * The agent's servers: one head node's admin URL, or the control planes' (or their floating
 * address), as a comma-separated string (flag, environment, config file) or a list (config
 * file). Each is checked on its own and named when wrong; normalised without trailing slashes.
 */
export const ServerList = z.union([z.string(), z.array(z.string())], { message: "must be a URL, a comma-separated list of URLs, or a list of URLs" }).transform((v, ctx) => {
  const items = (Array.isArray(v) ? v : v.split(",")).map((s) => s.trim());
  const many = items.length > 1;
  const out: string[] = [];
  items.forEach((item, i) => {
    const which = many ? ` (URL ${i + 1} of ${items.length})` : "";
    if (item === "") {
      ctx.addIssue({ code: "custom", message: many ? `URL ${i + 1} of ${items.length} is empty: give URLs separated by single commas` : "must be a URL like http://10.0.0.1:8001" });
      return;
    }
    const url = z.string().url().safeParse(item);
    if (!url.success || !/^https?:$/i.test(new URL(item).protocol)) {
      ctx.addIssue({ code: "custom", message: `"${item}"${which} is not a URL like http://10.0.0.1:8001` });
      return;
    }
    const norm = item.replace(/\/+$/, "");
    if (out.some((o) => o.toLowerCase() === norm.toLowerCase())) {
      ctx.addIssue({ code: "custom", message: `"${item}"${which} is given twice` });
      return;
    }
    out.push(norm);
  });
  if (items.length > MAX_SERVERS) ctx.addIssue({ code: "custom", message: `${items.length} servers: at most ${MAX_SERVERS}` });
  const schemes = new Set(out.map((u) => u.slice(0, u.indexOf(":")).toLowerCase()));
  if (schemes.size > 1) ctx.addIssue({ code: "custom", message: "mixes http:// and https:// URLs: every control plane serves the agent API the same way" });
  return out;
});

export const AgentConfig = z.strictObject({
  /**
   * The head node's admin URL, e.g. http://10.0.0.1:8001; with several control planes, each
   * of theirs (the agent fails over between them) or their floating address.
   */
  server: ServerList,
  /**
   * The join token (<data-dir>/join.token on the head node). Needed only until the node has its
   * own credential (kept in <state_dir>/node.credential); token_file reads it from a file instead.
   */
  token: Secret.optional(),
  token_file: z.string().min(1).optional(),
  /** Node name; defaults to the hostname. */
  name: z.string().min(1).max(128).regex(/^[A-Za-z0-9][A-Za-z0-9._:-]*$/, "may contain only letters, digits and . _ : -").optional(),
  /** Address other machines reach this node's engines at; defaults to the first non-internal IPv4. */
  address: z.string().min(1).max(255).optional(),
  /** Host engines bind to. */
  engine_host: z.string().default("0.0.0.0"),
  fabric: z.array(Name).max(16).default([]),
  label: z.array(KeyValue).default([]),
  models_dir: z.string().default("/var/lib/llmgw/models"),
  /**
   * Most bytes of weights llmgw keeps under models_dir (what it fetched; an operator's own
   * files are not counted and never removed); no bound when absent.
   */
  models_max_bytes: ByteSize(false).optional(),
  /** Bytes per second all weight transfers of the node move together, fetches and serves to peers; no bound when absent. */
  weights_max_rate: ByteSize(true)
    .refine((n) => n >= 1_000_000, "must be at least 1M/s: weights are gigabytes")
    .optional(),
  /** Files fetched at once, and files served to peers at once (each its own count). */
  weights_max_transfers: z.coerce.number().int().min(1).max(64).default(4),
  /** Where the head node fetches engine logs from (`llmgw logs`); "off" for none. */
  logs_listen: z.union([z.literal("off").transform(() => undefined), HostPort]).prefault("0.0.0.0:8002"),
  /** Engine logs and replica state files. */
  state_dir: z.string().default("./llmgw-agent"),
  /** Report this simulated inventory instead of asking nvidia-smi, e.g. H100-80GB:8,A100-80GB/3g.40gb:2. */
  simulate: z.string().optional(),
  /** GPU indices of the simulated inventory to report unhealthy. */
  simulate_unhealthy: z.array(z.coerce.number().int().min(0)).default([]),
  /** Models whose weights a simulated node reports as present (no models dir needed). */
  simulate_models: z.array(Name).default([]),
  /** GPU class overrides, "raw name or class=new class". */
  gpu_class: z.array(z.string().regex(/^[^=]+=[^=]+$/, "must be name=class")).default([]),
  nvidia_smi: z.string().default("nvidia-smi"),
  /** The engines' executables (e.g. inside a virtualenv): vLLM's CLI, the Python SGLang is installed in, llama-server. */
  vllm: z.string().min(1).default("vllm"),
  sglang_python: z.string().min(1).default("python3"),
  llama_server: z.string().min(1).default("llama-server"),
  /**
   * The engine's version, stated instead of asked (a node whose version command cannot run,
   * or hangs): launch templates are chosen by it. llama.cpp's is its build, e.g. b6869.
   */
  vllm_version: EngineVersion.optional(),
  sglang_version: EngineVersion.optional(),
  llama_server_version: z.string().regex(/^b?\d+$/, "must be a llama.cpp build number such as b6869").transform((v) => (v.startsWith("b") ? v : `b${v}`)).optional(),
  /** Keep engines running when the agent stops, and re-adopt them when it starts again. */
  keep_replicas: z.boolean().default(false),
  /**
   * Give every engine its replica's key so it answers only the router (on, the default), or
   * start engines without one (off: private networks and benchmarks; the agent warns at start).
   */
  engine_auth: z
    .union([z.boolean(), z.enum(["on", "off", "true", "false"])], { message: 'must be "on" or "off"' })
    .default(true)
    .transform((v) => v === true || v === "on" || v === "true"),
  /** Seconds between an engine's SIGTERM and SIGKILL. */
  stop_grace: Duration.prefault("30s"),
  /** How long an engine has to become healthy. */
  start_timeout: Duration.prefault("10m"),
  health_interval: Duration.prefault("2s"),
  /** How often GPUs and weights are looked at again, so health changes reach the head node. */
  inventory_interval: Duration.refine((ms) => ms >= 100, "must be at least 100ms").prefault("30s"),
  log_level: LogLevel.default("info"),
  log_format: LogFormat.default("auto"),
  /** PEM CA (or the server's own self-signed certificate) to trust for an https server. */
  server_ca: z.string().min(1).optional(),
  /** Pin: the SHA-256 fingerprint the server's certificate must have. */
  server_fingerprint: Sha256Fingerprint.optional(),
}).superRefine((c, ctx) => {
  if (c.server.length === 0 || /^https:/i.test(c.server[0]!)) return;
  for (const key of ["server_ca", "server_fingerprint"] as const)
    if (c[key] !== undefined) ctx.addIssue({ code: "custom", path: [key], message: `only applies to an https:// server, and server is ${c.server.join(",")}` });
});
export type AgentConfig = z.infer<typeof AgentConfig>;

/**
 * A key's default as `--help` states it: a duration or address as the schema writes it ("5m",
 * "0.0.0.0:8000"), a number in digits, a boolean as on/off. Help text reads its defaults from
 * here, so each default is written once, in the schema. Throws for a key without a default (a
 * help string that names one is then wrong).
 */
export function defaultText<S extends z.ZodObject>(schema: S, key: keyof S["shape"] & string): string {
  let f = schema.shape[key] as { def?: { type?: string; defaultValue?: unknown; innerType?: unknown; in?: unknown } } | undefined;
  while (f?.def) {
    const d = f.def;
    if (d.type === "default" || d.type === "prefault") {
      const v = d.defaultValue;
      if (typeof v === "boolean") return v ? "on" : "off";
      if (typeof v === "string" || typeof v === "number") return String(v);
      break;
    }
    f = (d.type === "pipe" ? d.in : d.type === "optional" || d.type === "nullable" ? d.innerType : undefined) as typeof f;
  }
  throw new Error(`config key ${key} has no default to show`);
}

/** Where each key's value came from, for error messages. */
type Origin = Record<string, string>;

export class ConfigError extends Error {
  readonly userFacing = true;
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}

/** Reads a config file by extension: .toml, .yaml/.yml or .json. */
export async function readConfigFile(path: string): Promise<Record<string, unknown>> {
  const file = Bun.file(path);
  if (!(await file.exists())) {
    const { existsSync } = await import("node:fs");
    throw new ConfigError([`config file ${path}: ${existsSync(path) ? "is a directory, not a file" : "not found"}`]);
  }
  const text = await file.text();
  let data: unknown;
  try {
    if (/\.toml$/i.test(path)) data = Bun.TOML.parse(text);
    else if (/\.ya?ml$/i.test(path)) data = Bun.YAML.parse(text);
    else if (/\.json$/i.test(path)) data = JSON.parse(text);
    else throw new Error("unknown extension: use .toml, .yaml, .yml or .json");
  } catch (e) {
    throw new ConfigError([`config file ${path}: ${(e as Error).message}`]);
  }
  if (data === null || data === undefined) return {};
  if (typeof data !== "object" || Array.isArray(data)) throw new ConfigError([`config file ${path}: must be a table/mapping of keys`]);
  return data as Record<string, unknown>;
}

export interface LoadInput {
  flags: FlagValues;
  env: Record<string, string | undefined>;
  /** Path from --config or LLMGW_CONFIG. */
  configPath?: string;
}

const envName = (key: string) => `LLMGW_${key.toUpperCase()}`;
const flagName = (key: string) => `--${key.replace(/_/g, "-")}`;

/** Builds a role's configuration from its layers; throws ConfigError listing every problem. */
export async function loadConfig<S extends z.ZodObject>(schema: S, input: LoadInput): Promise<z.infer<S>> {
  const keys = Object.keys(schema.shape);
  // No prototype: a "__proto__" key in a config file must be an unknown key, not a prototype.
  const raw: Record<string, unknown> = Object.create(null);
  const origin: Origin = Object.create(null);
  const configPath = (input.flags["config"] as string | undefined) ?? input.configPath ?? input.env["LLMGW_CONFIG"];
  if (configPath) {
    const fileData = await readConfigFile(configPath);
    for (const [k, v] of Object.entries(fileData)) {
      const key = k.replace(/-/g, "_");
      raw[key] = v;
      origin[key] = `config file ${configPath}`;
    }
  }
  for (const key of keys) {
    const v = input.env[envName(key)];
    if (v !== undefined && v !== "") {
      raw[key] = listFromEnv(schema.shape[key], v);
      origin[key] = `environment ${envName(key)}`;
    }
  }
  for (const [name, v] of Object.entries(input.flags)) {
    if (name === "config") continue;
    const key = name.replace(/-/g, "_");
    if (!keys.includes(key)) continue;
    raw[key] = v;
    origin[key] = `flag ${flagName(key)}`;
  }
  const result = schema.safeParse(raw);
  if (result.success) return result.data as z.infer<S>;
  const problems = result.error.issues.map((iss) => {
    if (iss.code === "unrecognized_keys") {
      return iss.keys.map((k) => `${k}${origin[k] ? ` (from ${origin[k]})` : ""}: unknown key`).join("; ");
    }
    const key = iss.path.map(String).join(".") || "(top level)";
    const top = String(iss.path[0] ?? "");
    if ((iss.code === "invalid_type" || iss.code === "invalid_union") && raw[top] === undefined && iss.path.length === 1)
      return `${key}: required (give ${flagName(top)}, ${envName(top)} or "${top}" in a config file)`;
    return `${key}${origin[top] ? ` (from ${origin[top]})` : ""}: ${iss.message}`;
  });
  throw new ConfigError(problems);
}

/** Environment variables are strings; list-valued keys take comma-separated values there. */
function listFromEnv(field: unknown, v: string): unknown {
  let f = field as { def?: { type?: string; innerType?: unknown } } | undefined;
  while (f?.def && (f.def.type === "default" || f.def.type === "optional")) f = f.def.innerType as typeof f;
  if (f?.def?.type === "array") return v.split(",").map((s) => s.trim()).filter(Boolean);
  if (f?.def?.type === "boolean") return v === "true" || v === "1" ? true : v === "false" || v === "0" ? false : v;
  if (f?.def?.type === "number") return Number.isNaN(Number(v)) ? v : Number(v);
  return v;
}
