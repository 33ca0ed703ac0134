// The logs of engine runs that are over, kept a while for `llmgw logs REPLICA --previous`.
// Each run of a replica writes <id>.log; a new run of the same id (the agent restarted, the
// engine was started again) first moves the old one to <id>.previous.log. A replica this agent
// no longer runs leaves its <id>.log behind. Both kinds are "past runs" and are kept bounded:
// at most PREVIOUS_LOGS.maxFiles of them (newest kept), each cut to its last maxBytes, each for
// keepMs after the agent first saw it over. Time is the agent's Scheduler, never a file's mtime,
// so a test drives it and a wrong file clock cannot keep or drop anything.

import { chmodSync, closeSync, existsSync, fstatSync, openSync, readdirSync, readSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const PREVIOUS_LOGS = {
  /** How long a past run's log is kept after the agent first saw it over. */
  keepMs: 3_600_000,
  /** Past runs' logs kept on a node at most (previous runs and stopped replicas together). */
  maxFiles: 20,
  /** Each is cut to its last this many bytes. */
  maxBytes: 1024 * 1024,
  /** How often the agent looks over the log directory. */
  sweepMs: 60_000,
} as const;

export type PreviousLogLimits = { keepMs: number; maxFiles: number };

export const PREVIOUS_SUFFIX = ".previous.log";

/** The file a replica's run before the current one is kept in, beside `<stem>.log`. */
export function previousPathOf(logPath: string): string {
  return logPath.replace(/\.log$/, "") + PREVIOUS_SUFFIX;
}

/** The last `maxBytes` of a file, starting at a line when the cut falls inside one. */
function lastBytes(path: string, maxBytes: number): Buffer {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const want = Math.min(size, maxBytes);
    const buf = Buffer.alloc(want);
    const got = readSync(fd, buf, 0, want, size - want);
    const out = buf.subarray(0, got);
    if (want === size) return out;
    const nl = out.indexOf(10);
    return nl >= 0 && nl < out.length - 1 ? out.subarray(nl + 1) : out;
  } finally {
    closeSync(fd);
  }
}

/**
 * Before a new run of a replica writes `logPath`: its old run (if it logged anything) becomes
 * the previous log, cut to maxBytes, and `logPath` starts empty. No engine writes the old file
 * then (a run of the same id is started only after the last one exited or was stopped).
 */
export function rotateForNewRun(logPath: string, maxBytes: number = PREVIOUS_LOGS.maxBytes): void {
  if (!existsSync(logPath) || statSync(logPath).size === 0) return;
  const prev = previousPathOf(logPath);
  const tmp = `${prev}.tmp`;
  writeFileSync(tmp, lastBytes(logPath, maxBytes), { mode: 0o600 });
  // A tmp file a crash left keeps its old mode through writeFileSync; engine logs are the owner's alone.
  chmodSync(tmp, 0o600);
  renameSync(tmp, prev);
  rmSync(logPath, { force: true });
}

/** A past run's log as the sweep knows it: its file name and when it was first seen over. */
export interface PastLog {
  name: string;
  seenAt: number;
}

/** Which past logs to delete: those kept longer than keepMs, then all but the maxFiles newest. Pure. */
export function pastLogsToDrop(logs: readonly PastLog[], now: number, limits: PreviousLogLimits): string[] {
  const drop: string[] = [];
  const kept: PastLog[] = [];
  for (const l of logs) {
    if (now - l.seenAt >= limits.keepMs) drop.push(l.name);
    else kept.push(l);
  }
  kept.sort((a, b) => b.seenAt - a.seenAt || (a.name < b.name ? -1 : 1));
  for (const l of kept.slice(limits.maxFiles)) drop.push(l.name);
  return drop;
}

/**
 * Looks over one log directory now and then (the agent calls sweep() on its Scheduler): notes
 * when each past run's log was first seen, cuts it to maxBytes, and deletes what the limits say.
 * A file is known by name and inode, so a previous log replaced by a newer run starts its time again.
 */
export class PastLogKeeper {
  private readonly seen = new Map<string, number>();
  constructor(
    private readonly dir: string,
    /** File stems (fileSafe ids) of replicas whose engine this agent runs now: their <stem>.log is no past run. */
    private readonly runningStems: () => ReadonlySet<string>,
    private readonly now: () => number,
    private readonly limits: PreviousLogLimits & { maxBytes: number } = PREVIOUS_LOGS,
  ) {}

  /** Deletes what is over its time or count; returns the file names deleted. */
  sweep(): string[] {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return [];
    }
    const running = this.runningStems();
    const now = this.now();
    const past: PastLog[] = [];
    const live = new Set<string>();
    for (const name of names) {
      const stem = name.endsWith(PREVIOUS_SUFFIX) ? null : name.endsWith(".log") ? name.slice(0, -4) : undefined;
      if (stem === undefined || (stem !== null && running.has(stem))) continue;
      const path = join(this.dir, name);
      let key: string;
      try {
        const st = statSync(path);
        if (!st.isFile()) continue;
        key = `${name}:${st.ino}`;
        if (st.size > this.limits.maxBytes) writeFileSync(path, lastBytes(path, this.limits.maxBytes));
      } catch {
        continue;
      }
      live.add(key);
      if (!this.seen.has(key)) this.seen.set(key, now);
      past.push({ name, seenAt: this.seen.get(key)! });
    }
    for (const key of [...this.seen.keys()]) if (!live.has(key)) this.seen.delete(key);
    const drop = pastLogsToDrop(past, now, this.limits);
    for (const name of drop) rmSync(join(this.dir, name), { force: true });
    return drop;
  }
}
