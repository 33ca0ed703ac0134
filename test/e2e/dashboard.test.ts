// The dashboard at /ui end to end: the compiled binary in demo mode and a headless Chromium
// (playwright-core, Debian's chromium, which test/setup.ts installs). Login by form only (an
// old ?token= link signs no one in), the cookie's attributes, who is refused, logging out by POST, the numbers on the page against
// `llmgw status -o json` (read from data-testid attributes, not prose), the page updating
// itself after a cordon and a catalog change, escaping of user input, the security headers,
// and a clean console: no errors, no failed requests, nothing fetched from anywhere but
// 127.0.0.1.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, type Page, chromium } from "playwright-core";
import type { Summary } from "../../src/protocol/views";
import { demoCatalog } from "../../src/sim/demo";
import { run, scratchWithBinary, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

/** Debian's chromium, found on PATH as test/setup.ts (run first by `npm test`) finds it. */
const CHROMIUM = Bun.which("chromium") ?? "/usr/bin/chromium";
const OUT = join(import.meta.dir, "out");

let dir: string;
let bin: string;
let demo: Bun.Subprocess;
let adminUrl: string;
let routerUrl: string;
/** Screenshots of each page at 1400 and at 420 px (kept when LLMGW_KEEP_SCREENSHOTS is set, for a person to look at). */
let shots: string;
let adminToken: string;
let joinToken: string;
let clientKey: string;
let browser: Browser;
/** The signed-in context and page the later tests share. */
let ctx: BrowserContext;
let page: Page;

const problems: string[] = [];
/** The page's global object inside page.evaluate (this project's types carry no DOM lib). */
type Win = { __marker?: number; __xss?: number; document: { cookie: string }; history: { length: number } };
const requested: string[] = [];


const cli = (...args: string[]) => {
  const r = run(bin, args, { cwd: dir });
  if (r.code !== 0) throw new Error(`llmgw ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
};
const status = () => JSON.parse(cli("status", "-o", "json")) as Summary;

/** Contexts being closed by the test: requests it cuts off then are not the page's fault. */
const closing = new WeakSet<BrowserContext>();
async function close(c: BrowserContext): Promise<void> {
  closing.add(c);
  await c.close();
}

/** Every page of a context reports its console errors, page errors, failed and off-host requests here. */
function watch(c: BrowserContext, label: string, opts: { allow401?: boolean } = {}): void {
  c.on("request", (r) => {
    requested.push(r.url());
    const u = new URL(r.url());
    if (u.protocol !== "about:" && u.hostname !== "127.0.0.1") problems.push(`${label}: request left 127.0.0.1: ${r.url()}`);
  });
  c.on("requestfailed", (r) => {
    // The page's own refresh or its icon, cancelled by the browser because the test navigated
    // (a link, a form) while it was in flight, or a navigation superseded by the next one (the
    // page's own refresh, a redirect the test did not wait for): ERR_ABORTED is the client giving
    // up, never an answer the server broke.
    if (r.failure()?.errorText === "net::ERR_ABORTED" && (r.isNavigationRequest() || r.url().endsWith("/ui/fragment") || r.url().endsWith("/ui/icon.svg"))) return;
    if (!closing.has(c)) problems.push(`${label}: request failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  c.on("page", (p) => {
    p.on("pageerror", (e) => problems.push(`${label}: page error: ${e.message}`));
    p.on("console", (m) => {
      if (m.type() !== "error" && m.type() !== "warning") return;
      // The login form is served with 401 on purpose; Chromium notes that status in the console.
      if (opts.allow401 && /status of 401/.test(m.text())) return;
      problems.push(`${label}: console ${m.type()}: ${m.text()}`);
    });
  });
}

async function newContext(label: string, opts: { allow401?: boolean } = {}): Promise<BrowserContext> {
  const c = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  watch(c, label, opts);
  return c;
}

/** What the tests compare: the summary's numbers and names, in a fixed order. */
interface Numbers {
  nodes: Summary["nodes"];
  gpus: { class: string; total: number; used: number; unhealthy: number }[];
  fabrics: { fabric: string; nodes: number; largest_free_block: number }[];
  replicas: Summary["replicas"];
  models: Summary["models"];
  unplaceable: string[];
  parked: string[];
}

function fromSummary(s: Summary): Numbers {
  return {
    nodes: s.nodes,
    gpus: s.gpus.map((g) => ({ class: g.class, total: g.total, used: g.used, unhealthy: g.unhealthy })).sort((a, b) => a.class.localeCompare(b.class)),
    fabrics: s.fabrics.map((f) => ({ fabric: f.fabric, nodes: f.nodes, largest_free_block: f.largest_free_block })).sort((a, b) => a.fabric.localeCompare(b.fabric)),
    replicas: s.replicas,
    models: s.models,
    unplaceable: [...s.unplaceable].sort(),
    parked: s.parked.map((p) => p.model).sort(),
  };
}

async function fromPage(p: Page): Promise<Numbers> {
  const num = async (id: string) => Number(await p.locator(`[data-testid="${id}"]`).textContent());
  const field = async (row: ReturnType<Page["locator"]>, name: string) => Number(await row.locator(`[data-field="${name}"]`).textContent());
  const gpus: Numbers["gpus"] = [];
  for (const row of await p.locator('[data-testid="gpu-class"]').all())
    gpus.push({ class: (await row.getAttribute("data-class"))!, total: await field(row, "total"), used: await field(row, "used"), unhealthy: await field(row, "unhealthy") });
  const fabrics: Numbers["fabrics"] = [];
  for (const row of await p.locator('[data-testid="fabric"]').all())
    fabrics.push({ fabric: (await row.getAttribute("data-fabric"))!, nodes: await field(row, "nodes"), largest_free_block: await field(row, "largest_free_block") });
  const names = async (id: string) => (await p.locator(`[data-testid="${id}"]`).evaluateAll((els) => els.map((e) => e.getAttribute("data-model")!))).sort();
  return {
    nodes: { total: await num("nodes-total"), ready: await num("nodes-ready"), cordoned: await num("nodes-cordoned"), draining: await num("nodes-draining"), unreachable: await num("nodes-unreachable") },
    gpus: gpus.sort((a, b) => a.class.localeCompare(b.class)),
    fabrics: fabrics.sort((a, b) => a.fabric.localeCompare(b.fabric)),
    replicas: { ready: await num("replicas-ready"), starting: await num("replicas-starting"), draining: await num("replicas-draining"), failed: await num("replicas-failed") },
    models: { total: await num("models-total"), satisfied: await num("models-satisfied"), short: await num("models-short") },
    unplaceable: await names("unplaceable"),
    parked: await names("parked"),
  };
}

/**
 * The demo keeps moving (replicas start, a broken model fails until parked), so compare at a
 * moment the CLI sees the same numbers before and after reading the page.
 */
async function pageMatchesStatus(p: Page, timeoutMs = 20_000): Promise<Numbers> {
  let last = "";
  return until(
    "the page to show the numbers of `llmgw status -o json`",
    async () => {
      const before = fromSummary(status());
      const shown = await fromPage(p);
      const after = fromSummary(status());
      last = `status ${JSON.stringify(after)}\npage   ${JSON.stringify(shown)}`;
      return Bun.deepEquals(before, after) && Bun.deepEquals(shown, after) ? after : undefined;
    },
    timeoutMs,
  ).catch((e) => {
    throw new Error(`${(e as Error).message}\n${last}`);
  });
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run \`bun test/setup.ts\` (npm test does), or apt-get install -y --no-install-recommends chromium`);
  ({ dir, bin } = scratchWithBinary());
  const base = freePort(900);
  demo = Bun.spawn([bin, "demo", "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${freePort()}`, "--engine-base-port", String(base)], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const dataDir = join(dir, "llmgw-data");
  const info = await until("the demo's server.json", () => {
    try {
      return JSON.parse(readFileSync(join(dataDir, "server.json"), "utf8")) as { admin_url: string; router_url: string };
    } catch {
      return undefined;
    }
  });
  adminUrl = info.admin_url;
  routerUrl = info.router_url;
  adminToken = readFileSync(join(dataDir, "admin.token"), "utf8").trim();
  joinToken = readFileSync(join(dataDir, "join.token"), "utf8").trim();
  let seen: Summary | undefined;
  await until("four nodes and three ready replicas", () => {
    seen = status();
    return seen.nodes.ready === 4 && seen.replicas.ready >= 3;
  }, 30_000).catch(async (e) => {
    demo.kill("SIGTERM");
    throw new Error(`${(e as Error).message}: last status ${JSON.stringify(seen)}\ndemo stderr: ${(await new Response(demo.stderr as ReadableStream).text()).slice(-2000)}`);
  });
  clientKey = cli("keys", "create", "dashboard-test").trim();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic"],
  });
  mkdirSync(OUT, { recursive: true });
  shots = scratchDir("llmgw-dashboard-shots-");
}, 60_000);

