// The router alone in its own process, for the network benches: a Router on 127.0.0.1 with a
// static endpoint list and a catalog of the models they serve, nothing else of `llmgw serve`
// (no store, no control plane), so a bench measures the proxy path and nothing beside it.
// Prints its URL and runs until SIGTERM/SIGINT.
//   LLMGW_BENCH_ENDPOINTS='[{"id":"e0","url":"http://127.0.0.1:9000"}]' \
//     bun test/bench/lib/router-main.ts --port 0 --model m [--metrics-ms 1000] [--gc-ms N]
// Endpoints may also be given as --endpoints JSON; each needs id and url, the rest defaults.
// --api-key SECRET requires client keys and gives the router that one (and 1,000 others);
// --limits gives it and its team rate and concurrency limits too high ever to refuse
// (test/bench/admission.ts measures what admission costs).
// --tenants SECRET_A,SECRET_B requires client keys and gives the router two teams (one
// interactive, one batch) with a key each, their rpm, tpm and max-concurrent limits and their
// teams' too high ever to refuse, and 1,000 other keys; --max-inflight N bounds every replica (the
// slot gate and its fair queue); --usage-ledger off turns the usage ledger off
// (test/bench/limits.ts measures everything on against everything off).
// --gc-ms forces a full collection every N ms: a diagnostic, to tell garbage from live memory.
// LLMGW_HTTP_SERVER=bun runs the router's listener on Bun.serve instead of its own server
// (src/http/bun-serve.ts): test/bench/proxy.ts measures both.
// The router's settings are the config schema's defaults (test/helpers/router-settings.ts).
// routerProc() reads them in the bench's own process and passes them in
// LLMGW_BENCH_ROUTER_SETTINGS, so this process loads the router and nothing else: reading them
// here would load the whole app (src/app/head.ts: store, control plane, API; 345 modules,
// some 25 MB more resident), and a bench of the proxy path would carry its garbage collection
// and page faults. Without the variable (a bench starting this file by hand) they are read here.

import type { RouterSettings as Settings } from "../../../src/app/router-settings";
import { sha256hex } from "../../../src/lib/digest";
import { Router } from "../../../src/router/router";
import type { EndpointInfo } from "../../../src/protocol/routing";

const given = process.env.LLMGW_BENCH_ROUTER_SETTINGS;
const settings: Settings = given ? (JSON.parse(given) as Settings) : (await import("../../helpers/router-settings")).ROUTER_DEFAULTS;

const args = process.argv.slice(2);
// The last occurrence wins, so a caller can append flags to override earlier ones.
const flag = (name: string): string | undefined => {
  const i = args.lastIndexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const model = flag("--model") ?? "m";
const port = Number(flag("--port") ?? 0);
const metricsIntervalMs = Number(flag("--metrics-ms") ?? 1000);
const raw = flag("--endpoints") ?? process.env.LLMGW_BENCH_ENDPOINTS;
if (!raw) {
  console.error("router-main: give the endpoints as --endpoints JSON or LLMGW_BENCH_ENDPOINTS");
  process.exit(2);
}
const endpoints: EndpointInfo[] = (JSON.parse(raw) as Partial<EndpointInfo>[]).map((e, i) => ({
  id: e.id ?? `e${i}`,
  url: e.url!.replace(/\/+$/, ""),
  models: e.models ?? [model],
  engine: e.engine ?? "vllm",
  pool: e.pool ?? "default",
  weight: e.weight ?? 1,
  priority: e.priority ?? 0,
  // The replica's engine key, which the router presents to the engine.
  ...(e.key !== undefined ? { key: e.key } : {}),
  ...(flag("--max-inflight") !== undefined ? { max_inflight: Number(flag("--max-inflight")) } : {}),
}));

const apiKey = flag("--api-key");
const tenants = flag("--tenants")?.split(",");
const router = new Router({
  ...settings,
  host: "127.0.0.1",
  port,
  metricsIntervalMs,
  ...(apiKey !== undefined || tenants !== undefined ? { requireApiKey: true } : {}),
  ...(flag("--usage-ledger") === "off" ? { usageLedger: false } : {}),
});
if (tenants !== undefined) {
  const high = { rpm: 1e9, tpm: 1e12, maxConcurrent: 1e6 };
  const teams = ["web", "nightly"] as const;
  const keys = tenants.map((secret, i) => ({ name: `bench-${i}`, sha256: sha256hex(secret), pool: null, team: teams[i % 2], tier: i % 2 === 0 ? ("interactive" as const) : ("batch" as const), limits: high, teamLimits: high }));
  const others = Array.from({ length: 1000 }, (_, i) => ({ name: `other-${i}`, sha256: sha256hex(`other-${i}`), pool: null, team: teams[i % 2], limits: high, teamLimits: high }));
  router.setApiKeys([...keys, ...others]);
} else if (apiKey !== undefined) {
  const high = { rpm: 1e9, tpm: 1e12, maxConcurrent: 1e6 };
  const limits = args.includes("--limits") ? { team: "bench", limits: high, teamLimits: high } : {};
  const others = Array.from({ length: 1000 }, (_, i) => ({ name: `other-${i}`, sha256: sha256hex(`other-${i}`), pool: null, ...limits }));
  router.setApiKeys([{ name: "bench", sha256: sha256hex(apiKey), pool: null, ...limits }, ...others]);
}
// Every model an endpoint serves is in the catalog, --model's first.
const models = [...new Set([model, ...endpoints.flatMap((e) => e.models)])];
router.setCatalog(models.map((name) => ({ name, aliases: [], on_demand: false, pool: "default", created: 0 })));
router.setEndpoints(endpoints);
const { url } = router.start();
console.log(`router listening on ${url} (${endpoints.length} endpoints)`);

const gcMs = Number(flag("--gc-ms") ?? 0);
if (gcMs > 0) setInterval(() => Bun.gc(true), gcMs);

const stop = () => {
  // What the usage ledger counted, for a bench to check it was on (and counted every request).
  const rows = router.takeLedger();
  const sum = (f: (r: (typeof rows)[number]) => number) => rows.reduce((a, r) => a + f(r), 0);
  console.log(`ledger: ${sum((r) => r.requests)} requests, ${sum((r) => r.prompt_tokens)} prompt tokens, ${sum((r) => r.completion_tokens)} completion tokens, ${sum((r) => r.errors)} errors`);
  router.stop().finally(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
