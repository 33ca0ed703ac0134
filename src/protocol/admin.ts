// Request shapes of the admin API that are not catalog entries: query strings and small
// bodies. Catalog bodies use protocol/catalog.ts.

import { z } from "zod";
import { NodeAddress, Printable } from "./common";
import { LOG_TAIL_DEFAULT } from "./defaults";

export const EventsQuery = z.object({
  /** Return events after this id, oldest first (for following). */
  after: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  subject: z.string().max(256).optional(),
});
export type EventsQuery = z.infer<typeof EventsQuery>;

export const ReplicasQuery = z.object({ model: z.string().min(1).max(256).optional() });

export const CreateKeyBody = z.strictObject({
  name: z.string().min(1).max(64).regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, "may contain only letters, digits and . _ - and must start with a letter or digit"),
  /** Bind the key to one pool: its requests see only that pool's models. */
  pool: Printable(64).min(1).optional(),
});
export type CreateKeyBody = z.infer<typeof CreateKeyBody>;

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
