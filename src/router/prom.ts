// The router's own Prometheus metrics: a few counters, gauges and histograms kept in plain
// maps and rendered in the text exposition format on /metrics. Small on purpose: the hot path
// pays a map lookup and an add per request.

type Labels = Record<string, string>;

function escape(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function labelText(names: readonly string[], values: readonly string[], extra?: string): string {
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

export class Counter extends Metric {
  private readonly values = new Map<string, { labels: string[]; v: number }>();
  inc(labels: readonly string[], by = 1): void {
    const k = labels.join("\u0000");
    const e = this.values.get(k);
    if (e) e.v += by;
    else this.values.set(k, { labels: [...labels], v: by });
  }
  get(labels: readonly string[]): number {
    return this.values.get(labels.join("\u0000"))?.v ?? 0;
  }
  render(out: string[]): void {
    this.header(out, "counter");
    for (const { labels, v } of this.values.values()) out.push(`${this.name}${labelText(this.labelNames, labels)} ${v}`);
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

export class Histogram extends Metric {
  private readonly series = new Map<string, { labels: string[]; counts: number[]; sum: number; count: number }>();
  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    readonly buckets: readonly number[],
  ) {
    super(name, help, labelNames);
  }
  observe(labels: readonly string[], value: number): void {
    const k = labels.join("\u0000");
    let s = this.series.get(k);
    if (!s) this.series.set(k, (s = { labels: [...labels], counts: new Array(this.buckets.length).fill(0), sum: 0, count: 0 }));
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) s.counts[i]!++;
    s.sum += value;
    s.count++;
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
