// The dashboard's pages and actions over HTTP against a real head node with a manual clock:
// each action (cordon, uncordon, drain, unpark, delete a model, create and revoke a key) is a
// POST from a session carrying its CSRF token: missing or wrong → 403 and nothing changed;
// right → the effect, its event, a 303 back and a message shown once. A bearer script may read
// the pages but act only through the API. And the history: after samples on the scheduler,
// the overview and the model page carry the charts.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { UI_COOKIE } from "../../src/api/ui";
import type { EventView, NodeView } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";

let s: TestServer;
const H = "H100-80GB";

beforeAll(async () => {
  s = await testServer();
  for (const name of ["gpu-01", "gpu-02"]) expect((await s.agent(heartbeat({ name, gpus: [H, H] }))).status).toBe(200);
  const put = await s.admin("/api/v1/models/llama", {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: H, gpus: 1 }] }),
  });
  expect(put.status).toBe(201);
  await s.seed.modelState("llama", { parked: true, failures: 5, reason: "CUDA out of memory" });
});
afterAll(async () => {
  await s.stop();
});

interface Signed {
  cookie: string;
  csrf: string;
}

async function signIn(): Promise<Signed> {
  const r = await fetch(`${s.adminUrl}/ui/login`, { method: "POST", body: new URLSearchParams({ token: s.adminToken }), redirect: "manual" });
  expect(r.status).toBe(303);
  const value = new RegExp(`${UI_COOKIE}=([^;]*)`).exec(r.headers.get("set-cookie")!)![1]!;
  const cookie = `${UI_COOKIE}=${value}`;
  const page = await fetch(`${s.adminUrl}/ui`, { headers: { cookie } });
  const csrf = /name="csrf" value="([^"]+)"/.exec(await page.text())![1]!;
  return { cookie, csrf };
}

const post = (path: string, who: Signed | { bearer: string }, fields: Record<string, string> = {}) =>
  fetch(`${s.adminUrl}${path}`, {
    method: "POST",
    headers: "bearer" in who ? { authorization: `Bearer ${who.bearer}` } : { cookie: who.cookie },
    body: new URLSearchParams(fields),
    redirect: "manual",
  });
const get = async (path: string, who: Signed) => {
  const r = await fetch(`${s.adminUrl}${path}`, { headers: { cookie: who.cookie } });
  return { status: r.status, html: await r.text() };
};
const node = async (name: string) => (await (await s.admin(`/api/v1/nodes/${name}`)).json()) as NodeView;
const events = async () => (await (await s.admin("/api/v1/events?limit=500")).json()) as EventView[];
const keys = async () => (await (await s.admin("/api/v1/keys")).json()) as { name: string }[];
const parked = async () => ((await (await s.admin("/api/v1/models/llama")).json()) as { parked: boolean }).parked;