afterAll(async () => {
  await browser?.close();
  demo?.kill("SIGTERM");
  await demo?.exited;
  if (process.env.LLMGW_KEEP_SCREENSHOTS) console.log(`screenshots kept in ${shots}`);
  else if (shots) rmSync(shots, { recursive: true, force: true });
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("the dashboard at /ui", () => {
  test("without a session, /ui is the login form with no fleet data, and strict security headers", async () => {
    const c = await newContext("anonymous", { allow401: true });
    const p = await c.newPage();
    const res = await p.goto(`${adminUrl}/ui`);
    expect(res!.status()).toBe(401);
    await p.locator('[data-testid="login-form"]').waitFor();
    expect(await p.locator('[data-testid="summary"]').count()).toBe(0);
    const html = await res!.text();
    for (const leak of ["h100-1", "llama-3.1-8b", "H100-80GB", "ib-a", adminToken]) expect(html).not.toContain(leak);

    const h = res!.headers();
    const nonce = /script-src 'nonce-([^']+)'/.exec(h["content-security-policy"] ?? "")?.[1];
    expect(nonce).toBeDefined();
    expect(h["content-security-policy"]).toContain(`style-src 'nonce-${nonce}'`);
    expect(h["content-security-policy"]).toContain("default-src 'self'");
    expect(h["content-security-policy"]).toContain("frame-ancestors 'none'");
    expect(h["content-security-policy"]).not.toContain("unsafe-inline");
    expect(h["x-content-type-options"]).toBe("nosniff");
    expect(h["referrer-policy"]).toBe("no-referrer");
    expect(h["cache-control"]).toBe("no-store");
    // A fresh nonce per response.
    const again = await fetch(`${adminUrl}/ui`);
    expect(again.headers.get("content-security-policy")).not.toContain(nonce!);
    await close(c);
  });

  test("the join token, a client API key, a wrong token and a forged cookie are all refused", async () => {
    for (const token of [joinToken, clientKey, "wrong-token", `${adminToken}x`]) {
      for (const path of ["/ui", "/ui/fragment"]) {
        const res = await fetch(`${adminUrl}${path}`, { headers: { authorization: `Bearer ${token}` } });
        expect({ path, status: res.status }).toEqual({ path, status: 401 });
        const body = await res.text();
        expect(body).not.toContain("h100-1");
        expect(body).not.toContain(token);
      }
      const login = await fetch(`${adminUrl}/ui/login`, { method: "POST", body: new URLSearchParams({ token }), redirect: "manual" });
      expect(login.status).toBe(401);
      expect(login.headers.get("set-cookie")).toBeNull();
      const link = await fetch(`${adminUrl}/ui?token=${encodeURIComponent(token)}`, { redirect: "manual" });
      expect(link.status).toBe(401);
      expect(link.headers.get("set-cookie")).toBeNull();
    }
    for (const cookie of ["llmgw_ui=" + adminToken, "llmgw_ui=", "llmgw_ui=AAAA"]) {
      const res = await fetch(`${adminUrl}/ui/fragment`, { headers: { cookie } });
      expect(res.status).toBe(401);
    }
    // Scripts may use the admin token as a bearer token.
    const ok = await fetch(`${adminUrl}/ui/fragment`, { headers: { authorization: `Bearer ${adminToken}` } });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain('data-node="h100-1"');
  });

  test("a wrong token fails in the form; the admin token signs in with an HttpOnly, SameSite=Strict cookie that is not the token", async () => {
    ctx = await newContext("signed-in", { allow401: true });
    page = await ctx.newPage();
    await page.goto(`${adminUrl}/ui`);
    await page.locator("#token").fill("not-the-admin-token");
    await Promise.all([page.waitForURL(`${adminUrl}/ui/login`), page.locator('button[type="submit"]').click()]);
    await page.locator('[data-testid="login-error"]').waitFor();
    expect(await page.locator('[data-testid="summary"]').count()).toBe(0);
    expect(await ctx.cookies()).toEqual([]);

    await page.locator("#token").fill(adminToken);
    const [res] = await Promise.all([page.waitForResponse((r) => r.url() === `${adminUrl}/ui`), page.locator('button[type="submit"]').click()]);
    expect(res.status()).toBe(200);
    await page.locator('[data-testid="summary"]').waitFor();
    expect(page.url()).toBe(`${adminUrl}/ui`);
    const cookies = await ctx.cookies();
    expect(cookies.length).toBe(1);
    const [cookie] = cookies;
    expect(cookie!.httpOnly).toBe(true);
    expect(cookie!.sameSite).toBe("Strict");
    expect(cookie!.path).toBe("/ui");
    expect(cookie!.value).not.toContain(adminToken);
    expect(cookie!.value.length).toBeGreaterThan(30);
    // Not readable by page script.
    expect(await page.evaluate(() => (globalThis as unknown as Win).document.cookie)).toBe("");
  });

  test("the numbers on the page equal `llmgw status -o json`", async () => {
    const n = await pageMatchesStatus(page);
    // The demo's shape, so the comparison is not vacuous.
    expect(n.nodes.total).toBe(4);
    expect(n.gpus.map((g) => g.class)).toEqual(["A100-80GB", "A100-80GB/3g.40gb", "H100-80GB", "L40S"]);
    expect(n.gpus.find((g) => g.class === "A100-80GB")!.unhealthy).toBe(1);
    expect(n.fabrics.map((f) => f.fabric)).toEqual(["ib-a", "ib-b"]);
    expect(n.unplaceable).toContain("deepseek-v3");
    expect(await page.locator('[data-testid="version"]').textContent()).toBe(status().version);
    // The tables are there too, and the events newest first.
    expect(await page.locator('[data-testid="node-row"]').count()).toBe(4);
    expect(await page.locator('[data-testid="model-row"]').count()).toBe(demoCatalog().length);
    expect(await page.locator('[data-testid="replica-row"]').count()).toBeGreaterThanOrEqual(3);
    const ids = await page.locator('[data-testid="event"]').evaluateAll((els) => els.map((e) => Number(e.getAttribute("data-id"))));
    expect(ids.length).toBeGreaterThan(5);
    expect(ids.length).toBeLessThanOrEqual(50);
    expect(ids).toEqual([...ids].sort((a, b) => b - a));
  }, 30_000);

  test("after a cordon the page updates by itself, without a reload", async () => {
    await page.evaluate(() => ((globalThis as unknown as Win).__marker = 42));
    const loads: string[] = [];
    const onLoad = () => loads.push("load");
    page.on("load", onLoad);
    cli("cordon", "h100-2");
    const t = performance.now();
    await page.locator('[data-testid="node-row"][data-node="h100-2"] [data-field="state"]', { hasText: "cordoned" }).waitFor({ timeout: 6_000 });
    expect(performance.now() - t).toBeLessThan(6_000);
    expect(await page.locator('[data-testid="nodes-cordoned"]').textContent()).toBe("1");
    expect(await page.evaluate(() => (globalThis as unknown as Win).__marker)).toBe(42);
    expect(loads).toEqual([]);
    const n = await pageMatchesStatus(page);
    expect(n.nodes.cordoned).toBe(1);
    cli("uncordon", "h100-2");
    await page.locator('[data-testid="nodes-cordoned"]', { hasText: /^0$/ }).waitFor({ timeout: 6_000 });
    page.off("load", onLoad);
  }, 30_000);

  test("a model applied shows up by itself; its user-supplied text is escaped, never run", async () => {
    const evil = `<img src=x onerror="window.__xss=1">`;
    const file = join(dir, "evil.json");
    writeFileSync(
      file,
      JSON.stringify({ models: [{ name: "escape-test", replicas: { min: 1 }, profiles: [{ name: "p", engine: "vllm", gpu_class: `H100 ${evil} <script>window.__xss=2</script>`, gpus: 1 }] }] }),
    );
    cli("apply", "-f", file);
    const row = page.locator('[data-testid="unplaceable"][data-model="escape-test"]');
    await row.waitFor({ timeout: 6_000 });
    expect(await row.textContent()).toContain(evil);
    expect(await page.locator('[data-testid="model-row"][data-model="escape-test"] [data-field="status"]').textContent()).toBe("unplaceable");
    expect(await page.locator("main img").count()).toBe(0);
    expect(await page.locator("main script").count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as unknown as Win).__xss)).toBeUndefined();
    await pageMatchesStatus(page);
  }, 30_000);

  test("the tables link to a page per node and per model: GPUs, replicas with placement, events, reasons", async () => {
    await Promise.all([page.waitForURL(`${adminUrl}/ui/nodes/h100-1`), page.locator('[data-testid="node-row"][data-node="h100-1"] a').click()]);
    await page.locator('[data-testid="node-title"][data-node="h100-1"]').waitFor();
    expect(await page.locator('[data-testid="gpu-row"]').count()).toBe(8);
    expect(await page.locator('[data-testid="cordon-form"] input[name="csrf"]').count()).toBe(1);
    expect(await page.locator('[data-testid="event"]').count()).toBeGreaterThan(0);
    // A replica placed here links to its model's page.
    const placed = page.locator('[data-testid="replica-row"] td.name a').first();
    const model = (await placed.textContent())!;
    await Promise.all([page.waitForURL(`${adminUrl}/ui/models/${encodeURIComponent(model)}`), placed.click()]);
    await page.locator(`[data-testid="model-title"][data-model="${model}"]`).waitFor();
    expect(await page.locator('[data-testid="replica-row"]').count()).toBeGreaterThan(0);
    expect(await page.locator('[data-testid="replica-row"] a[href="/ui/nodes/h100-1"]').count()).toBeGreaterThan(0);
    expect(await page.locator('[data-testid="profile-row"]').count()).toBeGreaterThan(0);
    expect(await page.locator('[data-testid="section-history"] [data-testid="chart"]').count()).toBe(4);
    // An unplaceable model's page says why.
    await page.goto(`${adminUrl}/ui/models/deepseek-v3`);
    expect(await page.locator('[data-testid="model-reason"]').textContent()).toContain("can never fit");
    // An unknown name: the 404 page (in a context of its own, unwatched: Chromium logs every 404 to the console).
    const lost = await browser.newContext();
    await lost.addCookies(await ctx.cookies());
    const lp = await lost.newPage();
    const missing = await lp.goto(`${adminUrl}/ui/nodes/no-such-node`);
    expect(missing!.status()).toBe(404);
    await lp.locator('[data-testid="not-found"]').waitFor();
    await close(lost);
    await page.goto(`${adminUrl}/ui`);
  }, 30_000);

  test("actions through the forms: cordon and uncordon a node, unpark and delete a model, create and revoke a key", async () => {
    await page.goto(`${adminUrl}/ui/nodes/h100-2`);
    await Promise.all([page.waitForURL(`${adminUrl}/ui/nodes/h100-2`), page.locator('[data-testid="cordon-form"] button').click()]);
    expect(await page.locator('[data-testid="flash"]').textContent()).toContain("node/h100-2 cordoned");
    expect(await page.locator('[data-testid="node-title"] [data-field="state"]').textContent()).toBe("cordoned");
    expect(status().nodes.cordoned).toBe(1);
    await page.locator('[data-testid="uncordon-form"] button').click();
    await page.locator('[data-testid="flash"]', { hasText: "node/h100-2 uncordoned" }).waitFor();
    expect(status().nodes.cordoned).toBe(0);

    // The broken model parks after its failures; unpark it from its page.
    await until("mistral-7b-broken parked", () => status().parked.some((p) => p.model === "mistral-7b-broken"), 30_000);
    // The overview's note names the command as code, not between literal backticks; no text on the page shows one.
    await page.goto(`${adminUrl}/ui`);
    await page.locator('[data-testid="parked"][data-model="mistral-7b-broken"]').waitFor();
    expect(await page.locator('[data-testid="parked-note"]').textContent()).toBe("not retried until llmgw models unpark NAME or a catalog change");
    expect(await page.locator('[data-testid="parked-note"] code').textContent()).toBe("llmgw models unpark NAME");
    expect(await page.locator("main").textContent()).not.toContain("`");
    await page.goto(`${adminUrl}/ui/models/mistral-7b-broken`);
    // Its last failed replica is kept for display; its card went back to the pool, and says so.
    const failed = page.locator('[data-testid="replica-row"]', { has: page.locator('[data-field="state"]', { hasText: "failed" }) });
    expect(await failed.locator('[data-field="placement"]').first().textContent()).toMatch(/^released a100-\d:\d/);
    // The catalog's revision is called so (the Hugging Face revision is another thing).
    const facts = await page.locator('[data-testid="section-model"] dt').allTextContents();
    expect(facts).toContain("Catalog revision");
    expect(facts).not.toContain("Revision");
    await page.locator('[data-testid="unpark-form"] button').click();
    await page.locator('[data-testid="flash"]', { hasText: "model/mistral-7b-broken unparked" }).waitFor();
    expect(JSON.parse(cli("events", "-o", "json")).some((e: { kind: string; subject: string }) => e.kind === "model.unparked" && e.subject === "model/mistral-7b-broken")).toBe(true);

    // Delete: the browser will not send the form until the box is ticked.
    await page.goto(`${adminUrl}/ui/models/escape-test`);
    await page.locator('[data-testid="delete-form"] button').click();
    expect(page.url()).toBe(`${adminUrl}/ui/models/escape-test`);
    expect(await page.locator('[data-testid="flash"]').count()).toBe(0);
    await page.locator('[data-testid="delete-form-confirm"]').check();
    await Promise.all([page.waitForURL(`${adminUrl}/ui`), page.locator('[data-testid="delete-form"] button').click()]);
    expect(await page.locator('[data-testid="flash"]').textContent()).toContain("model/escape-test deleted");
    expect(JSON.parse(cli("models", "-o", "json")).some((m: { name: string }) => m.name === "escape-test")).toBe(false);

    // A key: created from the form, its secret shown once, and the router takes it.
    await page.locator('[data-testid="nav-keys"]').click();
    await page.locator('[data-testid="key-name"]').fill("from-the-form");
    await page.locator('[data-testid="create-key-form"] button').click();
    const secret = (await page.locator('[data-testid="new-key"]').textContent())!;
    expect(secret).toMatch(/^sk-llmgw-/);
    const used = await fetch(`${routerUrl}/v1/models`, { headers: { authorization: `Bearer ${secret}` } });
    expect(used.status).toBe(200);
    await page.reload();
    expect(await page.locator('[data-testid="new-key"]').count()).toBe(0);
    const row = page.locator('[data-testid="key-row"][data-key="from-the-form"]');
    await row.locator('[data-testid="revoke-form-confirm"]').check();
    await row.locator("button").click();
    await page.locator('[data-testid="flash"]', { hasText: "key/from-the-form revoked" }).waitFor();
    expect(JSON.parse(cli("keys", "list", "-o", "json")).some((k: { name: string }) => k.name === "from-the-form")).toBe(false);
    await page.goto(`${adminUrl}/ui`);
  }, 60_000);

  test("after some traffic the overview and the model's page draw the last hour as inline SVG", async () => {
    const chat = async () => {
      for (let i = 0; i < 3; i++) {
        const r = await fetch(`${routerUrl}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${clientKey}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "llama-3.1-8b", messages: [{ role: "user", content: "hi" }], max_tokens: 8 }),
        });
        expect(r.status).toBe(200);
        await r.text();
      }
    };
    await chat();
    // GPU use per class: sampled since the start.
    const gpu = page.locator('[data-testid="section-gpu-history"] [data-testid="chart"][data-chart="gpu:H100-80GB"]');
    await gpu.waitFor();
    expect(Number(await gpu.getAttribute("data-points"))).toBeGreaterThan(0);
    expect(await gpu.locator("svg polyline").count()).toBeGreaterThan(0);
    expect(await gpu.locator('[data-field="max"]').textContent()).toBe("16");
    // The router's figures: keep asking until a sample's difference shows the requests (two samples, 15 s apart).
    const rps = page.locator('[data-testid="model-traffic"][data-model="llama-3.1-8b"] [data-chart="rps"]');
    await until(
      "a request rate above 0 for llama-3.1-8b on the overview",
      async () => {
        await chat();
        return (await rps.count()) > 0 && Number(await rps.getAttribute("data-peak")) > 0;
      },
      { timeoutMs: 45_000, everyMs: 1000 },
    );
    expect(await rps.locator("svg polyline").count()).toBeGreaterThan(0);
    await page.goto(`${adminUrl}/ui/models/llama-3.1-8b`);
    const charts = page.locator('[data-testid="section-history"] [data-testid="chart"]');
    expect(await charts.count()).toBe(4);
    expect(Number(await charts.and(page.locator('[data-chart="tokens"]')).getAttribute("data-peak"))).toBeGreaterThan(0);
    expect(Number(await charts.and(page.locator('[data-chart="ttft"]')).getAttribute("data-points"))).toBeGreaterThan(0);
    expect(await page.locator('[data-chart="ttft"] [data-field="last-p50"]').textContent()).toMatch(/ m?s$|^-$/);
    await page.goto(`${adminUrl}/ui`);
  }, 60_000);

  test("teams: a team's priority, limits with their use and keys, its page with its keys, and the keys page's team, limit and expiry columns", async () => {
    cli("teams", "create", "ml", "--rpm", "3", "--priority", "batch");
    cli("keys", "create", "trainer", "--team", "ml", "--rpm", "5", "--expires", "30d");
    await page.locator('[data-testid="nav-teams"]').click();
    const team = page.locator('[data-testid="team-row"][data-team="ml"]');
    // Each limit as `teams list` shows it: its use in front once the router reports it.
    expect(await team.locator('[data-field="rpm"]').textContent()).toMatch(/^(\d+\/)?3$/);
    expect(await team.locator('[data-field="priority"]').textContent()).toBe("batch");
    expect(await team.locator('[data-field="keys"]').textContent()).toBe("trainer");
    await Promise.all([page.waitForURL(`${adminUrl}/ui/teams/ml`), team.locator("a").click()]);
    expect(await page.locator('[data-testid="team-title"]').textContent()).toBe("ml");
    expect(await page.locator('dd[data-field="rpm"]').textContent()).toMatch(/^(\d+\/)?3$/);
    const key = page.locator('[data-testid="key-row"][data-key="trainer"]');
    expect(await key.locator('[data-field="rpm"]').textContent()).toMatch(/^(\d+\/)?5$/);
    expect(await key.locator('[data-field="tier"]').textContent()).toBe("(team)");
    await page.locator('[data-testid="nav-keys"]').click();
    const row = page.locator('[data-testid="key-row"][data-key="trainer"]');
    expect(await row.locator('[data-field="team"]').textContent()).toBe("ml");
    expect(await row.locator('[data-field="expires"]').textContent()).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d$/);
    await Promise.all([page.waitForURL(`${adminUrl}/ui/teams/ml`), row.locator('[data-field="team"] a').click()]);
    await page.goto(`${adminUrl}/ui`);
  }, 30_000);

  test("the usage page charts the traffic per team, totals it per key and model, and offers 7 and 30 days", async () => {
    await page.locator('[data-testid="nav-usage"]').click();
    // The traffic above came with a key outside any team; the ledger has it once a tick has written it.
    const none = page.locator('[data-testid="usage-team"][data-team=""]');
    await until(
      "the earlier traffic on the usage page",
      async () => {
        await page.reload();
        return (await none.count()) > 0;
      },
      { timeoutMs: 15_000, everyMs: 500 },
    );
    expect(Number(await none.locator('[data-chart="usage-tokens"]').getAttribute("data-peak"))).toBeGreaterThan(0);
    expect(await none.locator("svg").count()).toBeGreaterThanOrEqual(2);
    const row = none.locator('[data-testid="usage-row"][data-key="dashboard-test"][data-model="llama-3.1-8b"]');
    expect(Number((await row.locator('[data-field="requests"]').textContent())!.replaceAll(",", ""))).toBeGreaterThanOrEqual(3);
    await Promise.all([page.waitForURL(`${adminUrl}/ui/usage?range=7d`), page.locator('[data-testid="usage-range"] [data-range="7d"]').click()]);
    expect(await page.locator('[data-range="7d"]').getAttribute("aria-current")).toBe("page");
    expect(await none.locator(".xaxis span").first().textContent()).toBe("−7d");
    await page.goto(`${adminUrl}/ui`);
  }, 30_000);

  test("charts in one row keep their plots level when a legend wraps (the overview's GPU classes, a model's four)", async () => {
    /** Each chart's row (its top), how many lines its legend takes, and where its plot starts. */
    type Chart = { top: number; lines: number; plot: number };
    const charts = () =>
      page.locator('[data-testid="chart"]').evaluateAll((els) =>
        els.map((f) => ({
          top: Math.round(f.getBoundingClientRect().top),
          lines: new Set([...f.querySelector("figcaption")!.children].map((c) => Math.round(c.getBoundingClientRect().top))).size,
          plot: Math.round(f.querySelector("svg")!.getBoundingClientRect().top),
        })),
      ) as Promise<Chart[]>;
    let wrapped = 0;
    for (const path of ["/ui", "/ui/models/llama-3.1-8b"])
      for (const width of [1400, 1200, 1000, 900, 600]) {
        await page.setViewportSize({ width, height: 900 });
        await page.goto(`${adminUrl}${path}`);
        const rows = new Map<number, Chart[]>();
        for (const c of await charts()) rows.set(c.top, [...(rows.get(c.top) ?? []), c]);
        for (const row of rows.values()) {
          expect({ path, width, plots: new Set(row.map((c) => c.plot)).size }).toEqual({ path, width, plots: 1 });
          if (new Set(row.map((c) => c.lines)).size > 1) wrapped++;
        }
      }
    // Not vacuous: some rows had a legend on two lines beside one on one (A100-80GB/3g.40gb's, at 1400).
    expect(wrapped).toBeGreaterThan(0);
    await page.setViewportSize({ width: 1400, height: 900 });
    await page.goto(`${adminUrl}/ui`);
  }, 30_000);

  test("at 420 px wide every page fits the viewport (tables scroll in their own box); screenshots of each", async () => {
    const narrow = await browser.newContext({ viewport: { width: 420, height: 900 } });
    watch(narrow, "narrow");
    await narrow.addCookies(await ctx.cookies());
    const p = await narrow.newPage();
    const pages = [
      ["overview", "/ui", "summary"],
      ["model", "/ui/models/llama-3.1-8b", "model-title"],
      ["node", "/ui/nodes/a100-1", "node-title"],
      ["keys", "/ui/keys", "create-key-form"],
      ["teams", "/ui/teams", "section-teams"],
      ["team", "/ui/teams/ml", "team-title"],
      ["usage", "/ui/usage", "usage-range"],
    ] as const;
    for (const [name, path, testid] of pages) {
      for (const [width, label] of [
        [1400, "wide"],
        [420, "narrow"],
      ] as const) {
        await p.setViewportSize({ width, height: 900 });
        await p.goto(`${adminUrl}${path}`);
        await p.locator(`[data-testid="${testid}"]`).waitFor();
        const sizes = await p.evaluate(() => {
          const d = (globalThis as unknown as { document: { documentElement: { scrollWidth: number; clientWidth: number } } }).document.documentElement;
          return { scroll: d.scrollWidth, client: d.clientWidth };
        });
        expect({ name, width, scroll: sizes.scroll <= width }).toEqual({ name, width, scroll: true });
        const file = join(shots, `${name}-${label}.png`);
        await p.screenshot({ path: file, fullPage: true });
        // A real picture: a PNG of some size, as wide as the viewport.
        const png = readFileSync(file);
        expect(png.subarray(1, 4).toString()).toBe("PNG");
        expect(png.readUInt32BE(16)).toBe(width);
        expect(statSync(file).size).toBeGreaterThan(20_000);
      }
    }
    // The GPU classes fit without scrolling: every class's numbers in view, the bar under its name.
    await p.goto(`${adminUrl}/ui`);
    const box = await p.locator('[data-testid="section-gpus"] .scroll').evaluate((el) => ({ scroll: el.scrollWidth, client: el.clientWidth }));
    expect(box.scroll).toBeLessThanOrEqual(box.client);
    for (const row of await p.locator('[data-testid="gpu-class"]').all()) {
      const total = (await row.locator('[data-field="total"]').boundingBox())!;
      expect(total.x + total.width).toBeLessThanOrEqual(420);
      expect(await row.locator(".bar-under svg").isVisible()).toBe(true);
    }
    // The charts and forms are there on a phone too.
    await p.goto(`${adminUrl}/ui/models/llama-3.1-8b`);
    expect(await p.locator('[data-testid="chart"]').count()).toBe(4);
    expect(await p.locator('[data-testid="delete-form"] button').isVisible()).toBe(true);
    await close(narrow);
  }, 60_000);

  test("a screenshot of the signed-in page", async () => {
    await page.screenshot({ path: join(OUT, "dashboard.png"), fullPage: true });
  });

  test("an old ?token= link signs no one in: the form, saying so, with the token neither shown nor kept in the address bar or history", async () => {
    for (const [label, token] of [["link", adminToken], ["wrong link", "wrong-token-in-link"]] as const) {
      const c = await newContext(label, { allow401: true });
      const p = await c.newPage();
      const res = await p.goto(`${adminUrl}/ui?token=${encodeURIComponent(token)}`);
      expect(res!.status()).toBe(401);
      await p.locator('[data-testid="login-error"]').waitFor();
      expect(await p.locator('[data-testid="login-error"]').textContent()).toContain("no longer sign in");
      expect(await res!.text()).not.toContain(token);
      expect(await p.locator("#token").inputValue()).toBe("");
      await until("the query stripped", () => p.url() === `${adminUrl}/ui`, 2_000);
      expect(await p.evaluate(() => (globalThis as unknown as Win).history.length)).toBe(2);
      expect(await c.cookies()).toEqual([]);
      expect(await p.evaluate(async () => (await fetch("/ui/fragment")).status)).toBe(401);
      await close(c);
    }

    // Followed from another site: the same form, no session.
    const c2 = await newContext("cross-site link", { allow401: true });
    const p2 = await c2.newPage();
    await p2.setContent(`<a id="go" href="${adminUrl}/ui?token=${encodeURIComponent(adminToken)}">dashboard</a>`);
    await p2.locator("#go").click();
    await p2.locator('[data-testid="login-form"]').waitFor({ timeout: 5_000 });
    await until("the query stripped", () => p2.url() === `${adminUrl}/ui`, 2_000);
    expect(await c2.cookies()).toEqual([]);
    await close(c2);
  }, 20_000);

  test("log out (a POST carrying the page's CSRF token) clears the cookie and revokes the session; GET /ui/logout does nothing", async () => {
    const [held] = await ctx.cookies();
    const replay = { headers: { cookie: `${held!.name}=${held!.value}` }, redirect: "manual" as const };
    // A plain link to the logout URL (a GET) is refused and logs no one out.
    expect((await fetch(`${adminUrl}/ui/logout`, replay)).status).toBe(405);
    expect((await fetch(`${adminUrl}/ui/fragment`, replay)).status).toBe(200);
    expect(await page.locator('[data-testid="logout-form"] input[name="csrf"]').getAttribute("value")).toMatch(/^[A-Za-z0-9_-]{43}$/);
    await Promise.all([page.waitForURL(`${adminUrl}/ui`), page.locator('[data-testid="logout"]').click()]);
    await page.locator('[data-testid="login-form"]').waitFor();
    expect(await ctx.cookies()).toEqual([]);
    const status = await page.evaluate(async () => (await fetch("/ui/fragment")).status);
    expect(status).toBe(401);
    // The cookie as it was, replayed: the server has forgotten the session.
    expect((await fetch(`${adminUrl}/ui/fragment`, replay)).status).toBe(401);
    await close(ctx);
  });

  test("no console errors, no page errors, no failed requests, nothing outside 127.0.0.1", () => {
    expect(requested.length).toBeGreaterThan(10);
    expect(requested.filter((u) => u.endsWith("/ui/fragment")).length).toBeGreaterThan(3);
    expect(problems).toEqual([]);
  });
});
