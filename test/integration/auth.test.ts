// Access: every route of the admin, agent and router listeners refuses a request with no
// token and with a token of the wrong kind. The routes are enumerated from the servers
// themselves, so a route added without auth fails here. Secrets never reach logs or errors.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import pino from "pino";
import { Writable } from "node:stream";
import { REDACT_PATHS } from "../../src/log";
import { ROUTER_ROUTES } from "../../src/router/dispatch";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";

const lines: string[] = [];
const capture = new Writable({
  write(chunk, _enc, cb) {
    lines.push(String(chunk));
    cb();
  },
});

let s: TestServer;
let open: TestServer;
let clientKey: string;
const checked: string[] = [];

beforeAll(async () => {
  s = await testServer({ require_api_key: true }, pino({ level: "debug", redact: { paths: REDACT_PATHS, censor: "[redacted]" } }, capture));
  open = await testServer();
  await s.agent(heartbeat({ name: "gpu-01", gpus: ["H100-80GB"] }));
  await s.admin("/api/v1/models/m", { method: "PUT", body: JSON.stringify({ profiles: [{ name: "p", engine: "fake", gpu_class: "H100-80GB" }] }) });
  clientKey = ((await (await s.admin("/api/v1/keys", { method: "POST", body: JSON.stringify({ name: "team-a" }) })).json()) as { key: string }).key;
});
afterAll(async () => {
  await s.stop();
  await open.stop();
  console.log(`routes checked for auth: ${checked.length} (${checked.join(", ")})`);
});

/** A concrete path for a route pattern: every parameter filled in. */
const concrete = (path: string) => path.replace(/:[a-zA-Z]+(\{[^}]*\})?/g, "x");
const send = (base: string, method: string, path: string, token?: string) =>
  fetch(`${base}${path}`, {
    method,
    headers: { ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}), "content-type": "application/json" },
    body: method === "GET" || method === "HEAD" ? undefined : "{}",
  });

describe("admin and agent listener", () => {
  test("every route refuses no token, a wrong token and the other kind's token; /healthz is open", async () => {
    const routes = s.adminApp.routes.filter((r) => r.method !== "ALL");
    expect(routes.length).toBeGreaterThan(15);
    for (const r of routes) {
      const path = concrete(r.path);
      if (path === "/healthz") {
        expect((await send(s.adminUrl, r.method, path)).status).toBe(200);
        continue;
      }
      const agentRoute = path.startsWith("/agent/");
      const wrongKind = agentRoute ? s.adminToken : s.joinToken;
      for (const token of [undefined, "", "not-a-real-token-at-all", wrongKind, clientKey]) {
        const res = await send(s.adminUrl, r.method, path, token);
        expect({ route: `${r.method} ${r.path}`, token: token === wrongKind ? "wrong kind" : token, status: res.status }).toEqual({
          route: `${r.method} ${r.path}`,
          token: token === wrongKind ? "wrong kind" : token,
          status: 401,
        });
        const body = await res.text();
        // The refusal never echoes what was sent (an absent or empty token echoes nothing).
        expect(token ? body.includes(token) : false).toBe(false);
      }
      // The right token gets past auth (whatever the handler then says about "x"). The join
      // token is read from its file: POST /join-token/rotate, checked among the admin routes, replaces it.
      const joinNow = readFileSync(join(s.dataDir, "join.token"), "utf8").trim();
      expect((await send(s.adminUrl, r.method, path, agentRoute ? joinNow : s.adminToken)).status).not.toBe(401);
      checked.push(`${r.method} ${r.path}`);
    }
  });
});

