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

/** A duration given as "30m" / "15s" / "250ms", or as a number of seconds; yields milliseconds. */
export const Duration = z.union([z.string(), z.number()]).transform((v, ctx) => {
  if (typeof v === "number") {
    if (!Number.isFinite(v) || v < 0) {
      ctx.addIssue({ code: "custom", message: "must be a non-negative number of seconds" });
      return z.NEVER;
    }
    return Math.round(v * 1000);
  }
  const ms = parseDuration(v);
  if (ms === undefined) {
    ctx.addIssue({ code: "custom", message: `"${v.slice(0, 40)}" is not a duration (use e.g. 250ms, 15s, 30m, 1h)` });
    return z.NEVER;
  }
  return ms;
});

export const Labels = z
  .record(z.string().min(1).max(63), z.string().max(256))
  .refine((r) => Object.keys(r).length <= 64, "at most 64 labels");
