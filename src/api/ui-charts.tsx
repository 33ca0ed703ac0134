// The dashboard's charts: the last hour from history.ts drawn as inline SVG on the server. No
// script and nothing fetched: lines are polylines in a viewBox stretched to the box's width,
// their colours come from classes in the page's one stylesheet (the CSP allows no style
// attribute), and the scale (the top value, 0, the hour's start and now) is HTML beside the
// SVG, so it stays readable however wide the box is.

import type { FC } from "hono/jsx";
import type { GpuPoint, ModelPoint } from "./history";

const W = 300;
const H = 60;

export interface Series {
  key: string;
  label: string;
  /** A CSS class colouring the line (s1…s4). */
  cls: string;
  points: { at: number; v: number | null }[];
}

/** The smallest of 1, 2, 2.5, 5 × 10^k at or above v (1 for nothing). */
export function niceMax(v: number): number {
  if (!(v > 0) || !Number.isFinite(v)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v * (1 - 1e-9)) return m * p;
  return 10 * p;
}

export function fmtRate(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "-";
  if (v >= 10_000) return `${(v / 1000).toFixed(0)}k`;
  if (v >= 1000) return `${(v / 1000).toFixed(1)}k`;
  if (v >= 10) return v.toFixed(0);
  if (v === 0) return "0";
  return v >= 1 ? v.toFixed(1) : v.toFixed(2);
}

export function fmtMs(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "-";
  return v >= 1000 ? `${(v / 1000).toFixed(v >= 10_000 ? 0 : 1)} s` : `${Math.round(v)} ms`;
}

const fmtCount = (v: number | null | undefined) => (v === null || v === undefined ? "-" : String(Math.round(v)));

/** The SVG's path data: one polyline per run of known values; a lone point is a short dash. */
function runs(points: Series["points"], from: number, windowMs: number, max: number): string[] {
  const out: string[] = [];
  let cur: string[] = [];
  const flush = () => {
    if (cur.length === 1) {
      const [x, y] = cur[0]!.split(",").map(Number) as [number, number];
      cur = [`${Math.max(0, x - 1.5).toFixed(1)},${y}`, `${Math.min(W, x + 1.5).toFixed(1)},${y}`];
    }
    if (cur.length > 0) out.push(cur.join(" "));
    cur = [];
  };
  for (const p of points) {
    if (p.v === null || !Number.isFinite(p.v)) {
      flush();
      continue;
    }
    const x = Math.min(W, Math.max(0, ((p.at - from) / windowMs) * W));
    const y = H - 1 - (Math.min(p.v, max) / max) * (H - 2);
    cur.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  }
  flush();
  return out;
}

/**
 * A chart over a longer window than the hour (the usage page's days): how its span is named and
 * the axis' three ticks; the caption then shows each series' total over the window, not its
 * latest value.
 */
export interface ChartSpan {
  label: string;
  ticks: readonly [string, string, string];
}

/**
 * One chart: a caption with each series' latest value (or, with a span, its total), the lines,
 * and the scale. `max` fixes the top (a class's GPU total); otherwise it is the window's largest
 * value, rounded up.
 */
export const Chart: FC<{ id: string; title: string; series: Series[]; now: number; windowMs: number; fmt?: (v: number | null | undefined) => string; max?: number; compact?: boolean; span?: ChartSpan }> = ({
  id,
  title,
  series,
  now,
  windowMs,
  fmt = fmtRate,
  max,
  compact,
  span,
}) => {
  const peak = Math.max(0, ...series.flatMap((s) => s.points.map((p) => p.v ?? 0)));
  const top = max ?? niceMax(peak);
  const from = now - windowMs;
  const last = (s: Series) => {
    if (span) return s.points.reduce((a, p) => a + (p.v ?? 0), 0);
    for (let i = s.points.length - 1; i >= 0; i--) if (s.points[i]!.v !== null) return s.points[i]!.v;
    return null;
  };
  const minutes = Math.round(windowMs / 60_000);
  const ticks = span?.ticks ?? [`−${minutes}m`, `−${Math.round(windowMs / 120_000)}m`, "now"];
  const known = series.reduce((a, s) => a + s.points.filter((p) => p.v !== null).length, 0);
  const label = `${title}, last ${span?.label ?? `${minutes} minutes`}: ${series.map((s) => `${s.label} ${span ? "total" : "now"} ${fmt(last(s))}`).join(", ")}; scale 0 to ${fmt(top)}`;
  return (
    <figure class={`chart${compact ? " compact" : ""}`} data-testid="chart" data-chart={id} data-points={String(known)} data-peak={String(peak)}>
      <figcaption>
        <span class="t">{title}</span>
        {series.map((s) => (
          <span class={`key ${s.cls}`}>
            <i /> {series.length > 1 ? `${s.label} ` : ""}
            <b data-field={`${span ? "total" : "last"}-${s.key}`}>{fmt(last(s))}</b>
          </span>
        ))}
      </figcaption>
      <div class="plot">
        <span class="ymax" data-field="max">
          {fmt(top)}
        </span>
        <svg viewBox={`0 0 ${W} ${H}`} preserveAspectRatio="none" role="img" aria-label={label}>
          <line class="gl" x1="0" y1="0.5" x2={String(W)} y2="0.5" vector-effect="non-scaling-stroke" />
          <line class="gl" x1="0" y1={String(H / 2)} x2={String(W)} y2={String(H / 2)} vector-effect="non-scaling-stroke" />
          <line class="axis" x1="0" y1={String(H - 0.5)} x2={String(W)} y2={String(H - 0.5)} vector-effect="non-scaling-stroke" />
          {series.map((s) =>
            runs(s.points, from, windowMs, top).map((pts) => <polyline class={`line ${s.cls}`} data-series={s.key} points={pts} vector-effect="non-scaling-stroke" />),
          )}
        </svg>
      </div>
      {!compact && (
        <div class="xaxis" aria-hidden="true">
          <span>{ticks[0]}</span>
          <span>{ticks[1]}</span>
          <span>{ticks[2]}</span>
        </div>
      )}
      {known === 0 && <p class="nodata">no samples yet</p>}
    </figure>
  );
};

