// The dashboard's usage page (/ui/usage) and the usage section of a team's page: the ledger's
// hourly rows (GET /api/v1/usage's) over the last 24 hours, 7 or 30 days, per team a chart of
// tokens and requests per hour (and GPU-seconds once any were metered) and a table of its keys ×
// models with their totals. Keys without a team count under "no team". Like the other pages:
// Hono's JSX escapes every string, and the data is sanitised before it is drawn; anchors and
// links are made from the names as stored.

import type { FC } from "hono/jsx";
import type { Teams } from "../control/teams";
import type { UsageViews } from "../control/usage-views";
import { safeDeep } from "../lib/text";
import type { UsageRowView } from "../protocol/views";
import { Chart, type ChartSpan, fmtRate } from "./ui-charts";
import { teamHref } from "./ui-keys";
import { type Flash, Page } from "./ui-pages";
import { Section } from "./ui-view";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** The ranges the page offers (its `?range=`), each with how its charts name it. */
export const USAGE_RANGES = {
  "24h": { ms: DAY, name: "24 hours", span: { label: "24 hours", ticks: ["−24h", "−12h", "now"] } },
  "7d": { ms: 7 * DAY, name: "7 days", span: { label: "7 days", ticks: ["−7d", "−3.5d", "now"] } },
  "30d": { ms: 30 * DAY, name: "30 days", span: { label: "30 days", ticks: ["−30d", "−15d", "now"] } },
} as const satisfies Record<string, { ms: number; name: string; span: ChartSpan }>;
export type UsageRange = keyof typeof USAGE_RANGES;
const RANGES = Object.keys(USAGE_RANGES) as UsageRange[];

/** The range a `?range=` asks for: 24h when absent, undefined when it names none of them. */
export function usageRange(raw: string | undefined): UsageRange | undefined {
  if (raw === undefined || raw === "") return "24h";
  return Object.hasOwn(USAGE_RANGES, raw) ? (raw as UsageRange) : undefined;
}

export const usageHref = (range: UsageRange, anchor?: string) => `/ui/usage?range=${range}${anchor === undefined ? "" : `#${anchor}`}`;

/** What a ledger row counts that the page adds up. */
export interface UsageTotals {
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  errors: number;
  aborted: number;
  gpu_seconds: number;
}
const TOTALS = ["requests", "prompt_tokens", "completion_tokens", "cached_tokens", "errors", "aborted", "gpu_seconds"] as const;
const zero = (): UsageTotals => ({ requests: 0, prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0, errors: 0, aborted: 0, gpu_seconds: 0 });
const add = (to: UsageTotals, r: UsageTotals) => {
  for (const f of TOTALS) to[f] += r[f];
};

export type KeyModelUsage = UsageTotals & { key: string; model: string };
/** One hour of a team's chart (at: the hour's start). */
export type HourUsage = UsageTotals & { at: number };

/** One team's use over the range: "" is the team of keys without one (and of requests without a key). */
export interface TeamUsage {
  team: string;
  /** The id of its section on the usage page, from the name as stored. */
  anchor: string;
  /** Its page, for a team that exists. */
  href: string | null;
  /** Every hour of the range, oldest first, 0 where nothing was counted. */
  hours: HourUsage[];
  /** Per key and model, the most tokens first. */
  rows: KeyModelUsage[];
  total: UsageTotals;
}

export const teamAnchor = (team: string) => (team === "" ? "no-team" : `team-${encodeURIComponent(team)}`);
const tokens = (u: UsageTotals) => u.prompt_tokens + u.completion_tokens;

/**
 * The ledger's rows over the range ending `now`, per team: hourly series for the charts and
 * totals per key and model. Teams in name order, "no team" last.
 */
export function teamUsage(rows: readonly UsageRowView[], now: number, rangeMs: number, teams: ReadonlySet<string>): TeamUsage[] {
  const first = Math.floor((now - rangeMs) / HOUR) * HOUR;
  const count = Math.floor(now / HOUR) - first / HOUR + 1;
  const by = new Map<string, { hours: HourUsage[]; cells: Map<string, KeyModelUsage>; total: UsageTotals }>();
  for (const r of rows) {
    let t = by.get(r.team);
    if (t === undefined) {
      t = { hours: Array.from({ length: count }, (_, i) => ({ at: first + i * HOUR, ...zero() })), cells: new Map(), total: zero() };
      by.set(r.team, t);
    }
    // An hour outside the range (a row of another control plane's clock) is drawn at its edge.
    add(t.hours[Math.min(count - 1, Math.max(0, Math.floor((r.hour - first) / HOUR)))]!, r);
    const id = `${r.key}\u0000${r.model}`;
    let cell = t.cells.get(id);
    if (cell === undefined) t.cells.set(id, (cell = { key: r.key, model: r.model, ...zero() }));
    add(cell, r);
    add(t.total, r);
  }
  return [...by.entries()]
    .sort(([a], [b]) => (a === "" ? 1 : b === "" ? -1 : a < b ? -1 : a > b ? 1 : 0))
    .map(([team, t]) => ({
      team,
      anchor: teamAnchor(team),
      href: team !== "" && teams.has(team) ? teamHref(team) : null,
      hours: t.hours,
      rows: [...t.cells.values()].sort((a, b) => tokens(b) - tokens(a) || b.requests - a.requests || (a.key < b.key ? -1 : a.key > b.key ? 1 : a.model < b.model ? -1 : 1)),
      total: t.total,
    }));
}

