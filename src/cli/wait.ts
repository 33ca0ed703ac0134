// Following a long operation until it is done, for `drain --wait` and `apply --wait`: poll the
// admin API, print a line whenever something changed, stop at success, at once when the target
// can never be reached (exit 1 with why), and at the deadline (exit 1 with what holds it up).
// When nothing has moved for the stall period it says so once, with the cause, and keeps waiting.
// The clock, the sleep and the output are injectable, so tests need not wait minutes.

import type { EventView, ModelView, NodeView, ReplicaView } from "../protocol/views";
import { type Client, CliError } from "./client";
import { safeText } from "../lib/text";
import { humanMs, oneLine, plural } from "../lib/format";

/** How long `apply --wait` and `drain --wait` follow before giving up, unless --timeout says. */
export const WAIT_TIMEOUT = "10m";
/** How long nothing may move before the wait says it is stalled, unless --stall says. */
export const STALL_AFTER = "2m";

export interface WaitOptions {
  timeoutMs: number;
  /** Nothing moved for this long: say it is stalled, and why (once per stalled stretch). */
  stallMs: number;
  intervalMs?: number;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
  write?: (line: string) => void;
}

interface Clock {
  now: () => number;
  sleep: (ms: number) => Promise<void>;
  write: (line: string) => void;
}

const clockOf = (o: WaitOptions): Clock => ({
  now: o.now ?? Date.now,
  sleep: o.sleep ?? ((ms: number) => new Promise((r) => setTimeout(r, ms))),
  write: o.write ?? ((line: string) => void process.stdout.write(line)),
});

/** Per key (a node, a model), since when its progress has been what it is, and whether the stall was said. */
export class StallWatch {
  private readonly seen = new Map<string, { progress: string; since: number; told: boolean }>();
  constructor(private readonly stallMs: number) {}

  /** The time stalled when this key has just become stalled (to be said now), else undefined. */
  check(key: string, progress: string, now: number): number | undefined {
    const s = this.seen.get(key);
    if (!s || s.progress !== progress) {
      this.seen.set(key, { progress, since: now, told: false });
      return undefined;
    }
    if (s.told || now - s.since < this.stallMs) return undefined;
    s.told = true;
    return now - s.since;
  }
}

async function latestEventId(client: Client): Promise<number> {
  return (await client.get<EventView[]>("/api/v1/events?limit=1")).at(-1)?.id ?? 0;
}

interface Step {
  done: boolean;
  /** Why it is not done yet, for the timeout's message. */
  cause: string;
}

/** Prints the control plane's events that `relevant` picks as they happen, until `step` says done. */
async function follow(client: Client, o: WaitOptions, what: string, step: (now: number) => Promise<Step>, relevant: (e: EventView) => boolean): Promise<void> {
  const c = clockOf(o);
  let after = await latestEventId(client);
  const end = c.now() + o.timeoutMs;
  for (;;) {
    const events = await client.get<EventView[]>(`/api/v1/events?after=${after}&limit=1000`);
    for (const e of events) {
      after = e.id;
      if (relevant(e)) c.write(`  ${safeText(e.message)}\n`);
    }
    const s = await step(c.now());
    if (s.done) return;
    if (c.now() >= end) throw new CliError(`${what} not done after ${humanMs(o.timeoutMs)}: ${oneLine(s.cause, 400)}; it goes on in the background (llmgw events -f to watch)`);
    await c.sleep(o.intervalMs ?? 500);
  }
}

/** What a drain waits on, one clause: the node's blocker, else the first replica's reason. */
function drainCause(n: NodeView, left: readonly ReplicaView[]): string {
  const d = n.drain;
  if (d?.blocked) return d.blocked;
  const r = d?.replicas.find((x) => x.reason);
  if (r) return `${r.model} (${r.id}): ${r.reason}`;
  return left.length > 0 ? `${plural(left.length, "replica")} still on ${n.name}` : `${n.name} not yet cordoned`;
}

