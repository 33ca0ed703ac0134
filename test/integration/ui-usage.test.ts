// The dashboard's usage page over HTTP against a real head node, its ledger seeded through the
// store: linked from the navigation; before anything is counted, an empty state that says how
// use gets recorded; then per team (keys without one under "no team") an SVG chart of tokens
// and of requests per hour (and of GPU-seconds once metered) and a table of keys × models with
// their totals; the range selector (24h, 7d, 30d; an unknown one is a 400 showing 24h); a team's
// page with its last 24 hours charted and a link to its section; and a team's and a key's name
// with markup and control characters shown escaped and sanitised.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { UI_COOKIE } from "../../src/api/ui";
import type { UsageRow } from "../../src/protocol/routing";
import { type TestServer, testServer } from "../helpers/server";
import { usageRow } from "../helpers/usage-row";

let s: TestServer;
let cookie: string;

const HOUR = 3_600_000;
// Written past the admin API, which refuses such names: what a store shared with an older or a
// broken release may hold.
const HOSTILE_TEAM = "evil\u001b[2J\u202e<script>alert(1)</script>";
const HOSTILE_KEY = "k\u0007ey<img src=x onerror=alert(2)>";

const json = (body: unknown) => ({ method: "POST", body: JSON.stringify(body) });
const row = (over: Partial<UsageRow> = {}): UsageRow => usageRow({ team: "ml", key: "trainer", model: "llama", prompt_tokens: 10, completion_tokens: 5, ...over });

