// The dashboard's sessions over HTTP against a real head node with a manual clock: a new
// random cookie on every sign-in, logging out as a POST that needs the session's CSRF token
// and revokes the session server-side, expiry after 1 h idle and 12 h in all, and a GET to
// the logout URL that changes nothing.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ManualScheduler } from "../../src/lib/scheduler";
import { SESSION_MAX, SessionStore } from "../../src/api/sessions";
import { UI_COOKIE } from "../../src/api/ui";
import { SESSION_ABSOLUTE_MS, SESSION_IDLE_MS } from "../../src/api/sessions";
import { type TestServer, testServer } from "../helpers/server";
import { scratchDir } from "../helpers/tmp";

let s: TestServer;
beforeAll(async () => {
  s = await testServer();
});
afterAll(async () => {
  await s.stop();
});

interface Signed {
  cookie: string;
  csrf: string;
  setCookie: string;
}

/** Signs in with the form; the session's cookie and the CSRF token its page carries. */
async function signIn(extraCookie?: string): Promise<Signed> {
  const r = await fetch(`${s.adminUrl}/ui/login`, {
    method: "POST",
    body: new URLSearchParams({ token: s.adminToken }),
    redirect: "manual",
    headers: extraCookie ? { cookie: extraCookie } : {},
  });
  expect(r.status).toBe(303);
  const setCookie = r.headers.get("set-cookie")!;
  const value = new RegExp(`${UI_COOKIE}=([^;]*)`).exec(setCookie)![1]!;
  const cookie = `${UI_COOKIE}=${value}`;
  const page = await fetch(`${s.adminUrl}/ui`, { headers: { cookie } });
  expect(page.status).toBe(200);
  const csrf = /name="csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? "";
  return { cookie, csrf, setCookie };
}

const fragment = async (cookie: string) => (await fetch(`${s.adminUrl}/ui/fragment`, { headers: { cookie } })).status;

function logout(cookie: string, csrf?: string) {
  return fetch(`${s.adminUrl}/ui/logout`, {
    method: "POST",
    headers: { cookie },
    body: new URLSearchParams(csrf === undefined ? {} : { csrf }),
    redirect: "manual",
  });
}

describe("sign-in", () => {
  test("every sign-in gets a new random cookie, not derived from the token, HttpOnly, SameSite=Strict, Path=/ui, 12 h", async () => {
    const a = await signIn();
    const b = await signIn();
    expect(a.cookie).not.toBe(b.cookie);
    expect(a.csrf).not.toBe(b.csrf);
    for (const x of [a, b]) {
      const value = x.cookie.split("=")[1]!;
      // 32 random bytes, base64url.
      expect(value).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(value).not.toContain(s.adminToken);
      expect(x.csrf).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(x.setCookie).toContain("HttpOnly");
      expect(x.setCookie).toContain("SameSite=Strict");
      expect(x.setCookie).toContain("Path=/ui");
      expect(x.setCookie).toContain(`Max-Age=${SESSION_ABSOLUTE_MS / 1000}`);
      // Plain http here: Secure is set only over TLS.
      expect(x.setCookie).not.toContain("Secure");
      expect(await fragment(x.cookie)).toBe(200);
    }
  });

  test("an old sign-in link (/ui?token=…) signs no one in and never echoes the token: the form, its query dropped; signed in, it only redirects to /ui", async () => {
    for (const token of [s.adminToken, "wrong-token-in-link"]) {
      const link = await fetch(`${s.adminUrl}/ui?token=${encodeURIComponent(token)}`, { redirect: "manual" });
      expect(link.status).toBe(401);
      expect(link.headers.get("set-cookie")).toBeNull();
      const page = await link.text();
      expect(page).toContain('data-testid="login-form"');
      expect(page).toContain("no longer sign in");
      expect(page).toContain('history.replaceState(null,"","/ui")');
      expect(page).not.toContain(token);
    }
    const a = await signIn();
    const followed = await fetch(`${s.adminUrl}/ui?token=${encodeURIComponent(s.adminToken)}`, { redirect: "manual", headers: { cookie: a.cookie } });
    expect(followed.status).toBe(303);
    expect(followed.headers.get("location")).toBe("/ui");
    expect(followed.headers.get("set-cookie")).toBeNull();
    expect(await fragment(a.cookie)).toBe(200);
  });

  test("signing in again ends the session the browser held before", async () => {
    const a = await signIn();
    await signIn(a.cookie);
    expect(await fragment(a.cookie)).toBe(401);
  });
});

