// The router's body worker: a thread of its own that reads request bodies too large or too
// costly to parse on the router thread (body-reader.ts decides which), so that no body, however
// it nests or however many keys it holds, delays the answers to every other client. It reads
// each body as the router thread would (request-body.ts) and posts back what it found.

import { getPriority, setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import { BodyJob } from "../protocol/body-link";
import { openAIError } from "./errors";
import { type BodyRead, readBody } from "./request-body";

/**
 * How much lower this thread's CPU priority is than the router thread's (Linux: nice is per
 * thread, and lowering it needs no privilege): on a busy machine the thread answering everyone
 * runs first, and costly bodies are read with what CPU is left.
 */
const NICE_BELOW_ROUTER = 10;

function main(): void {
  const port = parentPort;
  if (!port) throw new Error("body-worker.ts runs only as a Worker");
  try {
    setPriority(0, Math.min(19, getPriority(0) + NICE_BELOW_ROUTER));
  } catch {
    // Runs at the router thread's priority: still off it.
  }
  port.on("message", (raw: unknown) => {
    const job = BodyJob.safeParse(raw);
    // Without a valid id there is nobody to answer: the router's deadline for the job does.
    if (!job.success) return;
    const { id, bytes, limits } = job.data;
    let read: BodyRead;
    try {
      read = readBody(bytes, limits);
    } catch (e) {
      read = { reply: openAIError(500, `internal error in the router reading the request body: ${(e as Error).message}`, { code: "internal_error" }) };
    }
    port.postMessage(read.facts !== undefined ? { id, facts: read.facts } : { id, reply: read.reply });
  });
}

main();
