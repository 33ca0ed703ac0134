// /metrics of the compiled binary in demo mode: the fleet (nodes, GPUs, replicas, unplaceable,
// parked, known idleness) and per-model traffic (requests, output tokens, TTFT) on the router's
// one scrape target, behind the admin token; `promtool check metrics` accepts it; the Grafana
// dashboard `llmgw install grafana --print` prints asks only for series the binary exports; and
// `llmgw install prometheus --print` gives a configuration `promtool check config` accepts.
// Real processes: polling is the only honest wait.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { run, scratchWithBinary, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";

let dir: string;
let bin: string;
let demo: Bun.Subprocess<"ignore", "pipe", "pipe">;
let routerUrl: string;
let token: string;

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  const routerPort = freePort();
  demo = Bun.spawn([bin, "demo", "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${routerPort}`, "--engine-base-port", String(freePort(900))], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  routerUrl = `http://127.0.0.1:${routerPort}`;
  token = await until("the demo's admin token", () => {
    try {
      return readFileSync(join(dir, "llmgw-data", "admin.token"), "utf8").trim() || undefined;
    } catch {
      return undefined;
    }
  }, 30_000);
}, 60_000);

afterAll(async () => {
  // SIGTERM: the demo stops its agents, which stop their engines.
  demo?.kill("SIGTERM");
  await demo?.exited;
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 60_000);

async function scrape(auth = `Bearer ${token}`): Promise<{ status: number; text: string }> {
  const res = await fetch(`${routerUrl}/metrics`, { headers: { authorization: auth } });
  return { status: res.status, text: await res.text() };
}

/** The value of one sample, by its exact name and labels as exported; undefined when absent. */
function value(text: string, series: string): number | undefined {
  for (const line of text.split("\n")) if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  return undefined;
}

/** Metric families the text declares (# TYPE), with their types. */
function families(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) out.set(m[1]!, m[2]!);
  return out;
}

const M8B = "llama-3.1-8b";

