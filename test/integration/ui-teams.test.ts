// The dashboard's teams and keys over HTTP against a real head node: the teams page lists each
// team with its priority, its limits with their use in front ("0/3", as `teams list` shows them)
// and its keys; a team's page shows its limits and its keys; an unknown team is the 404 page; the
// keys page shows each key's team, tier, limits with use and expiry (or that it expired); and names that arrive in
// the store with control characters, bidi overrides and markup are shown escaped and sanitised,
// their links made from the names as stored.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { UI_COOKIE } from "../../src/api/ui";
import { type TestServer, testServer } from "../helpers/server";

let s: TestServer;
let cookie: string;

// Written past the admin API, which refuses such names: what a store shared with an older or a
// broken release may hold.
const HOSTILE_TEAM = "evil\u001b[2J\u202e<script>alert(1)</script>";
const HOSTILE_KEY = "k\u0007ey\u2066<img src=x onerror=alert(2)>";

const json = (body: unknown) => ({ method: "POST", body: JSON.stringify(body) });

beforeAll(async () => {
  s = await testServer();
  expect((await s.admin("/api/v1/teams", json({ name: "ml", rpm: 3, tpm: 1000, priority: "batch", budget_tokens: 5_000_000, budget_period: "week" }))).status).toBe(201);
  expect((await s.admin("/api/v1/teams", json({ name: "web" }))).status).toBe(201);
  expect((await s.admin("/api/v1/keys", json({ name: "trainer", team: "ml", rpm: 5, models: ["llama"], expires: "30d" }))).status).toBe(201);
  expect((await s.admin("/api/v1/keys", json({ name: "notebook", team: "ml", max_concurrent: 2 }))).status).toBe(201);
  expect((await s.admin("/api/v1/keys", json({ name: "site", team: "web", pool: "prod" }))).status).toBe(201);
  expect((await s.admin("/api/v1/keys", json({ name: "loner" }))).status).toBe(201);
  const now = s.clock.now();
  expect(await s.parts.image.createTeam({ name: HOSTILE_TEAM, createdAt: now, updatedAt: now, limits: { rpm: 7 } })).toBe(true);
  expect(await s.parts.image.createApiKey({ name: HOSTILE_KEY, hash: "0".repeat(64), pool: null, createdAt: now, team: HOSTILE_TEAM })).toBe(true);
  // A key past its expiry, as the store keeps it.
  expect(await s.parts.image.createApiKey({ name: "lapsed", hash: "1".repeat(64), pool: null, createdAt: now - 7_200_000, expiresAt: now - 3_600_000 })).toBe(true);
  const r = await fetch(`${s.adminUrl}/ui/login`, { method: "POST", body: new URLSearchParams({ token: s.adminToken }), redirect: "manual" });
  expect(r.status).toBe(303);
  cookie = `${UI_COOKIE}=${new RegExp(`${UI_COOKIE}=([^;]*)`).exec(r.headers.get("set-cookie")!)![1]!}`;
});
afterAll(async () => {
  await s.stop();
});

const get = async (path: string) => {
  const r = await fetch(`${s.adminUrl}${path}`, { headers: { cookie } });
  return { status: r.status, html: await r.text() };
};

/** The cells of the table row with this data attribute, as text (tags dropped, entities kept). */
function row(html: string, attr: string, value: string): Record<string, string> {
  const m = new RegExp(`<tr data-testid="[a-z]+-row" ${attr}="${value}">(.*?)</tr>`, "s").exec(html);
  expect(m).not.toBeNull();
  const cells: Record<string, string> = {};
  for (const c of m![1]!.matchAll(/<td[^>]*data-field="([a-z]+)"[^>]*>(.*?)<\/td>/gs)) cells[c[1]!] = c[2]!.replace(/<[^>]+>/g, "").trim();
  return cells;
}

