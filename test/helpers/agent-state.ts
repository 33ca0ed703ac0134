// What an agent's state dir says about its replicas, for tests that read it from outside.

import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * How many times the agent started this replica: one header line per start in its log. A new
 * run moves the last one's log to <id>.previous.log, so both count.
 */
export function replicaStarts(stateDir: string, id: string): number {
  let n = 0;
  for (const f of [`${id}.log`, `${id}.previous.log`]) {
    try {
      n += readFileSync(join(stateDir, "logs", f), "utf8").split("=== llmgw: starting replica").length - 1;
    } catch {
      // not there
    }
  }
  return n;
}

/** Engine pids an agent recorded for its replicas, by replica id, from its state dir. */
export function enginePidsIn(stateDir: string): Map<string, number> {
  const d = join(stateDir, "replicas");
  const out = new Map<string, number>();
  if (!existsSync(d)) return out;
  for (const f of readdirSync(d).filter((x) => x.endsWith(".json"))) {
    try {
      const s = JSON.parse(readFileSync(join(d, f), "utf8")) as { pid: number; assignment: { id: string } };
      out.set(s.assignment.id, s.pid);
    } catch {
      // being rewritten; the next read has it
    }
  }
  return out;
}
