// The router's half of the usage ledger: per key, model and hour, what its requests used, as the
// engines reported it (usage), counted where each request ends (proxy.ts finish, a request that
// no replica answered, a refusal by a limit). The control plane takes the rows once a tick
// (takeLedger) and adds them to the store; the router forgets what it handed over. Cheap on the
// hot path: a row per key, model and hour is made the first time and then only added to.

import type { Scheduler } from "../lib/scheduler";
import type { ApiKeyEntry, UsageRow } from "../protocol/routing";

const HOUR_MS = 3_600_000;

function emptyRow(team: string, key: string, model: string, hour: number): UsageRow {
  return { team, key, model, hour, requests: 0, prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0, errors: 0, errors_4xx: 0, errors_5xx: 0, refused: 0, aborted: 0, gpu_seconds: 0 };
}

/** One key's rows of the current hour, by model, and the one it used last (most keys use one model: one lookup per request). */
interface KeyRows {
  byModel: Map<string, UsageRow>;
  last: UsageRow | undefined;
}

export class Ledger {
  /** Key names and teams, by the key's SHA-256. */
  private names = new Map<string, { name: string; team: string }>();
  /** The current hour's row of each key (by SHA-256; "" without a key) and model. */
  private rows = new Map<string, KeyRows>();
  /** Rows of an hour that ended (or of a key renamed) not yet taken. */
  private closed: UsageRow[] = [];

  /**
   * on: false (`serve --usage-ledger off`): nothing is counted, and the proxy asks engines for no
   * usage it would then have to take out of streams again (proxy.ts, usage-stream.ts).
   */
  constructor(
    private readonly time: Pick<Scheduler, "now">,
    readonly on = true,
  ) {}

  /** The keys the control plane sent: rows from now on carry their names and teams. */
  setKeys(keys: readonly ApiKeyEntry[]): void {
    this.names = new Map(keys.map((k) => [k.sha256, { name: k.name, team: k.team ?? "" }]));
    // A key renamed or moved to another team: its rows so far stay under what it was.
    for (const k of this.rows.values()) for (const r of k.byModel.values()) if (r.requests > 0) this.closed.push(r);
    this.rows = new Map();
  }

  /**
   * A request that ended with an answer (or none: status 502 from the router, 499 a client
   * gone), with its tokens; aborted: cut before its end, by the client or the engine; its
   * GPU-seconds (gpu-time.ts). Plain arguments: nothing is allocated per request.
   */
  answered(owner: string, model: string, s: number, prompt: number, completion: number, cached: number, aborted: boolean, gpuSeconds = 0): void {
    if (!this.on) return;
    const r = this.row(owner, model);
    r.requests++;
    r.gpu_seconds += gpuSeconds;
    r.prompt_tokens += prompt;
    r.completion_tokens += completion;
    r.cached_tokens += cached;
    if (aborted) r.aborted++;
    if (s >= 500) {
      r.errors++;
      r.errors_5xx++;
    } else if (s >= 400 && s !== 499) {
      r.errors++;
      r.errors_4xx++;
    }
  }

  /** A request refused by its key's or team's limits. */
  refused(owner: string, model: string): void {
    if (!this.on) return;
    const r = this.row(owner, model);
    r.requests++;
    r.errors++;
    r.refused++;
  }

  /** The rows counted since the last take, handed over: the router keeps none of it. */
  take(): UsageRow[] {
    const out = this.closed;
    this.closed = [];
    for (const k of this.rows.values())
      for (const r of k.byModel.values()) {
        if (r.requests === 0) continue;
        out.push({ ...r });
        r.requests = r.prompt_tokens = r.completion_tokens = r.cached_tokens = r.errors = r.errors_4xx = r.errors_5xx = r.refused = r.aborted = r.gpu_seconds = 0;
      }
    return out;
  }

  /** The rows counted and not yet taken, read in place (the usage counters at a scrape): nothing is reset. */
  *pending(): Iterable<UsageRow> {
    yield* this.closed;
    for (const k of this.rows.values()) for (const r of k.byModel.values()) if (r.requests > 0) yield r;
  }

  /** The current hour's row of a key and model, made the first time. */
  private row(owner: string, model: string): UsageRow {
    const now = this.time.now();
    const hour = now - (now % HOUR_MS);
    let k = this.rows.get(owner);
    if (k === undefined) this.rows.set(owner, (k = { byModel: new Map(), last: undefined }));
    const last = k.last;
    if (last !== undefined && last.model === model && last.hour === hour) return last;
    let r = k.byModel.get(model);
    if (r !== undefined && r.hour === hour) return (k.last = r);
    // A new hour: the last one's row is handed over whole, and a new one made.
    if (r !== undefined && r.requests > 0) this.closed.push(r);
    const n = this.names.get(owner);
    r = emptyRow(n?.team ?? "", n?.name ?? "", model, hour);
    k.byModel.set(model, r);
    return (k.last = r);
  }
}
