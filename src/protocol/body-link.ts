// The messages between the router thread and its body worker (src/router/body-worker.ts): a
// request body to read against the router's limits, and what was read of it (the facts the
// router routes by, or the OpenAI-shaped reply refusing it). Each side validates what arrives
// with these schemas; a message that fails is dropped (the router's deadline answers for it).

import { z } from "zod";

const Limits = z.object({ maxDepth: z.number().int().positive(), maxValues: z.number().int().positive() });

/** Router → worker: one body, a copy the worker may keep. */
export const BodyJob = z.object({
  id: z.number().int(),
  bytes: z.instanceof(Uint8Array),
  limits: Limits,
});
export type BodyJob = z.infer<typeof BodyJob>;

const Facts = z.object({
  model: z.string(),
  stream: z.boolean(),
  key: z.number().int(),
  previousResponseId: z.string().optional(),
  modelStart: z.number().int(),
  modelEnd: z.number().int(),
  streamOptions: z.enum(["usage", "other"]).optional(),
  maxOutput: z.number().nonnegative().optional(),
});

const Reply = z.object({ status: z.number().int(), headers: z.record(z.string(), z.string()), body: z.string() });

/** Worker → router: the body's facts, or the reply refusing it; for the job of the same id. */
export const BodyAnswer = z.union([z.object({ id: z.number().int(), facts: Facts }), z.object({ id: z.number().int(), reply: Reply })]);
export type BodyAnswer = z.infer<typeof BodyAnswer>;
