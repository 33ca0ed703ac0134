// `llmgw healthz [--leader]`: asks one control plane's open `GET /healthz` whether it is up (and,
// with --leader, whether it leads) and answers in its exit code, 0 or 1, with one line. It is
// keepalived's check (`llmgw install keepalived`), run every second or so, so it stays quick:
// no zod, no token, a short timeout.

import { DEFAULT_DATA_DIR } from "../config/datadir";
import { type FlagSpecs, UsageError } from "../config/flags";
import { exactDuration } from "../lib/format";
import { safeText } from "../lib/text";
import { parseDuration } from "../protocol/duration";
import type { Health } from "../protocol/views";
import { certificateProblem, outputFlag, outputFormat, resolveServer } from "./client";
import type { Command } from "./command";

const DEFAULT_TIMEOUT = "2s";

const FLAGS: FlagSpecs = {
  leader: { kind: "boolean", help: "healthy only when this control plane leads (keepalived's check for the floating address)" },
  server: { kind: "string", value: "URL", help: "admin API URL (env LLMGW_SERVER; default: the server recorded in the data dir)" },
  ca: { kind: "string", value: "FILE", help: "PEM CA to trust for an https server (env LLMGW_CA)" },
  "data-dir": { kind: "string", value: "DIR", help: `data dir of a local server (env LLMGW_DATA_DIR; default ${DEFAULT_DATA_DIR})` },
  timeout: { kind: "string", value: "DURATION", help: `give up on the server after this long (default ${DEFAULT_TIMEOUT})` },
  ...outputFlag(["table", "json"]),
  help: { kind: "boolean", short: "h", help: "show this help" },
};

export interface HealthResult {
  server: string;
  healthy: boolean;
  /** What the server answered, when it answered as an llmgw control plane. */
  health?: Health;
  http_status?: number;
  error?: string;
}

/** The answer's fields this check relies on, read without zod (this command must start quickly). */
function asHealth(data: unknown): Health | undefined {
  if (typeof data !== "object" || data === null) return undefined;
  const d = data as Record<string, unknown>;
  if ((d.status !== "ok" && d.status !== "standing by") || typeof d.leading !== "boolean" || typeof d.version !== "string") return undefined;
  const epoch = typeof d.epoch === "number" && Number.isInteger(d.epoch) && d.epoch >= 0 ? d.epoch : 0;
  return { status: d.status, leading: d.leading, version: d.version, epoch, ...(typeof d.name === "string" ? { name: d.name } : {}) };
}

export async function checkHealth(opts: { server: string; leader: boolean; timeoutMs: number; tls?: BunFetchRequestInitTLS; caPath?: string }): Promise<HealthResult> {
  const { server } = opts;
  let res: Response;
  try {
    res = await fetch(`${server}/healthz${opts.leader ? "?leader=1" : ""}`, { signal: AbortSignal.timeout(opts.timeoutMs), ...(opts.tls ? { tls: opts.tls } : {}) });
  } catch (e) {
    const err = e as Error & { code?: string };
    const why =
      err.name === "TimeoutError"
        ? `no answer within ${exactDuration(opts.timeoutMs)}`
        : err.code === "ConnectionRefused" || err.code === "ECONNREFUSED"
          ? "connection refused"
          : certificateProblem(err, server, opts.caPath) ?? err.message;
    return { server, healthy: false, error: why };
  }
  let data: unknown;
  try {
    data = JSON.parse(await res.text());
  } catch {
    data = undefined;
  }
  const health = asHealth(data);
  if (!health) return { server, healthy: false, http_status: res.status, error: `answered ${res.status} with something that is not an llmgw health answer (is it an llmgw admin API?)` };
  const healthy = opts.leader ? res.status === 200 && health.leading : res.status === 200;
  return { server, healthy, health, http_status: res.status };
}

export function healthLine(r: HealthResult, leader: boolean): string {
  if (!r.health) return `not answering: ${r.server}: ${r.error ?? "no answer"}`;
  const h = r.health;
  const who = `${r.server}${h.name ? ` (${h.name})` : ""}`;
  const facts = `llmgw ${h.version}${h.leading ? `, epoch ${h.epoch}` : ""}`;
  if (r.healthy) return `${h.leading ? "leading" : "ok"}: ${who}${h.leading ? " leads" : " answers"}, ${facts}`;
  if (leader && !h.leading) return `standing by: ${who} does not lead, ${facts}`;
  return `unhealthy: ${who} answered ${r.http_status}, ${facts}`;
}

export const command: Command = {
  name: "healthz",
  summary: "Check that a control plane answers (and with --leader that it leads); exit 0 or 1.",
  usage: "llmgw healthz [--leader] [--server URL] [--timeout DURATION] [-o json]",
  flags: FLAGS,
  details:
    "Asks the admin listener's open GET /healthz (no token). Exit 0 when it answers healthy, and with --leader only when it leads; 1 otherwise (not answering, standing by); 2 for a usage error. keepalived runs `llmgw healthz --leader` to keep the floating address on the leader (`llmgw install keepalived`).",
  examples: ["llmgw healthz", "llmgw healthz --leader --server http://127.0.0.1:8001", "llmgw healthz -o json"],
  async run({ flags, positionals }) {
    if (positionals.length > 0) throw new UsageError(`healthz takes no arguments, not "${positionals[0]}"`);
    const format = outputFormat(flags, ["table", "json"]);
    const timeoutText = (flags.timeout as string | undefined) ?? DEFAULT_TIMEOUT;
    const timeoutMs = parseDuration(timeoutText);
    if (timeoutMs === undefined || timeoutMs <= 0 || timeoutMs > 600_000) throw new UsageError(`--timeout must be a duration between 1ms and 10m like 2s or 500ms, not "${timeoutText}"`);
    const leader = flags.leader === true;
    const target = resolveServer(flags);
    const r = await checkHealth({ server: target.server, leader, timeoutMs, ...(target.tls ? { tls: target.tls } : {}), ...(target.caPath ? { caPath: target.caPath } : {}) });
    const out = format === "json" ? JSON.stringify(r) : safeText(healthLine(r, leader));
    (r.healthy || format === "json" ? process.stdout : process.stderr).write(`${out}\n`);
    return r.healthy ? 0 : 1;
  },
};