describe("pages", () => {
  test("a model's page and a node's page, linked from the overview; unknown names are a 404 page", async () => {
    const a = await signIn();
    const overview = await get("/ui", a);
    expect(overview.html).toContain('href="/ui/models/llama"');
    expect(overview.html).toContain('href="/ui/nodes/gpu-01"');
    const m = await get("/ui/models/llama", a);
    expect(m.status).toBe(200);
    expect(m.html).toContain('data-testid="model-title" data-model="llama"');
    expect(m.html).toContain("CUDA out of memory");
    expect(m.html).toContain('data-testid="unpark-form"');
    expect(m.html).toContain('data-testid="profile-row"');
    const n = await get("/ui/nodes/gpu-01", a);
    expect(n.status).toBe(200);
    expect(n.html).toContain('data-testid="node-title" data-node="gpu-01"');
    expect(n.html.match(/data-testid="gpu-row"/g)).toHaveLength(2);
    expect(n.html).toContain('data-testid="cordon-form"');
    // A name with a slash: linked encoded, found either way.
    const put = await s.admin("/api/v1/models/org/tiny", {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ replicas: { min: 0 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: H, gpus: 1 }] }),
    });
    expect(put.status).toBe(201);
    expect((await get("/ui", a)).html).toContain('href="/ui/models/org%2Ftiny"');
    for (const path of ["/ui/models/org%2Ftiny", "/ui/models/org/tiny"]) expect((await get(path, a)).html).toContain('data-model="org/tiny"');
    expect((await get("/ui/models/org%2Ftiny", a)).html).toContain('action="/ui/models/org%2Ftiny/delete"');
    for (const path of ["/ui/models/nope", "/ui/nodes/nope", "/ui/nodes/..%2F"]) {
      const r = await get(path, a);
      expect({ path, status: r.status }).toEqual({ path, status: 404 });
      expect(r.html).toContain('data-testid="not-found"');
    }
  });

  test("a bearer script reads the pages, with no forms on them, and its POSTs are refused", async () => {
    const r = await fetch(`${s.adminUrl}/ui/nodes/gpu-01`, { headers: { authorization: `Bearer ${s.adminToken}` } });
    expect(r.status).toBe(200);
    const html = await r.text();
    expect(html).not.toContain('name="csrf"');
    const res = await post("/ui/nodes/gpu-01/cordon", { bearer: s.adminToken });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("/api/v1");
    expect((await node("gpu-01")).admin_state).toBe("none");
    // No session and no token: the login form, nothing done.
    const anon = await fetch(`${s.adminUrl}/ui/nodes/gpu-01/cordon`, { method: "POST", redirect: "manual" });
    expect(anon.status).toBe(401);
    expect((await node("gpu-01")).admin_state).toBe("none");
  });
});

describe("actions need the session's CSRF token", () => {
  test("missing, empty, wrong or another session's token: 403, and nothing changed", async () => {
    const a = await signIn();
    const b = await signIn();
    const before = (await events()).length;
    const keysBefore = (await keys()).length;
    for (const csrf of [undefined, "", "wrong", b.csrf, `${a.csrf}x`]) {
      const fields = (extra: Record<string, string> = {}) => (csrf === undefined ? extra : { csrf, ...extra });
      for (const [path, extra] of [
        ["/ui/nodes/gpu-01/cordon", {}],
        ["/ui/nodes/gpu-01/drain", {}],
        ["/ui/models/llama/unpark", {}],
        ["/ui/models/llama/delete", { confirm: "yes" }],
        ["/ui/keys", { name: "sneaky" }],
      ] as const) {
        const r = await post(path, a, fields(extra));
        expect({ path, csrf, status: r.status }).toEqual({ path, csrf, status: 403 });
      }
    }
    expect((await node("gpu-01")).admin_state).toBe("none");
    expect(await parked()).toBe(true);
    expect((await s.admin("/api/v1/models/llama")).status).toBe(200);
    expect((await keys()).length).toBe(keysBefore);
    expect((await events()).length).toBe(before);
  });
});

