// The operator's pulls (`weights pull`: a revision wanted on nodes with no replica there) and
// removals (`weights rm`) until they are done, kept in the store so a head node killed mid-pull
// carries it on when it starts again, and every control plane on one store (serve --ha) answers
// its nodes with the same wants: each reads the table again at most every RELOAD_MS, off the
// heartbeat's path, and writes what it is asked through at once. A pull is done, and cleared,
// once every node it named holds the whole revision; a removal once its node answered it.

import type { Logger } from "pino";
import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import type { WeightsHeld } from "../protocol/weights";
import type { WeightsRemoval } from "../protocol/weights-admin";
import type { WeightsOrdersPort } from "./store-port";
import type { WeightsOrderRow } from "./types";
import type { WeightsWant } from "./transfers";

/** How often the kept orders are read again at most: what another control plane wrote is seen this much later. */
export const RELOAD_MS = 1_000;

export interface WeightsRequestsOptions {
  store: WeightsOrdersPort;
  scheduler: Pick<Scheduler, "now">;
  log: Logger;
  /** Told when a reload found other wants than before (the plan is made again). */
  changed?: () => void;
}

export const revKey = (repo: string, revision: string) => `${repo}@${revision}`;

/** A pull whose every node holds the whole revision now: cleared. */
export interface PullDone {
  repo: string;
  revision: string;
  nodes: string[];
}

/**
 * The pulls of each revision whose every node holds all of its files (`files`: the revision's
 * paths, undefined while its manifest is unknown: then nothing is done). Pure.
 */
export function donePulls(
  pulls: readonly WeightsWant[],
  held: (node: string) => readonly WeightsHeld[] | undefined,
  files: (repo: string, revision: string) => readonly string[] | undefined,
): PullDone[] {
  const byRev = new Map<string, PullDone>();
  for (const p of pulls) {
    const k = revKey(p.repo, p.revision);
    let d = byRev.get(k);
    if (d === undefined) byRev.set(k, (d = { repo: p.repo, revision: p.revision, nodes: [] }));
    d.nodes.push(p.node);
  }
  const out: PullDone[] = [];
  for (const d of byRev.values()) {
    const want = files(d.repo, d.revision);
    if (want === undefined || want.length === 0) continue;
    const whole = (node: string) => {
      const h = held(node)?.find((x) => x.repo === d.repo && x.revision === d.revision);
      if (h === undefined) return false;
      const have = new Set(h.files);
      return want.every((f) => have.has(f));
    };
    if (d.nodes.every(whole)) out.push({ ...d, nodes: [...d.nodes].sort() });
  }
  return out;
}

export class WeightsRequests {
  /** node → repo@revision → the pull or removal. */
  private orders = new Map<string, Map<string, WeightsOrderRow>>();
  private loadedAt = Number.NEGATIVE_INFINITY;
  private loading: Promise<void> | null = null;
  /** Rises with each write of this control plane's: a read begun before one is not taken (it would undo it). */
  private writes = 0;

  constructor(private readonly o: WeightsRequestsOptions) {}

  seedsOf(node: string): WeightsWant[] {
    this.fresh();
    return [...(this.orders.get(node)?.values() ?? [])].filter((r) => r.kind === "pull").map(({ node, repo, revision }) => ({ node, repo, revision }));
  }

  allSeeds(): WeightsWant[] {
    this.fresh();
    return [...this.orders.values()].flatMap((m) => [...m.values()]).filter((r) => r.kind === "pull").map(({ node, repo, revision }) => ({ node, repo, revision }));
  }

  removalsOf(node: string): WeightsRemoval[] {
    this.fresh();
    return [...(this.orders.get(node)?.values() ?? [])].filter((r) => r.kind === "remove").map(({ repo, revision }) => ({ repo, revision }));
  }

  /** "node\0repo@revision" of every pull, as weights-views.ts marks a seeded copy. */
  seededKeys(): Set<string> {
    return new Set(this.allSeeds().map((s) => `${s.node}\u0000${revKey(s.repo, s.revision)}`));
  }

  /** Kept, then in force: a pull replaces a removal of the same revision on the node. */
  async put(rows: readonly WeightsOrderRow[]): Promise<void> {
    this.writes++;
    await this.o.store.putWeightsOrders(rows);
    this.writes++;
    for (const r of rows) this.mapOf(r.node).set(revKey(r.repo, r.revision), r);
  }

  /** A node answered a removal: true when one was pending here. The kept row goes either way (another control plane may have written it). */
  answered(node: string, repo: string, revision: string): boolean {
    const m = this.orders.get(node);
    const k = revKey(repo, revision);
    const pending = m?.get(k)?.kind === "remove";
    if (pending) m!.delete(k);
    this.drop([{ node, repo, revision, kind: "remove" }]);
    return pending;
  }

  /** Clears the pulls every node of which holds the whole revision now; answers those. */
  clearDone(held: (node: string) => readonly WeightsHeld[] | undefined, files: (repo: string, revision: string) => readonly string[] | undefined): PullDone[] {
    const done = donePulls(this.allSeeds(), held, files);
    const keys: Omit<WeightsOrderRow, "at">[] = [];
    for (const d of done)
      for (const node of d.nodes) {
        this.orders.get(node)?.delete(revKey(d.repo, d.revision));
        keys.push({ node, repo: d.repo, revision: d.revision, kind: "pull" });
      }
    this.drop(keys);
    return done;
  }

  /** A node deleted: its pulls and removals with it. */
  forget(node: string): void {
    const m = this.orders.get(node);
    this.orders.delete(node);
    if (m !== undefined) this.drop([...m.values()].map(({ at: _, ...k }) => k));
  }

  /** Reads the kept orders again (one read at a time). */
  reload(): Promise<void> {
    this.loading ??= (async () => {
      this.loadedAt = this.o.scheduler.now();
      const before = this.writes;
      const rows = await this.o.store.weightsOrders();
      if (this.writes !== before) return;
      const next = new Map<string, Map<string, WeightsOrderRow>>();
      for (const r of rows) {
        let m = next.get(r.node);
        if (m === undefined) next.set(r.node, (m = new Map()));
        m.set(revKey(r.repo, r.revision), r);
      }
      const was = this.fingerprint(this.orders);
      this.orders = next;
      if (this.fingerprint(next) !== was) this.o.changed?.();
    })()
      .catch((e) => this.o.log.warn({ err: errorText(e) }, "weights: the pulls and removals kept were not read; the last read stands"))
      .finally(() => {
        this.loading = null;
      });
    return this.loading;
  }

  private fresh(): void {
    if (this.o.scheduler.now() - this.loadedAt >= RELOAD_MS) void this.reload();
  }

  private mapOf(node: string): Map<string, WeightsOrderRow> {
    let m = this.orders.get(node);
    if (m === undefined) this.orders.set(node, (m = new Map()));
    return m;
  }

  private drop(keys: Omit<WeightsOrderRow, "at">[]): void {
    if (keys.length === 0) return;
    this.writes++;
    this.o.store
      .deleteWeightsOrders(keys)
      .catch((e) => this.o.log.warn({ err: errorText(e), orders: keys.length }, "weights: finished pulls or removals not cleared from the store; cleared at a later report"))
      .finally(() => {
        this.writes++;
      });
  }

  private fingerprint(m: Map<string, Map<string, WeightsOrderRow>>): string {
    return [...m.values()]
      .flatMap((x) => [...x.values()])
      .map((r) => `${r.node}\u0000${r.repo}@${r.revision}:${r.kind}`)
      .sort()
      .join("\n");
  }
}