describe("logout", () => {
  test("a POST with the session's CSRF token revokes the session: the old cookie is refused afterwards", async () => {
    const a = await signIn();
    const other = await signIn();
    const r = await logout(a.cookie, a.csrf);
    expect(r.status).toBe(303);
    expect(r.headers.get("location")).toBe("/ui");
    expect(r.headers.get("set-cookie")).toContain("Max-Age=0");
    // Replaying the cookie (as a copy kept elsewhere would) does not work any more.
    expect(await fragment(a.cookie)).toBe(401);
    expect((await fetch(`${s.adminUrl}/ui`, { headers: { cookie: a.cookie } })).status).toBe(401);
    // Other sessions go on.
    expect(await fragment(other.cookie)).toBe(200);
  });

  test("a POST without the CSRF token, with a wrong one or another session's is 403 and the session lives on", async () => {
    const a = await signIn();
    const b = await signIn();
    for (const csrf of [undefined, "", "wrong", b.csrf, `${a.csrf}x`]) {
      const r = await logout(a.cookie, csrf);
      expect({ csrf, status: r.status }).toEqual({ csrf, status: 403 });
      expect(r.headers.get("set-cookie")).toBeNull();
      expect(await fragment(a.cookie)).toBe(200);
    }
    // A JSON body carries no form field either.
    const json = await fetch(`${s.adminUrl}/ui/logout`, { method: "POST", headers: { cookie: a.cookie, "content-type": "application/json" }, body: JSON.stringify({ csrf: a.csrf }) });
    expect(json.status).toBe(403);
    expect(await fragment(a.cookie)).toBe(200);
  });

  test("GET /ui/logout is 405 and changes nothing", async () => {
    const a = await signIn();
    const r = await fetch(`${s.adminUrl}/ui/logout`, { headers: { cookie: a.cookie }, redirect: "manual" });
    expect(r.status).toBe(405);
    expect(r.headers.get("allow")).toBe("POST");
    expect(r.headers.get("set-cookie")).toBeNull();
    expect(await fragment(a.cookie)).toBe(200);
  });

  test("a script signed in by bearer header gets no logout form (it has no session)", async () => {
    const page = await fetch(`${s.adminUrl}/ui`, { headers: { authorization: `Bearer ${s.adminToken}` } });
    expect(page.status).toBe(200);
    expect(await page.text()).not.toContain('name="csrf"');
    const out = await fetch(`${s.adminUrl}/ui/logout`, { method: "POST", headers: { authorization: `Bearer ${s.adminToken}` } });
    expect(out.status).toBe(400);
    // Not signed in at all: GET and POST /ui/logout are the sign-in form, like every /ui route.
    expect((await fetch(`${s.adminUrl}/ui/logout`)).status).toBe(401);
    expect((await fetch(`${s.adminUrl}/ui/logout`, { method: "POST" })).status).toBe(401);
  });
});

describe("expiry, by the injected clock", () => {
  test("a session unused for an hour is refused", async () => {
    const a = await signIn();
    s.clock.advance(SESSION_IDLE_MS - 1000);
    expect(await fragment(a.cookie)).toBe(200);
    s.clock.advance(SESSION_IDLE_MS - 1000);
    expect(await fragment(a.cookie)).toBe(200);
    s.clock.advance(SESSION_IDLE_MS);
    expect(await fragment(a.cookie)).toBe(401);
    // Refused for good, even if time went back.
    s.clock.advance(-SESSION_IDLE_MS);
    expect(await fragment(a.cookie)).toBe(401);
  });

  test("a session in use all along still ends 12 h after sign-in", async () => {
    const a = await signIn();
    const step = SESSION_IDLE_MS / 2;
    for (let t = step; t < SESSION_ABSOLUTE_MS; t += step) {
      s.clock.advance(step);
      expect({ t, status: await fragment(a.cookie) }).toEqual({ t, status: 200 });
    }
    s.clock.advance(step);
    expect(await fragment(a.cookie)).toBe(401);
    expect((await fetch(`${s.adminUrl}/ui`, { headers: { cookie: a.cookie } })).status).toBe(401);
  });
});

describe("transport and bounds", () => {
  test("over TLS the cookie is Secure", async () => {
    const dir = scratchDir("llmgw-ui-tls-");
    try {
      const cert = join(dir, "c.pem");
      const key = join(dir, "c.key");
      const gen = Bun.spawnSync(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1", "-keyout", key, "-out", cert], { stderr: "pipe" });
      expect(gen.exitCode).toBe(0);
      const t = await testServer({ tls_cert: cert, tls_key: key });
      try {
        const r = await fetch(`${t.adminUrl}/ui/login`, { method: "POST", body: new URLSearchParams({ token: t.adminToken }), redirect: "manual", tls: { ca: readFileSync(cert, "utf8") } });
        expect(r.status).toBe(303);
        expect(r.headers.get("set-cookie")).toContain("Secure");
      } finally {
        await t.stop();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("the store keeps at most SESSION_MAX sessions, ending the oldest, and forgets expired ones", () => {
    const clock = new ManualScheduler(0);
    const store = new SessionStore({ clock, max: 3 });
    const ids = [store.create().id, store.create().id, store.create().id];
    const fourth = store.create().id;
    expect(store.size).toBe(3);
    expect(store.touch(ids[0])).toBeUndefined();
    expect(store.touch(ids[1])).toBeDefined();
    expect(store.touch(fourth)).toBeDefined();
    clock.advance(store.idleMs);
    store.create();
    expect(store.size).toBe(1);
    expect(SESSION_MAX).toBeGreaterThanOrEqual(100);
  });
});