export async function waitForDrain(client: Client, node: string, o: WaitOptions): Promise<void> {
  const c = clockOf(o);
  const path = `/api/v1/nodes/${encodeURIComponent(node)}`;
  const all = () => client.get<ReplicaView[]>("/api/v1/replicas");
  const on = (rs: readonly ReplicaView[]) => rs.filter((r) => r.state !== "failed" && r.shards.some((s) => s.node === node));
  const moving = new Set(on(await all()).map((r) => r.model));
  const stalls = new StallWatch(o.stallMs);
  await follow(
    client,
    o,
    `drain of ${node}`,
    async (now) => {
      const n = await client.get<NodeView>(path);
      const rs = await all();
      const left = on(rs);
      if (n.admin_state === "cordoned" && left.length === 0) return { done: true, cause: "" };
      if (n.admin_state !== "draining" && n.admin_state !== "cordoned") throw new CliError(`drain of ${node} stopped: the node is ${n.state} now (uncordoned?), ${plural(left.length, "replica")} still on it`);
      if (n.drain?.never && n.drain.blocked) throw new CliError(`drain of ${node} can never finish: ${oneLine(n.drain.blocked, 400)}`);
      // Progress: a replica on the node moved, stopped or changed state; a replacement of what is moving was placed or became ready.
      for (const r of left) moving.add(r.model);
      const progress = [
        ...left.map((r) => `${r.id}:${r.state}`).sort(),
        "|",
        ...rs.filter((r) => (r.state === "ready" || r.state === "starting" || r.state === "fetching") && moving.has(r.model) && !left.includes(r)).map((r) => `${r.id}:${r.state}`).sort(),
      ].join(",");
      const cause = drainCause(n, left);
      const stalled = stalls.check(node, progress, now);
      if (stalled !== undefined) c.write(safeText(`node/${node} stalled: nothing moved for ${humanMs(stalled)}, ${plural(left.length, "replica")} left: ${oneLine(cause, 300)}`) + "\n");
      return { done: false, cause };
    },
    (e) => e.subject === `node/${node}` || [...moving].some((m) => e.message.includes(` of ${m} `) || e.message.endsWith(` of ${m}`)),
  );
  c.write(`node/${node} drained\n`);
}

/** A model's line while it is waited for, printed whenever it changes. */
function modelLine(m: ModelView): string {
  if (m.parked) return `parked: ${oneLine(m.reason ?? "", 140)}`;
  if (m.ready >= m.desired) return `ready ${m.ready}/${m.desired}`;
  if (m.never_fits && m.reason) return oneLine(m.reason, 240);
  if (m.unplaceable && m.reason) return `waiting: ${oneLine(m.reason, 140)}`;
  return `starting ${m.ready}/${m.desired}`;
}

/** Why a model is not ready yet, for a stall or the deadline. */
function modelCause(m: ModelView): string {
  if (m.reason) return m.reason;
  const starting = m.total - m.ready;
  return starting > 0 ? `${starting} starting, not ready yet (llmgw logs REPLICA shows the engine's output)` : "waiting for placement";
}

export async function waitForModels(client: Client, names: string[], o: WaitOptions): Promise<ModelView[]> {
  const c = clockOf(o);
  const want = new Set(names);
  let last: ModelView[] = [];
  const shown = new Map<string, string>();
  const stalls = new StallWatch(o.stallMs);
  await follow(
    client,
    o,
    `wait for ${names.join(", ")}`,
    async (now) => {
      last = (await client.get<ModelView[]>("/api/v1/models")).filter((m) => want.has(m.name));
      const open: string[] = [];
      for (const m of last) {
        const line = modelLine(m);
        if (shown.get(m.name) !== line) c.write(safeText(`model/${m.name} ${line}`) + "\n");
        shown.set(m.name, line);
        // Done, or never going to be: parked, or no node of this fleet could ever host it.
        if (m.parked || (m.never_fits && m.ready < m.desired) || (m.ready >= m.desired && !m.unplaceable)) continue;
        open.push(`${m.name} ready ${m.ready}/${m.desired}: ${oneLine(modelCause(m), 200)}`);
        // A stall: its ready count has not risen (nor its target changed) for the stall period.
        const stalled = stalls.check(m.name, `${m.ready}/${m.desired}`, now);
        if (stalled !== undefined) c.write(safeText(`model/${m.name} stalled: ready ${m.ready}/${m.desired} for ${humanMs(stalled)}: ${oneLine(modelCause(m), 240)}`) + "\n");
      }
      const missing = [...want].filter((n) => !last.some((m) => m.name === n));
      if (missing.length > 0) open.push(`${missing.join(", ")} not in the catalog`);
      return { done: open.length === 0, cause: open.join("; ") };
    },
    () => false,
  );
  return last;
}