describe("/metrics of llmgw demo", () => {
  test("needs the admin token", async () => {
    await until("the router to listen", async () => (await fetch(`${routerUrl}/healthz`).catch(() => undefined))?.ok, 30_000);
    expect((await scrape("Bearer wrong")).status).toBe(401);
  });

  test("exports the fleet and per-model traffic, with sensible values, and promtool check metrics passes", async () => {
    await until(`a ready replica of ${M8B}`, async () => (value((await scrape()).text, `llmgw_model_replicas_ready{model="${M8B}"}`) ?? 0) >= 1, 60_000);
    const chat = (stream: boolean) =>
      fetch(`${routerUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: M8B, messages: [{ role: "user", content: "hi" }], stream, max_tokens: 7 }) });
    for (const stream of [false, true]) {
      const res = await chat(stream);
      expect(res.status).toBe(200);
      await res.text();
    }
    // The fleet text follows the control loop (a tick a second): the replica just used is known idle.
    const text = await until("a known idle replica of the model just asked for", async () => {
      const t = (await scrape()).text;
      return /^llmgw_replica_idle_seconds\{replica="[^"]+",model="llama-3\.1-8b"\} \d/m.test(t) ? t : undefined;
    }, 30_000);

    const fam = families(text);
    const wanted: [string, string][] = [
      ["llmgw_nodes", "gauge"],
      ["llmgw_gpus", "gauge"],
      ["llmgw_model_replicas_desired", "gauge"],
      ["llmgw_model_replicas_ready", "gauge"],
      ["llmgw_model_unplaceable", "gauge"],
      ["llmgw_model_parked", "gauge"],
      ["llmgw_replica_idle_seconds", "gauge"],
      ["llmgw_model_requests_total", "counter"],
      ["llmgw_model_output_tokens_total", "counter"],
      ["llmgw_model_ttft_seconds", "histogram"],
    ];
    for (const [name, type] of wanted) expect([name, fam.get(name)]).toEqual([name, type]);

    // The demo: four ready nodes; an A100 node with one broken card; deepseek-v3 needs H200s no node has.
    expect(value(text, 'llmgw_nodes{state="ready"}')).toBe(4);
    expect(value(text, 'llmgw_nodes{state="unreachable"}')).toBe(0);
    expect(value(text, 'llmgw_gpus{class="A100-80GB",state="unhealthy"}')).toBe(1);
    expect(value(text, 'llmgw_gpus{class="H100-80GB",state="used"}')! + value(text, 'llmgw_gpus{class="H100-80GB",state="free"}')!).toBe(16);
    expect(value(text, `llmgw_model_replicas_desired{model="${M8B}"}`)).toBe(2);
    expect(value(text, 'llmgw_model_unplaceable{model="deepseek-v3"}')).toBe(1);
    expect(value(text, `llmgw_model_unplaceable{model="${M8B}"}`)).toBe(0);
    expect(value(text, `llmgw_model_parked{model="${M8B}"}`)).toBe(0);
    expect(value(text, "llmgw_control_plane_leading")).toBe(1);
    // The on-demand model nobody asked for has no replica, so no idle line: unknown is not idle.
    expect(text).not.toMatch(/llmgw_replica_idle_seconds\{[^}]*model="qwen2\.5-7b"/);

    // Traffic, per canonical model: two answers, 7 tokens each (usage; counted chunks when streamed).
    expect(value(text, `llmgw_model_requests_total{model="${M8B}",code="200"}`)).toBe(2);
    expect(value(text, `llmgw_model_output_tokens_total{model="${M8B}"}`)).toBe(14);
    expect(value(text, `llmgw_model_ttft_seconds_count{model="${M8B}"}`)).toBe(2);
    expect(value(text, `llmgw_model_ttft_seconds_bucket{model="${M8B}",le="+Inf"}`)).toBe(2);

    const promtool = Bun.spawnSync(["promtool", "check", "metrics"], { stdin: new TextEncoder().encode(text), stdout: "pipe", stderr: "pipe" });
    expect(promtool.stdout.toString() + promtool.stderr.toString()).toBe("");
    expect(promtool.exitCode).toBe(0);
  }, 120_000);

  test("the mistral model that fails every start is exported as parked once it parks", async () => {
    await until("mistral-7b-broken to be parked", async () => value((await scrape()).text, 'llmgw_model_parked{model="mistral-7b-broken"}') === 1, 90_000);
  }, 100_000);

  test("the Grafana dashboard asks only for series the binary exports, and draws what the issue lists", async () => {
    const out = run(bin, ["install", "grafana", "--print"], { cwd: dir });
    expect(out.code).toBe(0);
    const dash = JSON.parse(out.stdout) as { schemaVersion: number; uid: string; title: string; panels: { id: number; type: string; title: string; gridPos: object; targets: { expr: string; refId: string }[] }[]; templating: { list: { name: string }[] } };
    expect(dash.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(dash.uid).toBe("llmgw-fleet");
    expect(new Set(dash.panels.map((p) => p.id)).size).toBe(dash.panels.length);
    expect(dash.templating.list.map((v) => v.name)).toEqual(["datasource", "model"]);
    const fam = families((await scrape()).text);
    const used = new Set<string>();
    for (const p of dash.panels) {
      expect(["timeseries", "stat", "table"]).toContain(p.type);
      expect(p.gridPos).toBeDefined();
      expect(p.targets.length).toBeGreaterThan(0);
      for (const t of p.targets)
        for (const m of t.expr.matchAll(/\bllmgw_[a-z0-9_]+/g)) {
          const name = m[0];
          const base = name.replace(/_(bucket|sum|count)$/, "");
          const exported = fam.has(name) || (base !== name && fam.get(base) === "histogram");
          expect([p.title, name, exported]).toEqual([p.title, name, true]);
          used.add(base);
        }
    }
    for (const name of ["llmgw_nodes", "llmgw_gpus", "llmgw_model_replicas_desired", "llmgw_model_replicas_ready", "llmgw_model_unplaceable", "llmgw_model_parked", "llmgw_model_output_tokens_total", "llmgw_model_ttft_seconds"]) expect(used).toContain(name);
    const exprs = dash.panels.flatMap((p) => p.targets.map((t) => t.expr)).join("\n");
    expect(exprs).toContain("histogram_quantile(0.5, sum by (model, le) (rate(llmgw_model_ttft_seconds_bucket");
    expect(exprs).toContain("histogram_quantile(0.99, ");
    expect(exprs).toContain("rate(llmgw_model_output_tokens_total");
  });

  test("the Prometheus scrape configuration names the router and the token file, and promtool check config accepts it", () => {
    const tokenFile = join(dir, "llmgw-data", "admin.token");
    const out = run(bin, ["install", "prometheus", "--router", routerUrl, "--token-file", tokenFile, "--interval", "30s", "--print"], { cwd: dir });
    expect(out.stderr).toBe("");
    expect(out.code).toBe(0);
    expect(out.stdout).toContain(`credentials_file: "${tokenFile}"`);
    expect(out.stdout).toContain(`- "${routerUrl.slice("http://".length)}"`);
    expect(out.stdout).toContain("scrape_interval: 30s");
    const path = join(dir, "prometheus.yml");
    writeFileSync(path, out.stdout);
    const check = Bun.spawnSync(["promtool", "check", "config", path], { stdout: "pipe", stderr: "pipe" });
    expect(check.stdout.toString() + check.stderr.toString()).toContain("SUCCESS");
    expect(check.exitCode).toBe(0);
    // A flag that would break the file is refused, naming it.
    const bad = run(bin, ["install", "prometheus", "--token-file", 'x" y', "--print"], { cwd: dir });
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("--token-file");
  });
});

describe("Prometheus itself", () => {
  test("scrapes the demo with the printed configuration (bearer token from the file) and has the fleet", async () => {
    const tokenFile = join(dir, "llmgw-data", "admin.token");
    const out = run(bin, ["install", "prometheus", "--router", routerUrl, "--token-file", tokenFile, "--interval", "1s", "--print"], { cwd: dir });
    expect(out.code).toBe(0);
    const conf = join(dir, "prometheus-live.yml");
    writeFileSync(conf, out.stdout);
    const port = freePort();
    const prom = Bun.spawn(["prometheus", `--config.file=${conf}`, `--storage.tsdb.path=${join(dir, "tsdb")}`, `--web.listen-address=127.0.0.1:${port}`], { cwd: dir, stdout: "ignore", stderr: "pipe" });
    try {
      const api = `http://127.0.0.1:${port}/api/v1`;
      const target = await until("Prometheus to scrape the router", async () => {
        const r = await fetch(`${api}/targets`).catch(() => undefined);
        if (!r?.ok) return undefined;
        const t = ((await r.json()) as { data: { activeTargets: { health: string; lastError: string; scrapeUrl: string }[] } }).data.activeTargets[0];
        return t && t.health !== "unknown" ? t : undefined;
      }, 30_000);
      expect([target.health, target.lastError]).toEqual(["up", ""]);
      expect(target.scrapeUrl).toBe(`${routerUrl}/metrics`);
      const q = await (await fetch(`${api}/query?query=${encodeURIComponent('llmgw_nodes{state="ready"}')}`)).json();
      expect((q as { data: { result: { value: [number, string] }[] } }).data.result.map((r) => r.value[1])).toEqual(["4"]);
    } finally {
      prom.kill("SIGTERM");
      await prom.exited;
    }
  }, 60_000);
});
