// What `llmgw install prometheus` and `llmgw install grafana` print: an example Prometheus
// configuration that scrapes every head node's router /metrics with the admin token as a bearer
// token (read from a file, never written into the configuration), and the Grafana dashboard for
// the series the router exports (src/deploy/llmgw-dashboard.json, embedded in the binary).

import { UsageError } from "../config/flags";
import dashboard from "../deploy/llmgw-dashboard.json";

export const PROMETHEUS_DEFAULTS = {
  router: "http://127.0.0.1:8000",
  tokenFile: "/etc/prometheus/llmgw-admin.token",
  interval: "15s",
} as const;

export interface PrometheusOptions {
  /** Each head node's router URL (scheme, host, port). */
  routers: string[];
  tokenFile: string;
  /** A Prometheus duration: 15s, 1m. */
  interval: string;
  /** The CA that signed the routers' certificate (https only). */
  caFile?: string;
}

/** The dashboard's JSON text, as shipped. */
export function grafanaDashboard(): string {
  return `${JSON.stringify(dashboard, null, 2)}\n`;
}

const DURATION = /^[1-9]\d{0,4}(ms|s|m|h)$/;
/** A file path YAML and Prometheus take as it is: absolute, printable, no quote or backslash. */
const PATH = /^\/[^\s"'\\\x00-\x1f\x7f]{0,4095}$/;

function target(text: string): { scheme: "http" | "https"; hostPort: string } {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    throw new UsageError(`--router must be a router URL like ${PROMETHEUS_DEFAULTS.router}, not "${text}"`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new UsageError(`--router must be an http:// or https:// URL, not "${text}"`);
  if (u.pathname !== "/" || u.search || u.hash || u.username || u.password) throw new UsageError(`--router takes the router's address only (scheme, host, port), not "${text}"`);
  const scheme = u.protocol === "https:" ? "https" : "http";
  return { scheme, hostPort: `${u.hostname}:${u.port || (scheme === "https" ? "443" : "80")}` };
}

export function prometheusOptions(flags: Record<string, unknown>): PrometheusOptions {
  const routers = (flags.router as string[] | undefined) ?? [PROMETHEUS_DEFAULTS.router];
  const tokenFile = (flags["token-file"] as string | undefined) ?? PROMETHEUS_DEFAULTS.tokenFile;
  if (!PATH.test(tokenFile)) throw new UsageError(`--token-file must be an absolute path without spaces or quotes, not "${tokenFile}"`);
  const interval = (flags.interval as string | undefined) ?? PROMETHEUS_DEFAULTS.interval;
  if (!DURATION.test(interval)) throw new UsageError(`--interval must be a duration like 15s or 1m, not "${interval}"`);
  const caFile = flags.ca as string | undefined;
  if (caFile !== undefined && !PATH.test(caFile)) throw new UsageError(`--ca must be an absolute path without spaces or quotes, not "${caFile}"`);
  return { routers, tokenFile, interval, ...(caFile !== undefined ? { caFile } : {}) };
}

export function renderPrometheus(o: PrometheusOptions): string {
  const targets = o.routers.map(target);
  const scheme = targets[0]!.scheme;
  if (targets.some((t) => t.scheme !== scheme)) throw new UsageError("--router: every router must use the same scheme (all http:// or all https://)");
  if (o.caFile !== undefined && scheme !== "https") throw new UsageError("--ca is for https:// routers");
  return `# Written by \`llmgw install prometheus\`: Prometheus scraping llmgw.
# Each head node's router serves GET /metrics to the admin token: the fleet (llmgw_nodes,
# llmgw_gpus, llmgw_model_replicas_*, llmgw_model_unplaceable, llmgw_model_parked,
# llmgw_replica_idle_seconds; from the leading control plane only, so sums count each once)
# and that router's own traffic per model (llmgw_model_requests_total,
# llmgw_model_output_tokens_total, llmgw_model_ttft_seconds; sum them over the head nodes).
# The token is read from a file readable by Prometheus alone, e.g.:
#   sudo install -m 0640 -o root -g prometheus /var/lib/llmgw/admin.token ${o.tokenFile}
# Check this file with: promtool check config FILE
global:
  scrape_interval: ${o.interval}
  evaluation_interval: ${o.interval}

scrape_configs:
  - job_name: llmgw
    scheme: ${scheme}
    metrics_path: /metrics
    scrape_interval: ${o.interval}
    authorization:
      type: Bearer
      credentials_file: "${o.tokenFile}"
${o.caFile !== undefined ? `    tls_config:\n      ca_file: "${o.caFile}"\n` : ""}    static_configs:
      - targets:
${targets.map((t) => `          - "${t.hostPort}"`).join("\n")}
`;
}
