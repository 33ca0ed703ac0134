// The router's metrics: its Prometheus registry (GET /metrics serves it, then the fleet's
// gauges the control plane sends), each model's hot series looked up once per attempt rather
// than per observation, and the per-model traffic the control plane reads back (UsageSource's
// traffic: requests, errors, output tokens, TTFT counts, in flight, held).

import { type ModelTraffic, TTFT_BUCKETS_MS } from "../protocol/routing";
import { Counter, type CounterSeries, CounterView, Gauge, Histogram, type HistogramSeries, Registry } from "./prom";

/** A model's hot metric series: time to first byte, duration, the count of 200s, TTFT, output tokens. */
export interface ModelSeries {
  readonly ttfb: HistogramSeries;
  readonly duration: HistogramSeries;
  readonly ok: CounterSeries;
  readonly ttft: HistogramSeries;
  readonly tokens: CounterSeries;
}

/** What the gauges read when scraped: the balancer's endpoints and counts, the cold-start holds. */
export interface MetricsSources {
  /** [endpoint id, its first model, requests in flight] per endpoint. */
  inflightByEndpoint(): Iterable<[string, string, number]>;
  inflightByModel(): ReadonlyMap<string, number>;
  heldByModel(): ReadonlyMap<string, number>;
  /** Requests waiting for a free slot on a model whose replicas are all at their max_inflight (slot-gate.ts). */
  waitingByModel?(): ReadonlyMap<string, number>;
}

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export class RouterMetrics {
  private readonly registry = new Registry();
  private readonly requests: Counter;
  private readonly retries: Counter;
  private readonly upstreamErrors: Counter;
  private readonly ttfb: Histogram;
  private readonly duration: Histogram;
  private readonly ttft: Histogram;
  private readonly outputTokens: Counter;
  private readonly perModel = new Map<string, ModelSeries>();
  /** The fleet gauges' text the control plane last sent, served after the router's own series. */
  private fleet = "";
  /** Sections of series kept elsewhere (the ledger's counters, its drift), rendered when scraped. */
  private readonly sections: (() => string)[] = [];

  constructor(private readonly sources: MetricsSources) {
    const r = this.registry;
    this.requests = r.add(new Counter("llmgw_router_requests_total", "Requests by model and HTTP status.", ["model", "status"]));
    this.ttfb = r.add(new Histogram("llmgw_router_time_to_first_byte_seconds", "Time from request to the upstream's first body byte.", ["model"], BUCKETS));
    this.duration = r.add(new Histogram("llmgw_router_request_duration_seconds", "Time from request to the end of the response.", ["model"], BUCKETS));
    this.retries = r.add(new Counter("llmgw_router_retries_total", "Requests retried on another replica before any byte reached the client.", ["model", "reason"]));
    this.upstreamErrors = r.add(new Counter("llmgw_router_upstream_errors_total", "Failures talking to replicas.", ["model", "kind"]));
    r.add(new Gauge("llmgw_router_inflight_requests", "Requests in flight per replica endpoint.", ["endpoint", "model"], () => [...sources.inflightByEndpoint()].map(([id, model, n]) => [[id, model], n] as [string[], number])));
    r.add(
      new Gauge("llmgw_router_held_requests", "Requests held for a cold start now, by model (at most --max-held-per-model each).", ["model"], () =>
        [...sources.heldByModel()].map(([model, n]) => [[model], n] as [string[], number]),
      ),
    );
    const waiting = sources.waitingByModel;
    if (waiting !== undefined)
      r.add(
        new Gauge("llmgw_router_waiting_requests", "Requests waiting in the router for a free slot now, by model: every replica of the model is at its max_inflight.", ["model"], () =>
          [...waiting.call(sources)].map(([model, n]) => [[model], n] as [string[], number]),
        ),
      );
    // Per model (its canonical name), under the names the fleet's dashboards and alerts use.
    r.add(new CounterView("llmgw_model_requests_total", "Requests answered per model, by HTTP status code.", ["model", "code"], this.requests));
    this.outputTokens = r.add(
      new Counter("llmgw_model_output_tokens_total", "Completion tokens per model: the engine's usage when it reports one, else the streamed content chunks counted.", ["model"]),
    );
    this.ttft = r.add(
      new Histogram("llmgw_model_ttft_seconds", "Time to first token per model as the router sees it: from the request (cold-start hold included) to the first byte of the answer.", ["model"], TTFT_BUCKETS_MS.map((ms) => ms / 1000)),
    );
    r.add(new Gauge("llmgw_model_requests_inflight", "Requests per model being proxied to a replica now.", ["model"], () => [...sources.inflightByModel()].map(([m, n]) => [[m], n] as [string[], number])));
    r.add(new Gauge("llmgw_model_requests_queued", "Requests per model held for a replica to start (cold start) now.", ["model"], () => [...sources.heldByModel()].map(([m, n]) => [[m], n] as [string[], number])));
  }

  /** The metric series of one model, looked up once per attempt rather than per observation. */
  seriesOf(model: string): ModelSeries {
    let m = this.perModel.get(model);
    if (m === undefined) {
      m = {
        ttfb: this.ttfb.child([model]),
        duration: this.duration.child([model]),
        ok: this.requests.series([model, "200"]),
        ttft: this.ttft.child([model]),
        tokens: this.outputTokens.series([model]),
      };
      this.perModel.set(model, m);
    }
    return m;
  }

  /** A request for `model` answered with `status` (a 200 through its series: seriesOf(model).ok). */
  answered(model: string, status: number): void {
    this.requests.inc([model, String(status)]);
  }

  /** A request retried on another replica, by the replica's model and why. */
  retried(model: string, kind: string): void {
    this.retries.inc([model, kind]);
  }

  /** A failure talking to a replica of `model`. */
  upstreamError(model: string, kind: string): void {
    this.upstreamErrors.inc([model, kind]);
  }

  /** The fleet's gauges, as the control plane renders them (FleetMetricsSink). */
  setFleet(text: string): void {
    this.fleet = text;
  }

  /** Series rendered by another part of the router at each scrape, after the router's own. */
  addSection(render: () => string): void {
    this.sections.push(render);
  }

  /** The exposition text: the router's series, the sections, then the fleet's gauges. */
  render(): string {
    let out = this.registry.render();
    for (const s of this.sections) out += s();
    return out + this.fleet;
  }

  /** What the router has seen of each model: every model named in `catalog`, and any other it counted. */
  traffic(catalog: readonly string[]): ModelTraffic[] {
    const sums = new Map<string, { requests: number; errors: number }>();
    for (const { labels, v } of this.requests.entries()) {
      const [model = "", status = ""] = labels;
      let s = sums.get(model);
      if (s === undefined) sums.set(model, (s = { requests: 0, errors: 0 }));
      s.requests += v;
      if (Number(status) >= 500) s.errors += v;
    }
    const inflight = this.sources.inflightByModel();
    const holding = this.sources.heldByModel();
    const names = new Set([...catalog, ...sums.keys(), ...this.perModel.keys(), ...inflight.keys(), ...holding.keys()]);
    return [...names].sort().map((model) => {
      const s = this.perModel.get(model);
      return {
        model,
        requests: sums.get(model)?.requests ?? 0,
        errors: sums.get(model)?.errors ?? 0,
        output_tokens: s?.tokens.v ?? 0,
        ttft_counts: s ? bucketCounts(s.ttft) : new Array<number>(TTFT_BUCKETS_MS.length + 1).fill(0),
        inflight: inflight.get(model) ?? 0,
        queued: holding.get(model) ?? 0,
      };
    });
  }
}

/** A TTFT series' count per bucket of TTFT_BUCKETS_MS, and past the last (the exposition's counts are cumulative over `le`). */
function bucketCounts(h: HistogramSeries): number[] {
  const out: number[] = [];
  let below = 0;
  for (const c of h.counts) {
    out.push(c - below);
    below = c;
  }
  out.push(h.count - below);
  return out;
}
