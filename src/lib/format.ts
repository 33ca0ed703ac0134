// Formatting for people, shared by the CLI, the dashboard, events and logs. A leaf: imports
// nothing.

/** "1 node", "3 nodes", "2 replicas"; pluralWord for the irregular ones. */
export function plural(n: number, word: string, pluralWord = `${word}s`): string {
  return `${n} ${n === 1 ? word : pluralWord}`;
}

/** Compact duration for people from seconds: 45s, 12m, 3h05m, 2d04h; "-" when negative (unknown). */
export function human(seconds: number): string {
  if (!(seconds >= 0)) return "-";
  if (seconds < 60) return `${Math.floor(seconds)}s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d${String(h % 24).padStart(2, "0")}h`;
}

/** Compact duration from milliseconds, never negative: 0s, 45s, 12m, 3h05m, 2d04h. */
export function humanMs(ms: number): string {
  return human(Math.max(0, Math.floor(ms / 1000)));
}

/** A configured duration as written in flags: 30s, 1500ms (exact, for messages about settings). */
export function exactDuration(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}

/** "12m ago" from an ISO time; "-" when it does not parse. */
export function ago(iso: string, now: number): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "-";
  return `${human(Math.max(0, Math.floor((now - t) / 1000)))} ago`;
}

/** Free text (reasons, errors) flattened to one line of at most max characters. */
export function oneLine(s: string, max = 100): string {
  const flat = s.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** The longest engine error text kept and shown (events, replica errors, heartbeats). */
export const ENGINE_ERROR_MAX = 300;

/** An error as one line for logs and messages: the message of an Error, a timeout said plainly. */
export function errorText(e: unknown): string {
  if (e instanceof Error) return e.name === "TimeoutError" ? "timed out" : e.message || e.name;
  return String(e);
}

/** Bytes as people read them: 0 B, 812 B, 1.2 KiB, 20 MiB, 3.4 GiB. */
export function bytes(n: number): string {
  if (!Number.isFinite(n) || n < 1024) return `${Math.max(0, Math.round(n))} B`;
  const units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v < 10 ? Number(v.toFixed(1)) : Math.round(v)} ${units[i]}`;
}