/** What the dashboard asks of the control plane for usage: the ledger's rows, and which teams exist. */
export interface UsageControl {
  ledger: Pick<UsageViews, "usage">;
  teams: Pick<Teams, "listTeams">;
}

export interface UsagePageData {
  range: UsageRange;
  now: number;
  teams: TeamUsage[];
  /** Teams that used nothing in the range. */
  idle: { name: string; href: string }[];
}

/** The usage page's data, sanitised. */
export async function usagePageData(ctl: UsageControl, range: UsageRange, now: number): Promise<UsagePageData> {
  const [rows, teams] = await Promise.all([ctl.ledger.usage(USAGE_RANGES[range].ms), ctl.teams.listTeams()]);
  const names = new Set(teams.map((t) => t.name));
  const used = teamUsage(rows, now, USAGE_RANGES[range].ms, names);
  const seen = new Set(used.map((t) => t.team));
  const idle = teams.filter((t) => !seen.has(t.name)).map((t) => ({ name: t.name, href: teamHref(t.name) }));
  return safeDeep({ range, now, teams: used, idle });
}

/** One team's last 24 hours for its page (null when it used nothing), sanitised. */
export async function teamUsageData(ctl: Pick<UsageControl, "ledger">, team: string, now: number): Promise<TeamUsage | null> {
  const rows = (await ctl.ledger.usage(DAY)).filter((r) => r.team === team);
  return safeDeep(teamUsage(rows, now, DAY, new Set([team]))[0] ?? null);
}

// ---- markup ---------------------------------------------------------------------------------

const count = (v: number) => Math.round(v).toLocaleString("en-US");
/** A chart's counts, short: whole numbers below 1,000 as they are, a scale's 2.5 as such, then k, M and G (as the limits are written). */
export function fmtCount(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "-";
  if (v < 1000) return Number.isInteger(v) ? String(v) : fmtRate(v);
  for (const [unit, n] of [
    ["G", 1e9],
    ["M", 1e6],
    ["k", 1e3],
  ] as const) {
    // Rounded first, so 999,960 is 1.0M rather than 1000k.
    if (v >= n * 0.9995) return v >= n * 9.995 ? `${Math.round(v / n)}${unit}` : `${(v / n).toFixed(1)}${unit}`;
  }
  return String(v);
}
const gpuHours = (seconds: number) => (seconds === 0 ? "0" : seconds < 36 ? "<0.01" : (seconds / 3600).toFixed(2));

const COLUMNS: readonly { f: (typeof TOTALS)[number]; head: string; field: string; fmt: (v: number) => string }[] = [
  { f: "requests", head: "Requests", field: "requests", fmt: count },
  { f: "prompt_tokens", head: "Prompt", field: "prompt", fmt: count },
  { f: "completion_tokens", head: "Completion", field: "completion", fmt: count },
  { f: "cached_tokens", head: "Cached", field: "cached", fmt: count },
  { f: "errors", head: "Errors", field: "errors", fmt: count },
  { f: "aborted", head: "Aborted", field: "aborted", fmt: count },
  { f: "gpu_seconds", head: "GPU-hours", field: "gpu_hours", fmt: gpuHours },
];

const Cells: FC<{ u: UsageTotals }> = ({ u }) => (
  <>
    {COLUMNS.map((c) => (
      <td class={`num${c.f === "errors" && u.errors > 0 ? " bad" : ""}`} data-field={c.field}>
        {c.fmt(u[c.f])}
      </td>
    ))}
  </>
);

/** A team's keys × models with their totals, and the team's total under them. */
const UsageTable: FC<{ t: TeamUsage }> = ({ t }) => (
  <div class="scroll">
    <table data-testid="usage-table">
      <thead>
        <tr>
          <th>Key</th>
          <th>Model</th>
          {COLUMNS.map((c) => (
            <th class="num">{c.head}</th>
          ))}
        </tr>
      </thead>
      <tbody>
        {t.rows.map((r) => (
          <tr data-testid="usage-row" data-key={r.key} data-model={r.model}>
            <td class="name">{r.key === "" ? <span class="muted">(no key)</span> : r.key}</td>
            <td>{r.model}</td>
            <Cells u={r} />
          </tr>
        ))}
      </tbody>
      <tfoot>
        <tr data-testid="usage-total">
          <td class="strong">Total</td>
          <td />
          <Cells u={t.total} />
        </tr>
      </tfoot>
    </table>
  </div>
);