const pick = (pts: readonly ModelPoint[], f: (p: ModelPoint) => number | null) => pts.map((p) => ({ at: p.at, v: f(p) }));

/** The four charts of one model: requests (and errors), tokens, TTFT, in flight and held. */
export function modelCharts(pts: readonly ModelPoint[], now: number, w: number, compact = false) {
  return [
    <Chart
      id="rps"
      title="Requests/s"
      compact={compact}
      now={now}
      windowMs={w}
      series={[
        { key: "rps", label: "all", cls: "s1", points: pick(pts, (p) => p.rps) },
        { key: "errors", label: "failed", cls: "s3", points: pick(pts, (p) => p.errors_ps) },
      ]}
    />,
    <Chart id="tokens" title="Tokens/s" compact={compact} now={now} windowMs={w} series={[{ key: "tokens", label: "out", cls: "s2", points: pick(pts, (p) => p.tokens_ps) }]} />,
    <Chart
      id="ttft"
      title="Time to first token"
      compact={compact}
      fmt={fmtMs}
      now={now}
      windowMs={w}
      series={[
        { key: "p50", label: "p50", cls: "s1", points: pick(pts, (p) => p.ttft_p50) },
        { key: "p99", label: "p99", cls: "s4", points: pick(pts, (p) => p.ttft_p99) },
      ]}
    />,
    <Chart
      id="load"
      title="In flight / held"
      compact={compact}
      fmt={fmtCount}
      now={now}
      windowMs={w}
      series={[
        { key: "inflight", label: "in flight", cls: "s2", points: pick(pts, (p) => p.inflight) },
        { key: "queued", label: "held", cls: "s4", points: pick(pts, (p) => p.queued) },
      ]}
    />,
  ];
}

const gpuPick = (pts: readonly GpuPoint[], f: (p: GpuPoint) => number) => pts.map((p) => ({ at: p.at, v: f(p) }));

export function gpuChart(cls: string, pts: readonly GpuPoint[], now: number, windowMs: number) {
  const total = Math.max(1, ...pts.map((p) => p.total));
  return (
    <Chart
      id={`gpu:${cls}`}
      title={cls}
      fmt={fmtCount}
      max={total}
      now={now}
      windowMs={windowMs}
      series={[
        { key: "used", label: "used", cls: "s1", points: gpuPick(pts, (p) => p.used) },
        { key: "unhealthy", label: "unhealthy", cls: "s3", points: gpuPick(pts, (p) => p.unhealthy) },
      ]}
    />
  );
}

/**
 * Each chart spans four rows of its grid (caption, plot, axis, note) as a subgrid, its caption's
 * lines at the bottom of the first: the plots in one row stay level however many lines a
 * neighbour's legend wraps to.
 */
export const CHART_CSS = `
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(240px,1fr));gap:10px 16px}
.chart{margin:0;min-width:0;display:grid;grid-row:span 4;grid-template-rows:subgrid;row-gap:0}
.chart figcaption{display:flex;flex-wrap:wrap;gap:2px 10px;align-items:baseline;align-content:flex-end;font-size:12.5px;margin-bottom:2px}
.chart .t{font-weight:600;margin-right:auto;overflow-wrap:anywhere}
.chart .key{color:var(--muted);white-space:nowrap}.chart .key b{color:var(--fg);font-variant-numeric:tabular-nums}
.chart .key i{display:inline-block;width:10px;height:3px;border-radius:1px;vertical-align:middle}
.key.s1 i{background:var(--used)}.key.s2 i{background:var(--ok)}.key.s3 i{background:var(--bad)}.key.s4 i{background:var(--warn)}
.plot{position:relative;padding-left:46px}
.plot svg{display:block;width:100%;height:60px;background:var(--head);border-radius:3px}
.chart.compact .plot svg{height:32px}
.plot .ymax{position:absolute;left:0;top:-2px;width:42px;white-space:nowrap;text-align:right;font-size:11px;color:var(--muted);font-variant-numeric:tabular-nums}
.line{fill:none;stroke-width:1.5;stroke-linejoin:round}
.line.s1{stroke:var(--used)}.line.s2{stroke:var(--ok)}.line.s3{stroke:var(--bad)}.line.s4{stroke:var(--warn)}
.gl{stroke:var(--line);stroke-width:1}.axis{stroke:var(--muted);stroke-width:1}
.xaxis{display:flex;justify-content:space-between;padding-left:46px;font-size:11px;color:var(--muted)}
.nodata{margin:2px 0 0 46px;font-size:11.5px;color:var(--muted)}
`;
