// Request shapes of the admin API that are not catalog entries: query strings and small
// bodies. Catalog bodies use protocol/catalog.ts.

import { z } from "zod";

export const EventsQuery = z.object({
  /** Return events after this id, oldest first (for following). */
  after: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  subject: z.string().max(256).optional(),
});
export type EventsQuery = z.infer<typeof EventsQuery>;

export const ReplicasQuery = z.object({ model: z.string().min(1).max(256).optional() });
