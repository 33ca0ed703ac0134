// Durations as people write them in flags, config and catalog files ("15s", "30m", "1h30m",
// "250ms"), turned into milliseconds. Kept free of zod so the CLI can use it without paying
// for zod's start-up cost.

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/y;

/** Parses a duration such as "15s" or "1h30m" into milliseconds; undefined when malformed. */
export function parseDuration(text: string): number | undefined {
  const s = text.trim();
  if (s === "" ) return undefined;
  if (s === "0") return 0;
  let total = 0;
  PART.lastIndex = 0;
  let pos = 0;
  while (pos < s.length) {
    PART.lastIndex = pos;
    const m = PART.exec(s);
    if (!m) return undefined;
    total += Number(m[1]) * UNIT_MS[m[2]!]!;
    pos = PART.lastIndex;
  }
  return Number.isFinite(total) ? Math.round(total) : undefined;
}

/** Renders milliseconds compactly for people: 0s, 45s, 12m, 3h05m, 2d04h. */
export function formatDuration(ms: number): string {
  const sec = Math.max(0, Math.floor(ms / 1000));
  if (sec < 60) return `${sec}s`;
  const min = Math.floor(sec / 60);
  if (min < 60) return `${min}m`;
  const h = Math.floor(min / 60);
  if (h < 24) return `${h}h${String(min % 60).padStart(2, "0")}m`;
  const d = Math.floor(h / 24);
  return `${d}d${String(h % 24).padStart(2, "0")}h`;
}
