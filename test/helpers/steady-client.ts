// A steady client for upgrade tests: a few requests a second against the router, streamed and
// not in turn, each read to its end and checked, while servers and agents are restarted under
// it. It may retry a request only before the first byte of an answer (the connection refused or
// reset, as a client's retry policy would), and counts those retries; anything after the first
// byte that is not a whole, good answer is a failure, kept with when it started and how it ended.
// Phases name the steps of a test (mark()), so the counts can be printed and checked per step.

export interface SteadyOptions {
  /** The router's base URL, read at each attempt (a restarted server may move). */
  url: () => string;
  model: string;
  /** Requests started per second (default 4). */
  perSecond?: number;
  /** Completion tokens asked for: a streamed answer of the fake engine takes about 5 ms a token. */
  streamTokens?: number;
  plainTokens?: number;
  /** How long one request keeps retrying before its first byte (default 20 s). */
  retryForMs?: number;
  headers?: Record<string, string>;
}

export interface Failure {
  phase: string;
  stream: boolean;
  startedAt: number;
  endedAt: number;
  why: string;
}

export interface PhaseCounts {
  started: number;
  succeeded: number;
  streamed: number;
  /** Attempts that failed before any byte of an answer and were tried again. */
  retries: number;
  /** Requests that needed at least one retry. */
  retried: number;
  failures: number;
}

export class SteadyClient {
  private readonly o: Required<Omit<SteadyOptions, "headers">> & { headers: Record<string, string> };
  private phase = "start";
  private readonly counts = new Map<string, PhaseCounts>();
  readonly failures: Failure[] = [];
  private running = false;
  private loop: Promise<void> | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  private n = 0;

  constructor(o: SteadyOptions) {
    this.o = { perSecond: 4, streamTokens: 200, plainTokens: 40, retryForMs: 20_000, headers: {}, ...o };
  }

  /** Requests from now on count under `phase`. */
  mark(phase: string): void {
    this.phase = phase;
  }

  /** Requests started and not finished now (a stream under way included). */
  get active(): number {
    return this.inFlight.size;
  }

  start(): void {
    this.running = true;
    this.loop = (async () => {
      const gap = 1000 / this.o.perSecond;
      while (this.running) {
        const p = this.one(this.n++ % 2 === 0);
        this.inFlight.add(p);
        void p.finally(() => this.inFlight.delete(p));
        await Bun.sleep(gap);
      }
    })();
  }

  /** Stops starting requests and waits for those under way. */
  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
    await Promise.all([...this.inFlight]);
  }

  of(phase: string): PhaseCounts {
    let c = this.counts.get(phase);
    if (!c) this.counts.set(phase, (c = { started: 0, succeeded: 0, streamed: 0, retries: 0, retried: 0, failures: 0 }));
    return c;
  }

  /** Every phase's counts, in the order they began. */
  phases(): [string, PhaseCounts][] {
    return [...this.counts];
  }

  total(): PhaseCounts {
    const t: PhaseCounts = { started: 0, succeeded: 0, streamed: 0, retries: 0, retried: 0, failures: 0 };
    for (const c of this.counts.values()) for (const k of Object.keys(t) as (keyof PhaseCounts)[]) t[k] += c[k];
    return t;
  }

  /** One line per phase and a total, for the test's output. */
  report(): string {
    const line = (name: string, c: PhaseCounts) =>
      `${name.padEnd(34)} ${String(c.started).padStart(4)} started  ${String(c.succeeded).padStart(4)} ok (${c.streamed} streamed)  ${String(c.retries).padStart(3)} retries before the first byte (${c.retried} requests)  ${c.failures} failed`;
    return [...this.phases().map(([n, c]) => line(n, c)), line("total", this.total())].join("\n");
  }

  private async one(stream: boolean): Promise<void> {
    const phase = this.phase;
    const c = this.of(phase);
    c.started++;
    const startedAt = Date.now();
    const body = JSON.stringify({ model: this.o.model, stream, max_tokens: stream ? this.o.streamTokens : this.o.plainTokens, messages: [{ role: "user", content: `steady ${this.n}` }] });
    let tries = 0;
    const fail = (why: string) => {
      c.failures++;
      this.failures.push({ phase, stream, startedAt, endedAt: Date.now(), why });
    };
    for (;;) {
      let res: Response;
      try {
        res = await fetch(`${this.o.url()}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...this.o.headers }, body });
      } catch (e) {
        // No byte of an answer: the one retry a client may make.
        if (Date.now() - startedAt > this.o.retryForMs) return fail(`no answer within ${this.o.retryForMs} ms: ${(e as Error).message}`);
        if (tries++ === 0) c.retried++;
        c.retries++;
        await Bun.sleep(100);
        continue;
      }
      try {
        const text = await res.text();
        if (res.status !== 200) return fail(`${res.status}: ${text.slice(0, 300)}`);
        if (stream ? !text.trimEnd().endsWith("data: [DONE]") : !(JSON.parse(text) as { choices?: unknown[] }).choices?.length) return fail(`incomplete answer: …${text.slice(-200)}`);
      } catch (e) {
        return fail(`cut after the first byte: ${(e as Error).message}`);
      }
      c.succeeded++;
      if (stream) c.streamed++;
      return;
    }
  }
}