describe("router listener", () => {
  const path = (p: string) => (p.endsWith("/") ? `${p}chat/completions` : p);

  test("with API keys required, /v1/* refuses no key, bad keys, the admin and join tokens; a key opens it", async () => {
    for (const r of ROUTER_ROUTES) {
      const p = r.method === "GET" && r.path === "/v1/models/" ? "/v1/models/m" : path(r.path);
      if (r.auth === "none") {
        expect((await send(s.routerUrl, r.method, p)).status).toBe(200);
        checked.push(`router ${r.method} ${p}`);
        continue;
      }
      const right = r.auth === "admin" ? s.adminToken : clientKey;
      const wrong = r.auth === "admin" ? [clientKey, s.joinToken] : [s.adminToken, s.joinToken];
      for (const token of [undefined, "sk-llmgw-guess", ...wrong]) {
        const res = await send(s.routerUrl, r.method, p, token);
        expect({ route: `${r.method} ${p}`, status: res.status }).toEqual({ route: `${r.method} ${p}`, status: 401 });
        const body = (await res.json()) as { error: { code: string } };
        expect(body.error.code).toBe("invalid_api_key");
      }
      expect((await send(s.routerUrl, r.method, p, right)).status).not.toBe(401);
      checked.push(`router ${r.method} ${p}`);
    }
  });

  test("with API keys off, /v1/* is open but /metrics still needs the admin token", async () => {
    expect((await send(open.routerUrl, "GET", "/v1/models")).status).toBe(200);
    expect((await send(open.routerUrl, "GET", "/metrics")).status).toBe(401);
    expect((await send(open.routerUrl, "GET", "/metrics", open.joinToken)).status).toBe(401);
    expect((await send(open.routerUrl, "GET", "/metrics", open.adminToken)).status).toBe(200);
  });

  test("a key bound to a pool sees only that pool's models; a revoked key stops working", async () => {
    await s.admin("/api/v1/models/other", { method: "PUT", body: JSON.stringify({ pool: "b", profiles: [{ name: "p", engine: "fake", gpu_class: "H100-80GB" }] }) });
    const k = ((await (await s.admin("/api/v1/keys", { method: "POST", body: JSON.stringify({ name: "pool-b", pool: "b" }) })).json()) as { key: string }).key;
    await s.tick();
    const list = (await (await send(s.routerUrl, "GET", "/v1/models", k)).json()) as { data: { id: string }[] };
    expect(list.data.map((d) => d.id)).toEqual(["other"]);
    const denied = await fetch(`${s.routerUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${k}` }, body: JSON.stringify({ model: "m", messages: [] }) });
    expect(denied.status).toBe(404);
    await s.admin("/api/v1/keys/pool-b", { method: "DELETE" });
    expect((await send(s.routerUrl, "GET", "/v1/models", k)).status).toBe(401);
  });

  test("a key naming models sees and may use only those: any other model is model_not_found", async () => {
    await s.admin("/api/v1/models/m2", { method: "PUT", body: JSON.stringify({ aliases: ["m2-alias"], profiles: [{ name: "p", engine: "fake", gpu_class: "H100-80GB" }] }) });
    const k = ((await (await s.admin("/api/v1/keys", { method: "POST", body: JSON.stringify({ name: "only-m2", models: ["m2-alias"] }) })).json()) as { key: string }).key;
    await s.tick();
    const list = (await (await send(s.routerUrl, "GET", "/v1/models", k)).json()) as { data: { id: string }[] };
    expect(list.data.map((d) => d.id)).toEqual(["m2", "m2-alias"]);
    expect((await send(s.routerUrl, "GET", "/v1/models/m2", k)).status).toBe(200);
    expect((await send(s.routerUrl, "GET", "/v1/models/m", k)).status).toBe(404);
    const denied = await fetch(`${s.routerUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${k}` }, body: JSON.stringify({ model: "m", messages: [] }) });
    expect(denied.status).toBe(404);
    expect(((await denied.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: "model_not_found", message: "The model 'm' does not exist or you do not have access to it" });
    await s.admin("/api/v1/keys/only-m2", { method: "DELETE" });
  });

  test("keys are listed without their secret; a second key of the same name is refused", async () => {
    const list = await (await s.admin("/api/v1/keys")).text();
    expect(list).toContain("team-a");
    expect(list).not.toContain(clientKey);
    expect((await s.peek.apiKeys()).every((k) => k.hash !== clientKey && !k.hash.includes(clientKey))).toBe(true);
    expect((await s.admin("/api/v1/keys", { method: "POST", body: JSON.stringify({ name: "team-a" }) })).status).toBe(409);
  });
});

describe("secrets stay secret", () => {
  test("no token or key appears in any log line", async () => {
    await send(s.adminUrl, "GET", "/api/v1/summary", "wrong-token-for-the-log");
    await send(s.adminUrl, "GET", "/api/v1/summary", s.adminToken);
    expect(lines.length).toBeGreaterThan(5);
    const all = lines.join("");
    for (const secret of [s.adminToken, s.joinToken, clientKey]) expect(all).not.toContain(secret);
    // The redaction itself: a token field or an authorization header logged by mistake is censored.
    const probe: string[] = [];
    const log = pino({ redact: { paths: REDACT_PATHS, censor: "[redacted]" } }, new Writable({ write: (c, _e, cb) => (probe.push(String(c)), cb()) }));
    log.info({ token: "t0ps3cret", req: { headers: { authorization: "Bearer t0ps3cret" } }, admin_token: "t0ps3cret", config: { join_token: "t0ps3cret" } }, "x");
    expect(probe.join("")).not.toContain("t0ps3cret");
  });

  test("the summary and tables carry no secret", async () => {
    const text = (await (await s.admin("/api/v1/summary")).text()) + (await (await s.admin("/api/v1/nodes")).text()) + (await (await s.admin("/api/v1/models")).text());
    for (const secret of [s.adminToken, s.joinToken, clientKey]) expect(text).not.toContain(secret);
  });
});