beforeAll(async () => {
  s = await testServer();
  expect((await s.admin("/api/v1/teams", json({ name: "ml" }))).status).toBe(201);
  expect((await s.admin("/api/v1/teams", json({ name: "web" }))).status).toBe(201);
  expect((await s.admin("/api/v1/keys", json({ name: "trainer", team: "ml" }))).status).toBe(201);
  expect((await s.admin("/api/v1/keys", json({ name: "notebook", team: "ml" }))).status).toBe(201);
  expect((await s.admin("/api/v1/keys", json({ name: "loner" }))).status).toBe(201);
  const now = s.clock.now();
  expect(await s.parts.image.createTeam({ name: HOSTILE_TEAM, createdAt: now, updatedAt: now, limits: {} })).toBe(true);
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

/** Each team's section on the usage page, by its data-team. */
function sections(html: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of html.matchAll(/<section class="panel" id="[^"]*" data-testid="usage-team" data-team="([^"]*)"[^>]*>(.*?)<\/section>/gs)) out.set(m[1]!, m[2]!);
  return out;
}

/** The cells of a table row (matched by the start of its tag) as text, by data-field. */
function cells(html: string, rowStart: string): Record<string, string> {
  const at = html.indexOf(rowStart);
  expect(at).toBeGreaterThanOrEqual(0);
  const tr = html.slice(at, html.indexOf("</tr>", at));
  const out: Record<string, string> = {};
  for (const c of tr.matchAll(/<td[^>]*data-field="([a-z_]+)"[^>]*>(.*?)<\/td>/gs)) out[c[1]!] = c[2]!.replace(/<[^>]+>/g, "").trim();
  return out;
}

describe("an empty ledger", () => {
  test("the usage page, in the navigation, says nothing was recorded and how use gets recorded", async () => {
    expect((await get("/ui")).html).toContain('href="/ui/usage" data-testid="nav-usage"');
    const p = await get("/ui/usage");
    expect(p.status).toBe(200);
    expect(p.html).toContain('aria-current="page">Usage</a>');
    expect(p.html).toContain('data-testid="usage-empty"');
    expect(p.html).toContain("No usage recorded in the last 24 hours.");
    expect(p.html).toContain("<code>llmgw keys create NAME --team TEAM</code>");
    expect(p.html).toContain("<code>llmgw usage</code>");
    expect(sections(p.html).size).toBe(0);
    expect(p.html).not.toContain("<svg");
    // Teams that exist are named as having used nothing.
    expect(p.html).toMatch(/data-testid="usage-idle">.*<a href="\/ui\/teams\/ml">ml<\/a>, <a href="\/ui\/teams\/web">web<\/a>/s);
    const team = await get("/ui/teams/ml");
    expect(team.html).toContain('data-testid="section-team-usage"');
    expect(team.html).toContain("No usage in the last 24 hours.");
  });
});

describe("with usage", () => {
  beforeAll(async () => {
    const now = s.clock.now();
    const h = now - (now % HOUR);
    await s.parts.image.addUsage([
      row({ hour: h, requests: 3, prompt_tokens: 3000, completion_tokens: 1200, cached_tokens: 500, errors: 1, errors_5xx: 1, aborted: 1, gpu_seconds: 7200 }),
      row({ hour: h - 2 * HOUR, model: "qwen", requests: 2, prompt_tokens: 20, completion_tokens: 8 }),
      row({ hour: h - 5 * HOUR, key: "notebook", requests: 4, prompt_tokens: 400, completion_tokens: 40 }),
      row({ hour: h - 3 * 24 * HOUR, requests: 10, prompt_tokens: 100_000, completion_tokens: 1 }),
      row({ hour: h - HOUR, team: "", key: "loner", requests: 5, prompt_tokens: 50, completion_tokens: 25 }),
      row({ hour: h, team: "", key: "", requests: 1, prompt_tokens: 7, completion_tokens: 3 }),
      row({ hour: h, team: HOSTILE_TEAM, key: HOSTILE_KEY, requests: 1, prompt_tokens: 1, completion_tokens: 1 }),
    ]);
  });

  test("a chart per team, keys without a team under \"no team\", and a table of keys × models with the totals", async () => {
    const p = await get("/ui/usage");
    expect(p.status).toBe(200);
    expect(p.html).not.toContain('data-testid="usage-empty"');
    const teams = sections(p.html);
    // In name order, "no team" last.
    expect([...teams.keys()]).toEqual(["evil\\x1b[2J\\u202e&lt;script&gt;alert(1)&lt;/script&gt;", "ml", ""]);
    const ml = teams.get("ml")!;
    expect(ml).toContain('<a href="/ui/teams/ml">ml</a>');
    expect(ml).toContain("9 requests · 4.7k tokens");
    // Tokens and requests per hour, and GPU-seconds since some were metered: an SVG each.
    expect([...ml.matchAll(/data-chart="([^"]+)"/g)].map((m) => m[1])).toEqual(["usage-tokens", "usage-requests", "usage-gpu"]);
    expect(ml.match(/<svg /g)!.length).toBe(3);
    expect(ml).toContain('aria-label="Tokens per hour, last 24 hours: prompt total 3.4k, completion total 1.2k;');
    expect(ml).toMatch(/<b data-field="total-prompt">3\.4k<\/b>/);
    expect(ml).toContain('aria-label="Requests per hour, last 24 hours: all total 9, failed total 1; scale 0 to 5"');
    expect(ml).toContain("<span>−24h</span>");
    // The keys × models, the most tokens first, then the team's total.
    expect([...ml.matchAll(/data-testid="usage-row" data-key="([^"]*)" data-model="([^"]*)"/g)].map((m) => `${m[1]}/${m[2]}`)).toEqual(["trainer/llama", "notebook/llama", "trainer/qwen"]);
    expect(cells(ml, '<tr data-testid="usage-row" data-key="trainer" data-model="llama"')).toEqual({
      requests: "3",
      prompt: "3,000",
      completion: "1,200",
      cached: "500",
      errors: "1",
      aborted: "1",
      gpu_hours: "2.00",
    });
    expect(cells(ml, '<tr data-testid="usage-total"')).toEqual({ requests: "9", prompt: "3,420", completion: "1,248", cached: "500", errors: "1", aborted: "1", gpu_hours: "2.00" });
    const none = teams.get("")!;
    expect(none).toContain('<span class="muted">no team</span>');
    expect(none.match(/<svg /g)!.length).toBe(2);
    expect(none).toContain('data-testid="usage-row" data-key="loner" data-model="llama"');
    expect(none).toContain('<td class="name"><span class="muted">(no key)</span></td>');
    expect(cells(none, '<tr data-testid="usage-total"')).toMatchObject({ requests: "6", prompt: "57", completion: "28", gpu_hours: "0" });
    // A team with no use in the range is named, not charted.
    expect(p.html).toMatch(/data-testid="usage-idle">.*<a href="\/ui\/teams\/web">web<\/a>/s);
  });

  test("the range selector: 24h by default, 7d and 30d take in older hours, an unknown range is a 400 showing 24h", async () => {
    const day = await get("/ui/usage");
    const nav = /<nav class="nav" aria-label="range" data-testid="usage-range">(.*?)<\/nav>/s.exec(day.html)![1]!;
    expect([...nav.matchAll(/href="([^"]+)" data-range="([^"]+)"( aria-current="page")?/g)].map((m) => [m[1], m[2], Boolean(m[3])])).toEqual([
      ["/ui/usage?range=24h", "24h", true],
      ["/ui/usage?range=7d", "7d", false],
      ["/ui/usage?range=30d", "30d", false],
    ]);
    for (const range of ["7d", "30d"]) {
      const p = await get(`/ui/usage?range=${range}`);
      expect(p.status).toBe(200);
      expect(p.html).toContain(`data-range="${range}" aria-current="page"`);
      const ml = sections(p.html).get("ml")!;
      expect(cells(ml, '<tr data-testid="usage-total"')).toMatchObject({ requests: "19", prompt: "103,420" });
      expect(ml).toContain(`<span>−${range}</span>`);
    }
    const bad = await get("/ui/usage?range=yesterday%3Cb%3E");
    expect(bad.status).toBe(400);
    expect(bad.html).toContain('data-testid="flash" data-tone="bad"');
    expect(bad.html).toContain("range &quot;yesterday&lt;b&gt;&quot; is not one of 24h, 7d, 30d");
    expect(bad.html).toContain('data-range="24h" aria-current="page"');
  });

  test("a team's page charts its last 24 hours and links to its section of the usage page", async () => {
    const p = await get("/ui/teams/ml");
    expect(p.status).toBe(200);
    const section = /data-testid="section-team-usage"(.*?)<\/section>/s.exec(p.html)![1]!;
    expect([...section.matchAll(/data-chart="([^"]+)"/g)].map((m) => m[1])).toEqual(["usage-tokens", "usage-requests", "usage-gpu"]);
    expect(section).toContain("last 24 hours: 9 requests · 4.7k tokens");
    expect(section).toContain('href="/ui/usage?range=24h#team-ml" data-testid="team-usage-link"');
    expect((await get("/ui/usage")).html).toContain('<section class="panel" id="team-ml" data-testid="usage-team" data-team="ml"');
    // Another team's use is not this one's.
    const web = await get("/ui/teams/web");
    expect(web.html).toContain("No usage in the last 24 hours.");
  });

  test("a team's and a key's name with markup and control characters are shown escaped and sanitised; its anchor and link are made from the name as stored", async () => {
    const anchor = `team-${encodeURIComponent(HOSTILE_TEAM)}`;
    const pages = [await get("/ui/usage"), await get(`/ui/teams/${encodeURIComponent(HOSTILE_TEAM)}`)];
    expect(pages.map((p) => p.status)).toEqual([200, 200]);
    for (const { html } of pages) {
      for (const raw of ["\u001b", "\u202e", "\u0007", "<script>alert", "<img src=x"]) expect(html).not.toContain(raw);
    }
    const usage = pages[0]!.html;
    expect(usage).toContain(`id="${anchor}"`);
    expect(usage).toContain(`<a href="/ui/teams/${encodeURIComponent(HOSTILE_TEAM)}">evil\\x1b[2J\\u202e&lt;script&gt;alert(1)&lt;/script&gt;</a>`);
    expect(usage).toContain('<td class="name">k\\x07ey&lt;img src=x onerror=alert(2)&gt;</td>');
    expect(pages[1]!.html).toContain(`href="/ui/usage?range=24h#${anchor}"`);
  });

  test("signed in by bearer header too; without a session, the sign-in form", async () => {
    const bearer = await fetch(`${s.adminUrl}/ui/usage?range=7d`, { headers: { authorization: `Bearer ${s.adminToken}` } });
    expect(bearer.status).toBe(200);
    expect(await bearer.text()).toContain('data-testid="usage-team" data-team="ml"');
    const anon = await fetch(`${s.adminUrl}/ui/usage`);
    expect(anon.status).toBe(401);
    expect(await anon.text()).not.toContain("usage-team");
  });
});