/** A team's charts over the range: tokens (prompt and completion) and requests (and errors) per hour; GPU-seconds once any were metered. */
export const UsageCharts: FC<{ t: TeamUsage; now: number; range: UsageRange }> = ({ t, now, range }) => {
  const { ms, span } = USAGE_RANGES[range];
  const pts = (f: (h: HourUsage) => number) => t.hours.map((h) => ({ at: h.at, v: f(h) }));
  return (
    <div class="charts">
      <Chart
        id="usage-tokens"
        title="Tokens per hour"
        now={now}
        windowMs={ms}
        span={span}
        fmt={fmtCount}
        series={[
          { key: "prompt", label: "prompt", cls: "s1", points: pts((h) => h.prompt_tokens) },
          { key: "completion", label: "completion", cls: "s2", points: pts((h) => h.completion_tokens) },
        ]}
      />
      <Chart
        id="usage-requests"
        title="Requests per hour"
        now={now}
        windowMs={ms}
        span={span}
        fmt={fmtCount}
        series={[
          { key: "requests", label: "all", cls: "s1", points: pts((h) => h.requests) },
          { key: "errors", label: "failed", cls: "s3", points: pts((h) => h.errors) },
        ]}
      />
      {t.total.gpu_seconds > 0 && (
        <Chart id="usage-gpu" title="GPU-seconds per hour" now={now} windowMs={ms} span={span} fmt={fmtCount} series={[{ key: "gpu", label: "GPU-s", cls: "s4", points: pts((h) => h.gpu_seconds) }]} />
      )}
    </div>
  );
};

const TeamName: FC<{ t: TeamUsage }> = ({ t }) => (t.team === "" ? <span class="muted">no team</span> : t.href === null ? <>{t.team}</> : <a href={t.href}>{t.team}</a>);

const summary = (u: UsageTotals) => `${count(u.requests)} ${u.requests === 1 ? "request" : "requests"} · ${fmtCount(tokens(u))} tokens`;

const TeamSection: FC<{ t: TeamUsage; now: number; range: UsageRange }> = ({ t, now, range }) => (
  <section class="panel" id={t.anchor} data-testid="usage-team" data-team={t.team} aria-labelledby={`h-${t.anchor}`}>
    <h2 id={`h-${t.anchor}`}>
      <TeamName t={t} />
      <small data-field="summary">{summary(t.total)}</small>
    </h2>
    <UsageCharts t={t} now={now} range={range} />
    <h3>By key and model</h3>
    <UsageTable t={t} />
  </section>
);

const RangeNav: FC<{ range: UsageRange }> = ({ range }) => (
  <div class="updated">
    <span>per hour, UTC; the current hour so far</span>
    <nav class="nav" aria-label="range" data-testid="usage-range">
      {RANGES.map((r) => (
        <a href={usageHref(r)} data-range={r} aria-current={r === range ? "page" : undefined}>
          {r}
        </a>
      ))}
    </nav>
  </div>
);

/** Nothing in the range: how use gets recorded, where else it is read, and the longer ranges. */
const Empty: FC<{ range: UsageRange }> = ({ range }) => (
  <section class="panel" data-testid="usage-empty">
    <p class="empty">No usage recorded in the last {USAGE_RANGES[range].name}.</p>
    <p class="hint">
      The router counts every inference request per team, key, model and hour: requests, prompt, completion and cached tokens, errors, aborted streams and, once metered, GPU-seconds. Each control plane adds its router's counts to the store once a tick, so a request shows here seconds after it ends. Give each client its own key (
      <code>llmgw keys create NAME --team TEAM</code>) to see its use under its team; requests with a key outside any team, or with no key, count under "no team". The same figures:{" "}
      <code>llmgw usage</code> and <code>GET /api/v1/usage</code>.
    </p>
    {range !== "30d" && (
      <p class="hint">
        Earlier use: <a href={usageHref("30d")}>the last 30 days</a>.
      </p>
    )}
  </section>
);

export const UsagePage: FC<{ nonce: string; csrf?: string; flash?: Flash; d: UsagePageData }> = ({ nonce, csrf, flash, d }) => (
  <Page nonce={nonce} title="Usage" csrf={csrf} flash={flash} here="usage">
    <h1 class="title">Usage</h1>
    <RangeNav range={d.range} />
    {d.teams.length === 0 ? <Empty range={d.range} /> : d.teams.map((t) => <TeamSection t={t} now={d.now} range={d.range} />)}
    {d.idle.length > 0 && (
      <p class="muted" data-testid="usage-idle">
        No use in the last {USAGE_RANGES[d.range].name}:{" "}
        {d.idle.map((t, i) => (
          <>
            {i > 0 && ", "}
            <a href={t.href}>{t.name}</a>
          </>
        ))}
      </p>
    )}
  </Page>
);

/** A team's page's usage: its last 24 hours charted, and the way to the usage page's table of its keys and models. */
export const TeamUsageSection: FC<{ t: TeamUsage | null; now: number; anchor: string }> = ({ t, now, anchor }) => (
  <Section id="team-usage" title="Usage" note={t === null ? "last 24 hours" : `last 24 hours: ${summary(t.total)}`}>
    {t === null ? <p class="empty">No usage in the last 24 hours.</p> : <UsageCharts t={t} now={now} range="24h" />}
    <p class="hint">
      <a href={usageHref("24h", anchor)} data-testid="team-usage-link">
        Per key and model, and the last 7 or 30 days, on the usage page
      </a>
    </p>
  </Section>
);
