// What the summary's `store[]` and `store_error` say when `serve --patroni URL,…` is given: a
// poller that asks the Patroni REST API (GET /cluster) of the store's members every few
// seconds, on the injected Scheduler, and keeps the last answer. The summary reads what it
// holds and never waits on Patroni. Any member answers for the whole cluster, so the first
// that answers a valid /cluster wins (the last one that did is asked first next time); when
// none does, `store_error` names each URL tried and why, until one answers again.

import type { Logger } from "pino";
import { timeoutSignal } from "../lib/abort";
import { errorText, oneLine } from "../lib/format";
import type { Scheduler, Timer } from "../lib/scheduler";
import { safeText } from "../lib/text";
import { parseCluster } from "../protocol/patroni";
import type { StoreMember } from "../protocol/views";

export interface PatroniPollerOptions {
  /** Patroni REST API base URLs (http://db1:8008), as configured. */
  urls: string[];
  scheduler: Scheduler;
  log: Logger;
  /** Between polls (default 3 s). */
  intervalMs?: number;
  /** Per member asked, the body included (default 1.5 s). */
  timeoutMs?: number;
  fetch?: (url: string, init: RequestInit) => Promise<Response>;
}

/** Longest /cluster body read (a 64-member answer is a few KiB). */
const MAX_BODY = 256 * 1024;

/** A URL as it may be shown: any user:password taken out. */
export function shownUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.username || u.password) {
      u.username = "";
      u.password = "";
    }
    return safeText(u.toString().replace(/\/$/, ""));
  } catch {
    return safeText(url.replace(/\/\/[^/@]*@/, "//"));
  }
}

export class PatroniPoller {
  private members: StoreMember[] = [];
  private error: string | undefined;
  private preferred = 0;
  private timer: Timer | undefined;
  private inFlight: Promise<void> | undefined;
  private readonly intervalMs: number;
  private readonly timeoutMs: number;
  private readonly fetchFn: (url: string, init: RequestInit) => Promise<Response>;
  private stopped = false;

  constructor(private readonly o: PatroniPollerOptions) {
    if (o.urls.length === 0) throw new Error("PatroniPoller needs at least one Patroni URL");
    this.intervalMs = o.intervalMs ?? 3000;
    this.timeoutMs = o.timeoutMs ?? 1500;
    this.fetchFn = o.fetch ?? ((url, init) => fetch(url, init));
    this.error = `Patroni not asked yet (${o.urls.map(shownUrl).join(", ")})`;
  }

  /** What the summary shows: the members of the last good answer, or why there is none. */
  snapshot(): { members: StoreMember[]; error?: string } {
    return this.error === undefined ? { members: this.members } : { members: [], error: this.error };
  }

  /** Asks at once, then every interval. */
  start(): void {
    if (this.timer || this.stopped) return;
    void this.poll();
    this.timer = this.o.scheduler.every(this.intervalMs, () => void this.poll()).unref();
  }

  stop(): void {
    this.stopped = true;
    this.timer?.cancel();
    this.timer = undefined;
  }

  /** One round (skipped while the previous one still runs); resolves when it is done. */
  poll(): Promise<void> {
    if (!this.inFlight) this.inFlight = this.round().finally(() => (this.inFlight = undefined));
    return this.inFlight;
  }

  private async round(): Promise<void> {
    const { urls } = this.o;
    const tried: string[] = [];
    for (let k = 0; k < urls.length; k++) {
      const i = (this.preferred + k) % urls.length;
      const r = await this.ask(urls[i]!);
      if (this.stopped) return;
      if ("members" in r) {
        if (this.error !== undefined && !this.error.startsWith("Patroni not asked yet")) this.o.log.info({ patroni: shownUrl(urls[i]!), members: r.members.length }, "Patroni answers again");
        this.members = r.members;
        this.error = undefined;
        this.preferred = i;
        return;
      }
      tried.push(`${shownUrl(urls[i]!)} (${r.error})`);
    }
    const error = `no Patroni member answered GET /cluster: ${tried.join("; ")}`;
    if (error !== this.error) this.o.log.warn({ patroni: urls.map(shownUrl), err: error }, "cannot read the store's members from Patroni");
    this.error = error;
    this.members = [];
  }

  private async ask(base: string): Promise<{ members: StoreMember[] } | { error: string }> {
    const deadline = timeoutSignal(this.o.scheduler, this.timeoutMs);
    try {
      const res = await this.fetchFn(`${base.replace(/\/+$/, "")}/cluster`, { headers: { accept: "application/json" }, signal: deadline.signal, redirect: "error" });
      if (res.status !== 200) {
        await res.body?.cancel().catch(() => {});
        return { error: `HTTP ${res.status}` };
      }
      const text = await res.text();
      if (text.length > MAX_BODY) return { error: `answer larger than ${MAX_BODY} bytes` };
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        return { error: "answer is not JSON" };
      }
      const parsed = parseCluster(json);
      return "error" in parsed ? { error: oneLine(parsed.error, 300) } : parsed;
    } catch (e) {
      return { error: e instanceof Error && e.name === "TimeoutError" ? `no answer within ${this.timeoutMs} ms` : oneLine(safeText(errorText(e)).replace(/\/\/[^/@\s]*@/g, "//"), 200) };
    } finally {
      deadline.cancel();
    }
  }
}
