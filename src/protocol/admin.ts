// Request shapes of the admin API that are not catalog entries: query strings and small
// bodies. Catalog bodies use protocol/catalog.ts.

import { z } from "zod";
import { MAX_DURATION_MS, NodeAddress, Printable } from "./common";
import { LOG_TAIL_DEFAULT } from "./defaults";
import { parseDuration } from "./duration";
import { KEY_TIERS, type UsageLimits } from "./routing";

/** The periods a budget may run over (UsageLimits.budgetPeriod). */
export const BUDGET_PERIODS = ["day", "week", "month"] as const satisfies readonly NonNullable<UsageLimits["budgetPeriod"]>[];

export const EventsQuery = z.object({
  /** Return events after this id, oldest first (for following). */
  after: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  subject: z.string().max(256).optional(),
});
export type EventsQuery = z.infer<typeof EventsQuery>;

export const ReplicasQuery = z.object({ model: z.string().min(1).max(256).optional() });

const KeyName = z.string().min(1).max(64).regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, "may contain only letters, digits and . _ - and must start with a letter or digit");

/** Most models a key may name. */
export const MAX_KEY_MODELS = 256;

const Count = z.number().int("must be a whole number").positive("must be a positive number").max(Number.MAX_SAFE_INTEGER);
const GpuHours = z.number().positive("must be a positive number").finite();

/** What a key or a team may use; each limit absent: no limit. */
const LimitFields = {
  /** Requests per minute. */
  rpm: Count.optional(),
  /** Tokens (prompt and completion) per minute. */
  tpm: Count.optional(),
  /** Requests in flight at once. */
  max_concurrent: Count.optional(),
  /** Tokens per budget period. */
  budget_tokens: Count.optional(),
  /** GPU-hours per budget period. */
  budget_gpu_hours: GpuHours.optional(),
  /** The budget's period; month when not given. */
  budget_period: z.enum(BUDGET_PERIODS).optional(),
  /** The router's admission tier: interactive requests are admitted before batch ones. */
  priority: z.enum(KEY_TIERS).optional(),
};

/** The same limits in a PATCH: null clears one (no limit), absent keeps it. */
const LimitPatchFields = {
  rpm: Count.nullable().optional(),
  tpm: Count.nullable().optional(),
  max_concurrent: Count.nullable().optional(),
  budget_tokens: Count.nullable().optional(),
  budget_gpu_hours: GpuHours.nullable().optional(),
  budget_period: z.enum(BUDGET_PERIODS).nullable().optional(),
  priority: z.enum(KEY_TIERS).nullable().optional(),
};

const Models = z.array(Printable(256).min(1, "a model name may not be empty")).min(1, "name at least one model, or leave models out").max(MAX_KEY_MODELS, `a key may name at most ${MAX_KEY_MODELS} models`);

/**
 * When a key stops working: a duration from now ("30d", "12h") or an RFC 3339 time
 * ("2027-01-31T00:00:00Z"). Parsed here; the control plane turns a duration into a time by its clock.
 */
export const Expires = z
  .string()
  .max(64)
  .transform((v, ctx): { inMs: number } | { at: number } => {
    const ms = parseDuration(v);
    if (ms !== undefined && ms > 0 && ms <= MAX_DURATION_MS) return { inMs: ms };
    if (/^\d{4}-\d{2}-\d{2}T/.test(v)) {
      const at = Date.parse(v);
      if (Number.isFinite(at)) return { at };
    }
    ctx.addIssue({ code: "custom", message: `"${v.slice(0, 40)}" is neither a duration (e.g. 30d, 12h) nor an RFC 3339 time (e.g. 2027-01-31T00:00:00Z)` });
    return z.NEVER;
  });

export const CreateKeyBody = z.strictObject({
  name: KeyName,
  /** Bind the key to one pool: its requests see only that pool's models. */
  pool: Printable(64).min(1).optional(),
  /** The team the key belongs to (it must exist): held to the team's limits too. */
  team: Printable(64).min(1).optional(),
  /** The models (names or aliases) the key may use; absent: every model its pool offers. */
  models: Models.optional(),
  /** When the key stops working: a duration from now (30d) or an RFC 3339 time. */
  expires: Expires.optional(),
  ...LimitFields,
});
export type CreateKeyBody = z.infer<typeof CreateKeyBody>;

