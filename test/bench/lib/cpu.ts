// CPU time of a process group and kernel TCP counters from /proc, so a bench can say which
// process spent a core and whether connections were dropped.

import { readdirSync, readFileSync } from "node:fs";

const TICK = 100; // USER_HZ on Linux

/** utime + stime in seconds of every process whose process group is pgid (a detached child's pid). */
export function groupCpuSeconds(pgid: number): number {
  const t = groupCpuTimes(pgid);
  return t.user + t.system;
}

/**
 * User and system CPU seconds of every process whose process group is pgid, apart: for a proxy,
 * system time is mostly the sockets' (the same syscalls cost every proxy about the same), user
 * time its own code.
 */
export function groupCpuTimes(pgid: number): { user: number; system: number } {
  let user = 0;
  let system = 0;
  for (const d of readdirSync("/proc")) {
    if (d.charCodeAt(0) < 48 || d.charCodeAt(0) > 57) continue;
    let s: string;
    try {
      s = readFileSync(`/proc/${d}/stat`, "utf8");
    } catch {
      continue;
    }
    // Fields after the command name, which is in parentheses and may hold spaces.
    const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
    // f[0] is field 3 (state): pgrp is field 5, utime 14, stime 15.
    if (Number(f[2]) !== pgid) continue;
    user += Number(f[11]);
    system += Number(f[12]);
  }
  return { user: user / TICK, system: system / TICK };
}

/** The kernel's TCP extension counters (ListenOverflows, ListenDrops, TCPSynRetrans, …), machine-wide. */
export function tcpExt(): Record<string, number> {
  const lines = readFileSync("/proc/net/netstat", "utf8").split("\n").filter((l) => l.startsWith("TcpExt:"));
  const names = lines[0]!.split(" ").slice(1);
  const values = lines[1]!.split(" ").slice(1).map(Number);
  return Object.fromEntries(names.map((n, i) => [n, values[i]!]));
}

/**
 * The share of one core (all cores when cpu is undefined) the hypervisor took between two calls
 * (steal time in /proc/stat): on a virtual machine, time a process was ready and not run.
 */
export function stealMeter(cpu?: number): () => number {
  const name = cpu === undefined ? "cpu" : `cpu${cpu}`;
  const read = () => {
    const line = readFileSync("/proc/stat", "utf8").split("\n").find((l) => l.startsWith(`${name} `));
    return line ? Number(line.trim().split(/\s+/)[8]) / TICK : NaN;
  };
  const t0 = performance.now();
  const s0 = read();
  return () => (read() - s0) / ((performance.now() - t0) / 1000);
}

/** Busy CPU seconds of one core (all cores when cpu is undefined) since boot, from /proc/stat. */
export function coreBusySeconds(cpu?: number): number {
  const name = cpu === undefined ? "cpu" : `cpu${cpu}`;
  const line = readFileSync("/proc/stat", "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${name} `));
  if (!line) return NaN;
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal …: busy is all but idle and iowait.
  return (f[0]! + f[1]! + f[2]! + f[5]! + f[6]! + f[7]!) / TICK;
}

/**
 * How busy other people's processes kept a core (or the machine) between two calls, in cores:
 * the core's busy time less what the given process groups spent. The benches share the machine,
 * so this says how much to trust a figure. For one core, pass only the groups pinned to it;
 * this process and its reaped children count when includeSelf (default: machine-wide only).
 */
export function othersMeter(pgids: () => number[], cpu?: number, includeSelf = cpu === undefined): () => number {
  const self = () => (includeSelf ? selfCpuSeconds() : 0);
  const t0 = performance.now();
  const b0 = coreBusySeconds(cpu);
  const ours0 = pgids().reduce((a, p) => a + groupCpuSeconds(p), 0) + self();
  return () => {
    const secs = (performance.now() - t0) / 1000;
    const busy = coreBusySeconds(cpu) - b0;
    const ours = pgids().reduce((a, p) => a + groupCpuSeconds(p), 0) + self() - ours0;
    return Math.max(0, (busy - ours) / secs);
  };
}

/** This process and its reaped children (wrk, clients that exited), in CPU seconds. */
function selfCpuSeconds(): number {
  const s = readFileSync("/proc/self/stat", "utf8");
  const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
  // utime 14, stime 15, cutime 16, cstime 17 → f[11..14].
  return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / TICK;
}
