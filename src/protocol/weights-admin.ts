// The operator's side of weights: `llmgw weights ls|pull|rm` and the admin API behind them
// (GET /api/v1/weights, POST /api/v1/weights/pull, POST /api/v1/weights/remove), the removals the
// head node asks of an agent and what the agent says became of them, and the Weights line of
// the summary.

import { z } from "zod";
import { SegmentName } from "./common";

const Repo = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$/, "must be ORG/NAME");
const Commit = z.string().regex(/^[0-9a-f]{40}$/, "must be a 40-character lowercase hex commit hash");

/** A revision the head node asks a node to remove. */
export const WeightsRemoval = z.object({ repo: Repo, revision: Commit });
export type WeightsRemoval = z.infer<typeof WeightsRemoval>;

/** What the agent did with a removal: null error when removed (or already gone). */
export const WeightsRemoved = WeightsRemoval.extend({ error: z.string().max(512).nullable() });
export type WeightsRemoved = z.infer<typeof WeightsRemoved>;

/** One node's copy of one revision, as `weights ls` and `describe model` show it. */
export const WeightsNodeViewSchema = z.object({
  node: z.string(),
  fabrics: z.array(z.string()),
  state: z
    .enum(["present", "fetching", "waiting", "blocked", "partial", "absent"])
    .describe("present: every file verified; fetching: files moving; waiting/blocked: wanted, nothing moving (see reason); partial: some files, not wanted; absent: none."),
  percent: z.number().nullable().describe("Bytes present (and moving) of the revision's size, in percent; null when the size is not known."),
  bytes_present: z.number(),
  rate: z.number().nullable().describe("Bytes per second of the files moving now; null when none moves."),
  from: z.array(z.string()).describe('Where the moving files come from: "hub" or a node\'s name.'),
  estimate_seconds: z.number().nullable(),
  reason: z.string().nullable(),
  seeded: z.boolean().describe("Asked for by `weights pull` (kept while the head node runs)."),
});
export type WeightsNodeView = z.infer<typeof WeightsNodeViewSchema>;

/** One revision of a Hub repository, as `GET /api/v1/weights` lists it. */
export const WeightsRowViewSchema = z.object({
  models: z.array(z.string()).describe("The catalog models whose weights these are (none: no model names it now)."),
  repo: z.string(),
  revision: z.string(),
  size: z.number().nullable().describe("Bytes of the whole revision; null while its file list is not known."),
  fabrics: z.array(z.string()).describe("The fabrics where a node holds it whole."),
  last_used: z.string().nullable().describe("When a replica last used it on any node (RFC 3339); null if none has."),
  nodes: z.array(WeightsNodeViewSchema).describe("Every node, in name order."),
});
export type WeightsRowView = z.infer<typeof WeightsRowViewSchema>;

/** POST /api/v1/weights/pull: a model's weights onto nodes ahead of need (a fabric's nodes, or the nodes named). */
export const WeightsPullBody = z
  .object({
    model: z.string().min(1).max(256),
    fabric: z.string().min(1).max(128).optional(),
    nodes: z.array(SegmentName).min(1).max(1024).optional(),
  })
  .strict()
  .refine((b) => (b.fabric === undefined) !== (b.nodes === undefined), { message: "give either fabric or nodes (one of the two)", path: ["fabric"] });
export type WeightsPullBody = z.infer<typeof WeightsPullBody>;

export const WeightsPullResultSchema = z.object({ model: z.string(), repo: z.string(), revision: z.string(), nodes: z.array(z.string()), message: z.string() });
export type WeightsPullResult = z.infer<typeof WeightsPullResultSchema>;

/** POST /api/v1/weights/remove: a revision off one node's disk; MODEL is a catalog model or a repository ORG/NAME[@COMMIT]. */
export const WeightsRemoveBody = z.object({ model: z.string().min(1).max(256), node: SegmentName }).strict();
export type WeightsRemoveBody = z.infer<typeof WeightsRemoveBody>;

export const WeightsRemoveResultSchema = z.object({ node: z.string(), repo: z.string(), revisions: z.array(z.string()), message: z.string() });
export type WeightsRemoveResult = z.infer<typeof WeightsRemoveResultSchema>;

/** The summary's Weights line: what moves now across the fleet. */
export const WeightsInFlightSchema = z.object({
  files: z.number(),
  bytes_done: z.number(),
  bytes_total: z.number(),
  rate: z.number().describe("Bytes per second, summed over the nodes."),
  slowest_seconds: z.number().nullable().describe("Seconds until the slowest node's last byte at its present rate; null when one does not move."),
  slowest: z.object({ node: z.string(), repo: z.string(), revision: z.string() }).nullable(),
});
export type WeightsInFlight = z.infer<typeof WeightsInFlightSchema>;