describe("teams", () => {
  test("the teams page lists each team with its priority, its limits with their use and its keys, linked from the navigation", async () => {
    const overview = await get("/ui");
    expect(overview.html).toContain('href="/ui/teams" data-testid="nav-teams"');
    const p = await get("/ui/teams");
    expect(p.status).toBe(200);
    expect(p.html).toContain('aria-current="page">Teams</a>');
    expect(p.html).toContain('href="/ui/teams/ml"');
    expect(row(p.html, "data-team", "ml")).toEqual({ priority: "batch", rpm: "0/3", tpm: "0/1000", concurrent: "-", budget: "0/5M tok/week", keys: "notebook, trainer" });
    expect(row(p.html, "data-team", "web")).toEqual({ priority: "interactive", rpm: "-", tpm: "-", concurrent: "-", budget: "-", keys: "site" });
  });

  test("a team's page shows its limits with their use and a table of its keys, and no other team's", async () => {
    const p = await get("/ui/teams/ml");
    expect(p.status).toBe(200);
    expect(p.html).toContain('data-testid="team-title" data-team="ml"');
    expect(p.html).toContain('<dd data-field="rpm">0/3</dd>');
    expect(p.html).toContain('<dd data-field="budget">0/5M tok/week</dd>');
    expect(p.html).toContain('<dd data-field="priority">batch</dd>');
    expect([...p.html.matchAll(/data-testid="key-row" data-key="([^"]+)"/g)].map((m) => m[1]).sort()).toEqual(["notebook", "trainer"]);
    expect(row(p.html, "data-key", "trainer")).toMatchObject({ tier: "(team)", rpm: "0/5", tpm: "-", concurrent: "-", models: "llama", expires: "2026-01-31 12:00" });
    expect(row(p.html, "data-key", "notebook")).toMatchObject({ rpm: "-", concurrent: "0/2", models: "all", expires: "never" });
  });

  test("an unknown team is the 404 page", async () => {
    for (const path of ["/ui/teams/nope", "/ui/teams/..%2Fml"]) {
      const r = await get(path);
      expect({ path, status: r.status }).toEqual({ path, status: 404 });
      expect(r.html).toContain('data-testid="not-found"');
    }
  });
});

describe("keys", () => {
  test("the keys page shows each key's team (linked), tier, limits with their use and expiry", async () => {
    const p = await get("/ui/keys");
    expect(p.status).toBe(200);
    for (const h of ["Team", "Tier", "RPM", "TPM", "Concurrent", "Budget", "Models", "Expires"]) expect(p.html).toContain(`>${h}</th>`);
    expect(p.html).toContain('<td data-field="team"><a href="/ui/teams/ml">ml</a></td>');
    expect(row(p.html, "data-key", "trainer")).toMatchObject({ team: "ml", tier: "(team)", rpm: "0/5", expires: "2026-01-31 12:00" });
    expect(row(p.html, "data-key", "site")).toMatchObject({ team: "web", rpm: "-", expires: "never" });
    expect(row(p.html, "data-key", "loner")).toMatchObject({ team: "-", tier: "interactive" });
    expect(row(p.html, "data-key", "lapsed").expires).toBe("expired");
  });
});

describe("hostile names", () => {
  test("a team's and a key's name with control characters, bidi overrides and markup are shown escaped and sanitised", async () => {
    const pages = [await get("/ui/teams"), await get("/ui/keys"), await get(`/ui/teams/${encodeURIComponent(HOSTILE_TEAM)}`)];
    expect(pages.map((p) => p.status)).toEqual([200, 200, 200]);
    for (const { html } of pages) {
      expect(html).toContain("evil\\x1b[2J\\u202e&lt;script&gt;alert(1)&lt;/script&gt;");
      for (const raw of ["\u001b", "\u202e", "\u0007", "\u2066", "<script>alert", "<img src=x"]) expect(html).not.toContain(raw);
    }
    expect(pages[1]!.html).toContain("k\\x07ey\\u2066&lt;img src=x onerror=alert(2)&gt;");
    expect(pages[2]!.html).toContain("k\\x07ey\\u2066&lt;img src=x onerror=alert(2)&gt;");

    // The links are made from the names as stored: the team's leads to its page, the key's revoke form revokes it.
    const href = /<tr data-testid="team-row" data-team="evil[^"]*"><td class="name"><a href="([^"]+)"/.exec(pages[0]!.html)![1]!;
    expect(href).toBe(`/ui/teams/${encodeURIComponent(HOSTILE_TEAM)}`);
    expect((await get(href)).html).toContain('data-testid="team-title" data-team="evil\\x1b[2J');
    const keysPage = pages[1]!.html;
    expect(keysPage).toContain(`<a href="${href}">evil`);
    const csrf = /name="csrf" value="([^"]+)"/.exec(keysPage)![1]!;
    const revoke = `/ui/keys/${encodeURIComponent(HOSTILE_KEY)}/revoke`;
    expect(keysPage).toContain(`action="${revoke}"`);
    const r = await fetch(`${s.adminUrl}${revoke}`, { method: "POST", headers: { cookie }, body: new URLSearchParams({ csrf, confirm: "yes" }), redirect: "manual" });
    expect(r.status).toBe(303);
    expect((await s.parts.image.listApiKeys()).map((k) => k.name)).not.toContain(HOSTILE_KEY);
  });
});
