// Following a long operation until it is done, for `drain --wait` and `apply --wait`: poll the
// admin API, print a line whenever something changed, stop at success, failure or a deadline.

import type { EventView, ModelView, NodeView, ReplicaView } from "../protocol/views";
import { type Client, CliError } from "./client";
import { safeText } from "../lib/text";
import { oneLine } from "../lib/format";

/** How long `apply --wait` and `drain --wait` follow before giving up, unless --timeout says. */
export const WAIT_TIMEOUT = "10m";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function latestEventId(client: Client): Promise<number> {
  return (await client.get<EventView[]>("/api/v1/events?limit=1")).at(-1)?.id ?? 0;
}

/** Prints the control plane's events about `subjects` as they happen, until `done` says stop. */
async function follow(client: Client, deadlineMs: number, intervalMs: number, done: () => Promise<boolean>, relevant: (e: EventView) => boolean): Promise<void> {
  let after = await latestEventId(client);
  const end = Date.now() + deadlineMs;
  for (;;) {
    const events = await client.get<EventView[]>(`/api/v1/events?after=${after}&limit=1000`);
    for (const e of events) {
      after = e.id;
      if (relevant(e)) process.stdout.write(`  ${safeText(e.message)}\n`);
    }
    if (await done()) return;
    if (Date.now() > end) throw new CliError(`still not done after ${Math.round(deadlineMs / 1000)}s; it goes on in the background (llmgw events -f to watch)`);
    await sleep(intervalMs);
  }
}

export async function waitForDrain(client: Client, node: string, deadlineMs: number, intervalMs = 500): Promise<void> {
  let moving = new Set<string>();
  const onNode = async () => (await client.get<ReplicaView[]>("/api/v1/replicas")).filter((r) => r.shards.some((s) => s.node === node));
  moving = new Set((await onNode()).map((r) => r.model));
  await follow(
    client,
    deadlineMs,
    intervalMs,
    async () => {
      const n = await client.get<NodeView>(`/api/v1/nodes/${encodeURIComponent(node)}`);
      const left = await onNode();
      return n.admin_state === "cordoned" && left.length === 0;
    },
    (e) => e.subject === `node/${node}` || [...moving].some((m) => e.message.includes(` of ${m} `) || e.message.endsWith(` of ${m}`)),
  );
  process.stdout.write(`node/${node} drained\n`);
}

export async function waitForModels(client: Client, names: string[], deadlineMs: number, intervalMs = 500): Promise<ModelView[]> {
  const want = new Set(names);
  let last: ModelView[] = [];
  const shown = new Map<string, string>();
  await follow(
    client,
    deadlineMs,
    intervalMs,
    async () => {
      last = (await client.get<ModelView[]>("/api/v1/models")).filter((m) => want.has(m.name));
      for (const m of last) {
        const line = m.parked
          ? `parked: ${oneLine(m.reason ?? "", 140)}`
          : m.ready >= m.desired
            ? `ready ${m.ready}/${m.desired}`
            : m.never_fits && m.reason
              ? `${oneLine(m.reason, 240)}`
              : m.unplaceable && m.reason
                ? `waiting: ${oneLine(m.reason, 140)}`
                : `starting ${m.ready}/${m.desired}`;
        if (shown.get(m.name) !== line) process.stdout.write(safeText(`model/${m.name} ${line}`) + "\n");
        shown.set(m.name, line);
      }
      // Done, or never going to be: parked, or no node of this fleet could ever host it.
      return last.length === want.size && last.every((m) => m.parked || (m.never_fits && m.ready < m.desired) || (m.ready >= m.desired && !m.unplaceable));
    },
    () => false,
  );
  return last;
}
