// Request shapes of the admin API that are not catalog entries: query strings and small
// bodies. Catalog bodies use protocol/catalog.ts.

import { z } from "zod";
import { Printable } from "./common";

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
  tail: z.coerce.number().int().min(0).max(100_000).default(200),
  /** Keep the stream open and send new lines as the engine writes them. */
  follow: z.enum(["0", "1", "true", "false"]).default("0").transform((v) => v === "1" || v === "true"),
});
export type LogsQuery = z.infer<typeof LogsQuery>;