describe("actions with the right token", () => {
  test("cordon, uncordon, drain: the node's state, its event, a 303 back to the node and the message once", async () => {
    const a = await signIn();
    const r = await post("/ui/nodes/gpu-02/cordon", a, { csrf: a.csrf });
    expect(r.status).toBe(303);
    expect(r.headers.get("location")).toBe("/ui/nodes/gpu-02");
    expect((await node("gpu-02")).admin_state).toBe("cordoned");
    expect((await events()).some((e) => e.kind === "node.cordoned" && e.subject === "node/gpu-02")).toBe(true);
    const page = await get("/ui/nodes/gpu-02", a);
    expect(page.html).toContain('data-testid="flash" data-tone="ok"');
    expect(page.html).toContain("node/gpu-02 cordoned");
    // Shown once.
    expect((await get("/ui/nodes/gpu-02", a)).html).not.toContain('data-testid="flash"');
    // Again: the admin API's "already".
    await post("/ui/nodes/gpu-02/cordon", a, { csrf: a.csrf });
    expect((await get("/ui/nodes/gpu-02", a)).html).toContain("node/gpu-02 already cordoned");

    expect((await post("/ui/nodes/gpu-02/uncordon", a, { csrf: a.csrf })).status).toBe(303);
    expect((await node("gpu-02")).admin_state).toBe("none");
    expect((await post("/ui/nodes/gpu-02/drain", a, { csrf: a.csrf })).status).toBe(303);
    expect((await node("gpu-02")).admin_state).toBe("draining");
    const kinds = (await events()).filter((e) => e.subject === "node/gpu-02").map((e) => e.kind);
    expect(kinds).toEqual(expect.arrayContaining(["node.cordoned", "node.uncordoned", "node.draining"]));
    await post("/ui/nodes/gpu-02/uncordon", a, { csrf: a.csrf });
    // An unknown node: back with the admin API's message, nothing else.
    const nope = await post("/ui/nodes/nope/cordon", a, { csrf: a.csrf });
    expect(nope.status).toBe(303);
    expect(nope.headers.get("location")).toBe("/ui/nodes/nope");
    const said = await get("/ui", a);
    expect(said.html).toContain('data-tone="bad"');
    expect(said.html).toContain("node &quot;nope&quot; not found");
    expect((await s.admin("/api/v1/nodes/nope")).status).toBe(404);
  });

  test("unpark: the model is tried again, with its event", async () => {
    const a = await signIn();
    const r = await post("/ui/models/llama/unpark", a, { csrf: a.csrf });
    expect(r.status).toBe(303);
    expect(r.headers.get("location")).toBe("/ui/models/llama");
    expect(await parked()).toBe(false);
    expect((await events()).some((e) => e.kind === "model.unparked" && e.subject === "model/llama")).toBe(true);
    expect((await get("/ui/models/llama", a)).html).toContain("model/llama unparked");
  });

  test("create a key: its secret shown once on the keys page, and it works; revoke needs the confirm box", async () => {
    const a = await signIn();
    // A name the API would refuse: refused the same way, nothing created.
    await post("/ui/keys", a, { csrf: a.csrf, name: "bad name!" });
    const refused = await get("/ui/keys", a);
    expect(refused.html).toContain('data-tone="bad"');
    expect(refused.html).toContain("name: may contain only letters");
    expect((await keys()).map((k) => k.name)).not.toContain("bad name!");

    const r = await post("/ui/keys", a, { csrf: a.csrf, name: "web-app", pool: "" });
    expect(r.status).toBe(303);
    expect(r.headers.get("location")).toBe("/ui/keys");
    // The secret is not in the redirect.
    expect(r.headers.get("location")).not.toContain("sk-");
    const page = await get("/ui/keys", a);
    const secret = /data-testid="new-key">([^<]+)</.exec(page.html)?.[1];
    expect(secret).toMatch(/^sk-llmgw-/);
    expect(page.html).toContain('data-testid="key-row" data-key="web-app"');
    expect((await get("/ui/keys", a)).html).not.toContain(secret!);
    expect((await events()).some((e) => e.kind === "key.created" && e.subject === "key/web-app")).toBe(true);
    // The same name again: the API's conflict message.
    await post("/ui/keys", a, { csrf: a.csrf, name: "web-app" });
    expect((await get("/ui/keys", a)).html).toContain("already exists");

    // Revoke without the box ticked: nothing revoked.
    await post("/ui/keys/web-app/revoke", a, { csrf: a.csrf });
    expect((await get("/ui/keys", a)).html).toContain("nothing revoked");
    expect((await keys()).map((k) => k.name)).toContain("web-app");
    expect((await post("/ui/keys/web-app/revoke", a, { csrf: a.csrf, confirm: "yes" })).status).toBe(303);
    expect((await keys()).map((k) => k.name)).not.toContain("web-app");
    expect((await events()).some((e) => e.kind === "key.revoked" && e.subject === "key/web-app")).toBe(true);
  });

  test("delete a model: not without the confirm box; with it, gone, its event, back to the overview", async () => {
    const a = await signIn();
    // A name with a slash, through its encoded form action.
    expect((await post("/ui/models/org%2Ftiny/delete", a, { csrf: a.csrf, confirm: "yes" })).status).toBe(303);
    expect((await s.admin("/api/v1/models/org/tiny")).status).toBe(404);
    const r = await post("/ui/models/llama/delete", a, { csrf: a.csrf });
    expect(r.status).toBe(303);
    expect(r.headers.get("location")).toBe("/ui/models/llama");
    expect((await s.admin("/api/v1/models/llama")).status).toBe(200);
    expect((await get("/ui/models/llama", a)).html).toContain("nothing deleted");

    const ok = await post("/ui/models/llama/delete", a, { csrf: a.csrf, confirm: "yes" });
    expect(ok.status).toBe(303);
    expect(ok.headers.get("location")).toBe("/ui");
    expect((await s.admin("/api/v1/models/llama")).status).toBe(404);
    expect((await events()).some((e) => e.kind === "model.deleted" && e.subject === "model/llama")).toBe(true);
    expect((await get("/ui", a)).html).toContain("model/llama deleted");
    expect((await get("/ui/models/llama", a)).status).toBe(404);
  });
});

