// Small zod building blocks shared by several wire messages: names, durations, labels.

import { z } from "zod";
import { parseDuration } from "./duration";

/** Node, model, profile and replica names: what fits in a URL path segment and a log line. */
export const Name = z
  .string()
  .min(1, "must not be empty")
  .max(128, "must be at most 128 characters")
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:\/-]*$/, "may contain only letters, digits and . _ : / - and must start with a letter or digit")
  // Model names become paths under an agent's models dir: no way out of it.
  .refine((s) => !s.split("/").some((seg) => seg === "" || seg === "." || seg === ".."), "must not contain empty, '.' or '..' path segments");

/** A path-safe name (no slash), for things that appear as one URL segment. */
export const SegmentName = Name.refine((s) => !s.includes("/"), "must not contain '/'");

/** Ten years: longer than any timeout means anything, short enough to stay an exact integer. */
export const MAX_DURATION_MS = 10 * 365 * 86_400_000;

/** A duration given as "30m" / "15s" / "250ms", or as a number of seconds; yields milliseconds. */
export const Duration = z.union([z.string().max(64), z.number()]).transform((v, ctx) => {
  const ms = typeof v === "number" ? (Number.isFinite(v) && v >= 0 ? Math.round(v * 1000) : undefined) : parseDuration(v);
  if (ms === undefined) {
    ctx.addIssue({
      code: "custom",
      message: typeof v === "number" ? "must be a non-negative number of seconds" : `"${v.slice(0, 40)}" is not a duration (use e.g. 250ms, 15s, 30m, 1h)`,
    });
    return z.NEVER;
  }
  if (ms > MAX_DURATION_MS) {
    ctx.addIssue({ code: "custom", message: "must be at most 10 years" });
    return z.NEVER;
  }
  return ms;
});

/**
 * A string-keyed record that refuses the keys JavaScript treats specially, which zod's own
 * record would drop without a word ("__proto__"), so what is stored is what was sent.
 */
export function safeRecord<V extends z.ZodType>(key: z.ZodString, value: V) {
  return z.preprocess((v, ctx) => {
    if (v !== null && typeof v === "object" && !Array.isArray(v))
      for (const k of ["__proto__", "constructor", "prototype"])
        if (Object.hasOwn(v, k)) ctx.addIssue({ code: "custom", path: [k], message: `"${k}" is not allowed as a key` });
    return v;
  }, z.record(key, value));
}

export const Labels = safeRecord(z.string().min(1).max(63), z.string().max(256))
  .refine((r) => Object.keys(r).length <= 64, "at most 64 labels");

/**
 * The path of the first string (key or value, at any depth) holding a lone surrogate, or
 * undefined. Such strings are refused at the edge: SQLite would keep them as U+FFFD, so two
 * distinct values could be stored as one and what is read back would not be what was sent.
 */
export function loneSurrogatePath(v: unknown, path: (string | number)[] = [], depth = 0): (string | number)[] | undefined {
  if (depth > 256) return undefined;
  if (typeof v === "string") return v.isWellFormed() ? undefined : path;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const p = loneSurrogatePath(v[i], [...path, i], depth + 1);
      if (p) return p;
    }
  } else if (v !== null && typeof v === "object")
    for (const [k, e] of Object.entries(v)) {
      if (!k.isWellFormed()) return path;
      const p = loneSurrogatePath(e, [...path, k], depth + 1);
      if (p) return p;
    }
  return undefined;
}
