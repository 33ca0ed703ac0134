// The router's own Prometheus metrics: a few counters, gauges and histograms kept in plain
// maps and rendered in the text exposition format on /metrics. Small on purpose: the hot path
// pays a map lookup and an add per request.

type Labels = Record<string, string>;

function escape(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

/** A series' label set, `{a="x",b="y"}`, its values escaped. */
export function labelText(names: readonly string[], values: readonly string[], extra?: string): string {
  const parts = names.map((n, i) => `${n}="${escape(values[i] ?? "")}"`);
  if (extra) parts.push(extra);
  return parts.length ? `{${parts.join(",")}}` : "";
}

abstract class Metric {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
  ) {}
  abstract render(out: string[]): void;
  protected header(out: string[], type: string): void {
    out.push(`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} ${type}`);
  }
}

/** One labelled series of a counter: held by a caller that counts it often. */
export interface CounterSeries {
  v: number;
}

export class Counter extends Metric {
  private readonly values = new Map<string, { labels: string[]; v: number }>();
  inc(labels: readonly string[], by = 1): void {
    this.series(labels).v += by;
  }
  /** The series for these labels, created at 0; keep it to count without a lookup. */
  series(labels: readonly string[]): CounterSeries {
    const k = labels.join("\u0000");
    let e = this.values.get(k);
    if (!e) this.values.set(k, (e = { labels: [...labels], v: 0 }));
    return e;
  }
  get(labels: readonly string[]): number {
    return this.values.get(labels.join("\u0000"))?.v ?? 0;
  }
  /** Every series: its label values and its count. */
  entries(): Iterable<{ labels: readonly string[]; v: number }> {
    return this.values.values();
  }
  render(out: string[]): void {
    this.header(out, "counter");
    for (const { labels, v } of this.values.values()) out.push(`${this.name}${labelText(this.labelNames, labels)} ${v}`);
  }
}

/** Another counter's series under a name and label names of their own: counted once, exported twice. */
export class CounterView extends Metric {
  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    private readonly source: Counter,
  ) {
    super(name, help, labelNames);
  }
  render(out: string[]): void {
    this.header(out, "counter");
    for (const { labels, v } of this.source.entries()) out.push(`${this.name}${labelText(this.labelNames, labels)} ${v}`);
  }
}

export class Gauge extends Metric {
  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    private readonly collect: () => Iterable<[labels: string[], value: number]>,
  ) {
    super(name, help, labelNames);
  }
  render(out: string[]): void {
    this.header(out, "gauge");
    for (const [labels, v] of this.collect()) out.push(`${this.name}${labelText(this.labelNames, labels)} ${v}`);
  }
}

/** One labelled series of a histogram. Counts are cumulative, as the exposition format has them. */
export class HistogramSeries {
  readonly counts: number[];
  sum = 0;
  count = 0;
  constructor(
    readonly labels: string[],
    private readonly buckets: readonly number[],
  ) {
    this.counts = new Array(buckets.length).fill(0);
  }
  observe(value: number): void {
    const b = this.buckets;
    for (let i = 0; i < b.length; i++) if (value <= b[i]!) this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

export class Histogram extends Metric {
  private readonly series = new Map<string, HistogramSeries>();
  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    readonly buckets: readonly number[],
  ) {
    super(name, help, labelNames);
  }
  observe(labels: readonly string[], value: number): void {
    this.child(labels).observe(value);
  }
  /** The series for these labels; keep it to observe without a lookup. */
  child(labels: readonly string[]): HistogramSeries {
    const k = labels.join("\u0000");
    let s = this.series.get(k);
    if (!s) this.series.set(k, (s = new HistogramSeries([...labels], this.buckets)));
    return s;
  }
  render(out: string[]): void {
    this.header(out, "histogram");
    for (const s of this.series.values()) {
      this.buckets.forEach((b, i) => out.push(`${this.name}_bucket${labelText(this.labelNames, s.labels, `le="${b}"`)} ${s.counts[i]}`));
      out.push(`${this.name}_bucket${labelText(this.labelNames, s.labels, 'le="+Inf"')} ${s.count}`);
      out.push(`${this.name}_sum${labelText(this.labelNames, s.labels)} ${s.sum}`);
      out.push(`${this.name}_count${labelText(this.labelNames, s.labels)} ${s.count}`);
    }
  }
}

export class Registry {
  private readonly metrics: Metric[] = [];
  add<M extends Metric>(m: M): M {
    this.metrics.push(m);
    return m;
  }
  render(): string {
    const out: string[] = [];
    for (const m of this.metrics) m.render(out);
    return out.join("\n") + "\n";
  }
}

export type { Labels };
