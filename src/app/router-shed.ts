// Shed connections are logged at most once per listener and cap every 10 s, with how many: a
// flood must not turn into a flood of log lines. Shared by the head node and the router thread.

import type { Logger } from "pino";
import type { ShedCap } from "../http/server";
import type { Scheduler } from "../lib/scheduler";

export type ShedLog = (listener: "router" | "admin", cap: ShedCap, address: string) => void;

const WHY: Record<ShedCap, string> = {
  total: "at its connection cap: shedding new connections",
  address: "at its per-address connection cap: shedding new connections",
  unauthenticated: "at its cap of connections that have not authenticated: shedding new connections",
  evicted: "full of connections that have not authenticated: closing the oldest for each new one",
};

export function shedLogger(log: Logger, scheduler: Scheduler): ShedLog {
  const last = new Map<string, { at: number; count: number }>();
  return (listener, cap, address) => {
    const key = `${listener}:${cap}`;
    const now = scheduler.mono();
    const l = last.get(key);
    if (l !== undefined && now - l.at < 10_000) {
      l.count++;
      return;
    }
    const suppressed = l?.count ?? 0;
    last.set(key, { at: now, count: 0 });
    log.warn({ listener, cap, address, suppressed }, `${listener} listener ${WHY[cap]}`);
  };
}