/** `PATCH /keys/{name}`: what it names changes, null clears it, absent keeps it. */
export const UpdateKeyBody = z.strictObject({
  pool: Printable(64).min(1).nullable().optional(),
  team: Printable(64).min(1).nullable().optional(),
  models: Models.nullable().optional(),
  expires: Expires.nullable().optional(),
  ...LimitPatchFields,
});
export type UpdateKeyBody = z.infer<typeof UpdateKeyBody>;

export const CreateTeamBody = z.strictObject({
  name: KeyName,
  ...LimitFields,
});
export type CreateTeamBody = z.infer<typeof CreateTeamBody>;

/** `PATCH /teams/{name}`. */
export const UpdateTeamBody = z.strictObject(LimitPatchFields);
export type UpdateTeamBody = z.infer<typeof UpdateTeamBody>;

export const LogsQuery = z.object({
  /** Lines from the end of the log to start with. */
  tail: z.coerce.number().int().min(0).max(100_000).default(LOG_TAIL_DEFAULT),
  /** Keep the stream open and send new lines as the engine writes them. */
  follow: z.enum(["0", "1", "true", "false"]).default("0").transform((v) => v === "1" || v === "true"),
  /**
   * The log of the replica's past run: the run before the current one, or the last run of a
   * replica whose engine has exited or that was stopped (its agent keeps it a while).
   */
  previous: z.enum(["0", "1", "true", "false"]).default("0").transform((v) => v === "1" || v === "true"),
}).refine((q) => !(q.previous && q.follow), { path: ["follow"], message: "a previous run's log is complete: give previous or follow, not both" });
export type LogsQuery = z.infer<typeof LogsQuery>;

const Flag = z.enum(["0", "1", "true", "false"]).default("0").transform((v) => v === "1" || v === "true");

/** `DELETE /nodes/{name}?force=1`: without force, a node that runs replicas is not deleted. */
export const DeleteNodeQuery = z.object({
  /** Delete even while replicas run on it: they are stopped and placed elsewhere. */
  force: Flag,
});

/** `DELETE /teams/{name}?force=1`: without force, a team that still has keys is not deleted. */
export const DeleteTeamQuery = z.object({
  /** Delete it even so: its keys are revoked with it. */
  force: Flag,
});

/** `POST /apply?dry_run=1`: validate and say what would change and where new replicas would go, writing nothing. */
export const ApplyQuery = z.object({
  dry_run: Flag,
});

/** `PUT /nodes/{name}/address`: the data-plane address a node may report besides its heartbeats' source. */
export const AllowAddressBody = z.strictObject({
  address: NodeAddress,
});
export type AllowAddressBody = z.infer<typeof AllowAddressBody>;

export const NodeDeletedSchema = z.object({ node: z.string(), stopped: z.array(z.string()), message: z.string() });
export type NodeDeleted = z.infer<typeof NodeDeletedSchema>;

export const NodeApprovedSchema = z.object({ node: z.string(), changed: z.boolean(), message: z.string() });
export type NodeApproved = z.infer<typeof NodeApprovedSchema>;

export const NodeAddressResultSchema = z.object({ node: z.string(), address: z.string().nullable(), changed: z.boolean(), message: z.string() });
export type NodeAddressResult = z.infer<typeof NodeAddressResultSchema>;

export const NodeAddressSchema = z.object({ node: z.string(), address: z.string() });
export const NodeAddressListSchema = z.array(NodeAddressSchema);

/** `POST /join-token/rotate`: where the new token is; the token itself is not in the answer. */
export const JoinTokenRotatedSchema = z.object({ path: z.string(), message: z.string() });
export type JoinTokenRotated = z.infer<typeof JoinTokenRotatedSchema>;

/** How `GET /usage` may group the ledger's rows. */
export const USAGE_GROUPS = ["team", "key", "model", "pool"] as const;

/** `GET /usage`: the ledger's hourly rows of the last `since` (a duration, default 24h), grouped by `by` when given. */
export const UsageQuery = z.object({
  since: z
    .string()
    .max(64)
    .default("24h")
    .transform((v, ctx) => {
      const ms = parseDuration(v);
      if (ms !== undefined && ms > 0 && ms <= MAX_DURATION_MS) return ms;
      ctx.addIssue({ code: "custom", message: `"${v.slice(0, 40)}" is not a duration (e.g. 24h, 7d, 90m)` });
      return z.NEVER;
    }),
  by: z.enum(USAGE_GROUPS).optional(),
});
