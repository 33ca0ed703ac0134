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
