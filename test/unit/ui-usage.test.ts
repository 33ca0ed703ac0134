// The usage page's arithmetic (ui-usage.tsx): the ledger's hourly rows per team as an hourly
// series with every hour of the range (0 where nothing was counted) and totals per key and
// model; the range a `?range=` names; and a chart over days captioned with its totals.

import { describe, expect, test } from "bun:test";
import { Chart } from "../../src/api/ui-charts";
import { USAGE_RANGES, fmtCount, teamAnchor, teamUsage, usageRange } from "../../src/api/ui-usage";
import type { UsageRowView } from "../../src/protocol/views";
import { usageRow } from "../helpers/usage-row";

const HOUR = 3_600_000;
const NOW = Date.UTC(2026, 0, 1, 12, 30);
const H = NOW - (NOW % HOUR);

const row = (over: Partial<UsageRowView> = {}): UsageRowView => usageRow({ team: "ml", key: "a", hour: H, prompt_tokens: 10, completion_tokens: 5, cached_tokens: 1, ...over });

describe("teamUsage", () => {
  test("every hour of the range per team, oldest first, with the rows of each hour added up", () => {
    const [ml] = teamUsage([row({}), row({ key: "b" }), row({ hour: H - 3 * HOUR, requests: 4 })], NOW, 24 * HOUR, new Set(["ml"]));
    // 24 hours back from 12:30 starts in the 12:00 hour of the day before: 25 hours drawn.
    expect(ml!.hours.length).toBe(25);
    expect(ml!.hours[0]!.at).toBe(H - 24 * HOUR);
    expect(ml!.hours.at(-1)!).toMatchObject({ at: H, requests: 2, prompt_tokens: 20 });
    expect(ml!.hours.at(-4)!).toMatchObject({ at: H - 3 * HOUR, requests: 4 });
    expect(ml!.hours.filter((h) => h.requests > 0).length).toBe(2);
    expect(ml!.total).toEqual({ requests: 6, prompt_tokens: 30, completion_tokens: 15, cached_tokens: 3, errors: 0, aborted: 0, gpu_seconds: 0 });
  });

  test("per key and model, the most tokens first; teams in name order, the keys without one last; links only to teams that exist", () => {
    const teams = teamUsage(
      [row({ team: "", key: "" }), row({ team: "web", prompt_tokens: 1 }), row({ model: "x" }), row({ key: "b", prompt_tokens: 100 }), row({ team: "gone" })],
      NOW,
      7 * 24 * HOUR,
      new Set(["ml", "web"]),
    );
    expect(teams.map((t) => [t.team, t.href, t.anchor])).toEqual([
      ["gone", null, "team-gone"],
      ["ml", "/ui/teams/ml", "team-ml"],
      ["web", "/ui/teams/web", "team-web"],
      ["", null, "no-team"],
    ]);
    expect(teams[1]!.rows.map((r) => `${r.key}/${r.model}`)).toEqual(["b/m", "a/x"]);
    expect(teams[1]!.hours.length).toBe(7 * 24 + 1);
  });

  test("a row from outside the range (another clock's hour) is drawn at the range's edge and still counted", () => {
    const [ml] = teamUsage([row({ hour: H + 2 * HOUR }), row({ hour: H - 40 * HOUR })], NOW, 24 * HOUR, new Set());
    expect(ml!.hours.at(-1)!.requests).toBe(1);
    expect(ml!.hours[0]!.requests).toBe(1);
    expect(ml!.total.requests).toBe(2);
  });

  test("no rows, no teams", () => {
    expect(teamUsage([], NOW, 24 * HOUR, new Set(["ml"]))).toEqual([]);
  });

  test("an anchor is made from the name as stored, percent-encoded", () => {
    expect(teamAnchor('a b"<x>')).toBe("team-a%20b%22%3Cx%3E");
  });
});

test("usageRange: 24h when absent; 24h, 7d, 30d; nothing else", () => {
  expect([undefined, "", "24h", "7d", "30d", "1h", "toString", "__proto__"].map(usageRange)).toEqual(["24h", "24h", "24h", "7d", "30d", undefined, undefined, undefined]);
});

test("fmtCount: whole numbers as they are below 1,000, then k, M and G, rounded before the unit is chosen", () => {
  expect([0, 7, 999, 2.5, 1000, 1234, 9999, 12_345, 999_960, 1_512_700, 42_000_000, 3.2e9, null].map(fmtCount)).toEqual([
    "0",
    "7",
    "999",
    "2.5",
    "1.0k",
    "1.2k",
    "10k",
    "12k",
    "1.0M",
    "1.5M",
    "42M",
    "3.2G",
    "-",
  ]);
});

test("a chart over days: its caption totals each series over the window, its axis names the span", () => {
  const points = [0, 1, 2].map((i) => ({ at: NOW - (2 - i) * HOUR, v: i + 1 }));
  const html = String(Chart({ id: "c", title: "Requests", now: NOW, windowMs: USAGE_RANGES["7d"].ms, span: USAGE_RANGES["7d"].span, series: [{ key: "r", label: "all", cls: "s1", points }] }));
  expect(html).toContain('<b data-field="total-r">6.0</b>');
  expect(html).toContain('aria-label="Requests, last 7 days: all total 6.0; scale 0 to 5.0"');
  expect(html).toContain("<span>−7d</span><span>−3.5d</span><span>now</span>");
  // Without a span: the hour's chart as before, its latest value.
  const hour = String(Chart({ id: "c", title: "Requests", now: NOW, windowMs: HOUR, series: [{ key: "r", label: "all", cls: "s1", points }] }));
  expect(hour).toContain('<b data-field="last-r">3.0</b>');
  expect(hour).toContain("<span>−60m</span><span>−30m</span><span>now</span>");
});