describe("history on the pages", () => {
  test("GPU use per class is sampled on the scheduler and drawn as inline SVG", async () => {
    const a = await signIn();
    await s.clock.run(15_000);
    await s.clock.run(15_000);
    const html = (await get("/ui/fragment", a)).html;
    const chart = /<figure class="chart" data-testid="chart" data-chart="gpu:H100-80GB" data-points="(\d+)"/.exec(html);
    expect(chart).not.toBeNull();
    expect(Number(chart![1])).toBeGreaterThanOrEqual(4); // used and unhealthy, two samples or more
    expect(html).toContain("<polyline");
    expect(html).not.toMatch(/style=/);
  });
});

describe("traffic charts", () => {
  test("a model's rates, TTFT and load from the router's figures: on the overview and on its page, scale labelled", async () => {
    const { History } = await import("../../src/api/history");
    const { uiRoutes } = await import("../../src/api/ui");
    const { TTFT_BUCKETS_MS } = await import("../../src/protocol/routing");
    await s.admin("/api/v1/models/busy", {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: H, gpus: 1 }] }),
    });
    const h = new History();
    const buckets = (fast: number) => [fast, ...Array<number>(TTFT_BUCKETS_MS.length).fill(0)];
    const t0 = s.clock.now() - 60_000;
    h.readsTraffic = true;
    h.record(t0, [{ model: "busy", requests: 0, errors: 0, output_tokens: 0, ttft_counts: buckets(0), inflight: 0, queued: 0 }], []);
    // 30 requests in 15 s, 600 tokens, all under 25 ms; 4 in flight, 1 held.
    h.record(t0 + 15_000, [{ model: "busy", requests: 30, errors: 0, output_tokens: 600, ttft_counts: buckets(30), inflight: 4, queued: 1 }], []);
    const ui = uiRoutes({ control: s.parts.control, clock: s.clock, adminToken: s.adminToken, history: h });
    const auth = { headers: { authorization: `Bearer ${s.adminToken}` } };
    const overview = await (await ui.request("/fragment", auth)).text();
    expect(overview).toContain('data-testid="model-traffic" data-model="busy"');
    expect(overview).toContain("2.0 req/s · 40 tok/s");
    const page = await (await ui.request("/models/busy", auth)).text();
    for (const id of ["rps", "tokens", "ttft", "load"]) expect(page).toContain(`data-chart="${id}"`);
    // The latest values and the top of each scale, as text beside the SVG.
    expect(page).toMatch(/data-field="last-rps">2.0</);
    expect(page).toMatch(/data-field="last-tokens">40</);
    expect(page).toMatch(/data-field="last-inflight">4</);
    expect(page).toMatch(/data-field="last-queued">1</);
    expect(page).toMatch(/data-field="last-p50">13 ms</);
    expect(page).toMatch(/data-chart="tokens"[^]*?data-field="max">50</);
    expect(page).toContain("−60m");
    expect(page).toMatch(/<polyline class="line s1" data-series="rps" points="[\d., ]+"/);
  });
});
