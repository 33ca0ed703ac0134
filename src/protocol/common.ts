// Small zod building blocks shared by several wire messages: names, durations, labels, and
// the printable text that anything shown to an operator must be.
//
// src/protocol holds one zod schema per wire message shared by two roles (heartbeat, catalog,
// admin views, routing interfaces) and the interfaces where control and router meet. It may
// import zod and lib only: every role may import it, it imports no role.

import { z } from "zod";
import { firstUnsafe, safeText } from "../lib/text";
import { parseDuration } from "./duration";

/**
 * One line of printable text of at most `max` characters: no C0/C1 control, no DEL, no bidi
 * override or isolate, no line separator (see lib/text.ts), since it ends up in an operator's
 * terminal. Refused, not repaired, naming the character and where it is.
 */
export function Printable(max: number) {
  return z
    .string()
    .max(max, `must be at most ${max} characters`)
    .superRefine((s, ctx) => {
      const bad = firstUnsafe(s);
      if (bad) ctx.addIssue({ code: "custom", message: `must be printable text: control or bidi character ${bad.code} at position ${bad.at}` });
    });
}

/**
 * Text that may span lines, such as the tail of an engine's stderr: accepted whatever it holds
 * and neutralised, not refused, since one colour code or progress bar from an engine must not
 * cost a node its heartbeat. Newline and tab stay, CR becomes a newline, every other control
 * is spelled out (`\x1b`); the result keeps its last `max` characters (the end of a log is
 * where the reason is).
 */
export function PrintableMultiline(max: number) {
  return z
    .string()
    .max(max, `must be at most ${max} characters`)
    .overwrite((s) => {
      const clean = safeText(s, { multiline: true });
      return clean.length > max ? clean.slice(-max) : clean;
    });
}

/** Node, model, profile and replica names: what fits in a URL path segment and a log line. */
export const Name = z
  .string()
  .min(1, "must not be empty")
  .max(128, "must be at most 128 characters")
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:\/-]*$/, "may contain only letters, digits and . _ : / - and must start with a letter or digit")
  // Model names become paths under an agent's models dir: no way out of it.
  .refine((s) => !s.split("/").some((seg) => seg === "" || seg === "." || seg === ".."), "must not contain empty, '.' or '..' path segments");

/**
 * A node's data-plane address as an operator allows it (`llmgw nodes allow-address`): an IP
 * literal or a host name. It becomes an engine's argument (a multi-node leader's address), so it
 * never starts with "-" or anything else that is neither a letter, a digit, ":" nor "[".
 */
export const NodeAddress = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[A-Za-z0-9:\[][A-Za-z0-9.:\-\[\]%]*$/, "must be an IP address or a host name");

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

/**
 * Node labels. Keys are checked here rather than by the record's key schema, whose issue would
 * say only "Invalid key in record"; the path names the key as it can be shown (sanitised).
 */
export const Labels = safeRecord(z.string(), Printable(256))
  .superRefine((r, ctx) => {
    for (const k of Object.keys(r)) {
      const bad = firstUnsafe(k);
      const problem =
        k.length === 0 ? "label key must not be empty" : k.length > 63 ? "label key must be at most 63 characters" : bad ? `label key must be printable text: control or bidi character ${bad.code} at position ${bad.at}` : undefined;
      if (problem) ctx.addIssue({ code: "custom", path: [safeText(k.slice(0, 80))], message: problem });
    }
  })
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
