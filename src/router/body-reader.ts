// Where the router reads a request body. A small body that the scan (body-scan.ts) finds cheap
// (at most INLINE_BYTES and INLINE_VALUES) is read on the router thread at once: most chat
// requests, for which a hop to another thread would cost more than the parse. Every other body
// goes to the body worker (body-worker.ts), one thread of its own, so however a body nests or
// however many keys it holds, the router thread keeps answering everyone else while it is read:
// an object of 100,000 distinct keys costs 50-100 ms to parse, a 4 MiB image 5 ms. The worker
// gets a copy of the bytes (the router keeps the original to send on) and sends back the facts.
//
// Should the worker fail to start or die, its bodies are read on the router thread instead
// (still within the limits) and the failure logged: slower, never lost.

import { Worker } from "node:worker_threads";
import type { Scheduler, Timer } from "../lib/scheduler";
import { BodyAnswer } from "../protocol/body-link";
import type { JsonLimits } from "./body-scan";
import { scanJson } from "./body-scan";
import { openAIError } from "./errors";
import { type BodyRead, readBody } from "./request-body";

/** Bodies up to this size may be read on the router thread: its worst case within INLINE_VALUES is about 0.1 ms there. */
export const INLINE_BYTES = 16 * 1024;
/** ... and hold at most this many values: parse time follows values, distinct keys above all (~0.4 µs each). */
export const INLINE_VALUES = 256;
/** A body the worker has not answered for within this is answered 503 (the worker is stuck or far behind). */
const DEADLINE_MS = 30_000;
/** Worker failures after which bodies are read on the router thread for good. */
const MAX_FAILURES = 3;

export interface BodyReaderOptions {
  limits: JsonLimits;
  scheduler: Scheduler;
  log?: { warn(o: object, m?: string): void };
  /** Bodies larger than this are never read on the calling thread (default INLINE_BYTES); Infinity: every body is, with no worker. */
  inlineBytes?: number;
  /** The worker's module (tests: one that misbehaves); default body-worker.ts's. */
  module?: string;
}

interface Job {
  bytes: Uint8Array;
  then: (read: BodyRead) => void;
  timer: Timer;
}

/**
 * The worker's module. From source, the file beside this one; in the compiled binary (build.ts
 * lists it as an entrypoint) its bundle under the binary's embedded root, laid out as src/ is:
 * the bundler does not rewrite the path of a node:worker_threads Worker, and this code runs in
 * bundles at different depths (the router thread's, the main one's).
 */
function workerModule(): string {
  const here = new URL(import.meta.url).pathname;
  const root = /^.*?\/\$bunfs\/root\//.exec(here);
  if (root) return `${root[0]}router/body-worker.js`;
  return new URL("./body-worker.ts", import.meta.url).pathname;
}

export class BodyReader {
  private worker: Worker | undefined;
  private readonly jobs = new Map<number, Job>();
  private nextId = 1;
  private failures = 0;
  private stopped = false;
  private readonly inlineBytes: number;
  private readonly limits: JsonLimits;
  /** The limits of a body read on this thread: the values counted only as far as is cheap. */
  private readonly inlineLimits: JsonLimits;

  constructor(private readonly o: BodyReaderOptions) {
    this.limits = o.limits;
    this.inlineBytes = o.inlineBytes ?? INLINE_BYTES;
    this.inlineLimits = { maxDepth: o.limits.maxDepth, maxValues: Math.min(o.limits.maxValues, INLINE_VALUES) };
  }

  /**
   * The body read here and now when that is cheap (or when there is no worker to send it to);
   * undefined: it must go to the worker (readOff).
   */
  readNow(bytes: Uint8Array): BodyRead | undefined {
    if (this.failures >= MAX_FAILURES || this.inlineBytes === Number.POSITIVE_INFINITY) return readBody(bytes, this.limits);
    if (bytes.byteLength > this.inlineBytes) return undefined;
    const scan = scanJson(bytes, this.inlineLimits);
    // Over the cheap share of the value limit but maybe not over the limit: the worker counts on.
    if (scan.over === "values" && this.limits.maxValues > INLINE_VALUES) return undefined;
    return readBody(bytes, this.limits, scan);
  }

  /** Reads the body on the worker; `then` is called once, from a later turn of the event loop. */
  readOff(bytes: Uint8Array, then: (read: BodyRead) => void): void {
    const w = this.spawn();
    if (w === undefined) return then(readBody(bytes, this.limits));
    const id = this.nextId++;
    const timer = this.o.scheduler.after(DEADLINE_MS, () => this.expire(id));
    this.jobs.set(id, { bytes, then, timer });
    // A copy, handed over rather than cloned again: the original goes to the engine.
    const copy = bytes.slice();
    w.postMessage({ id, bytes: copy, limits: this.limits }, [copy.buffer]);
  }

  /** Bodies with the worker now. */
  get pending(): number {
    return this.jobs.size;
  }

  stop(): void {
    this.stopped = true;
    for (const j of this.jobs.values()) j.timer.cancel();
    this.jobs.clear();
    const w = this.worker;
    this.worker = undefined;
    void w?.terminate();
  }

  private spawn(): Worker | undefined {
    if (this.worker !== undefined) return this.worker;
    if (this.stopped) return undefined;
    let w: Worker;
    try {
      w = new Worker(this.o.module ?? workerModule());
    } catch (e) {
      this.failed(undefined, e as Error);
      return undefined;
    }
    // Idle, it must not keep a process from exiting; a body it is reading has a socket that does.
    w.unref();
    w.on("message", (raw: unknown) => this.answer(raw));
    w.on("error", (e: Error) => this.failed(w, e));
    w.on("exit", (code: number) => this.failed(w, new Error(`exited with code ${code}`)));
    this.worker = w;
    return w;
  }

  private answer(raw: unknown): void {
    const a = BodyAnswer.safeParse(raw);
    if (!a.success) {
      this.o.log?.warn({ issues: a.error.issues.slice(0, 3) }, "body worker: dropped a malformed answer");
      return;
    }
    const job = this.jobs.get(a.data.id);
    // Answered already, by the deadline.
    if (job === undefined) return;
    this.jobs.delete(a.data.id);
    job.timer.cancel();
    job.then("facts" in a.data ? { facts: a.data.facts } : { reply: a.data.reply });
  }

  private expire(id: number): void {
    const job = this.jobs.get(id);
    if (job === undefined) return;
    this.jobs.delete(id);
    this.o.log?.warn({ pending: this.jobs.size }, `body worker: no answer within ${DEADLINE_MS / 1000} s`);
    job.then({ reply: openAIError(503, "the router could not read the request body in time; try again", { code: "body_read_timeout", headers: { "retry-after": "1" } }) });
  }

  /** The worker failed to start or died: what it held is read here, and the next body starts a new one. */
  private failed(w: Worker | undefined, e: Error): void {
    if (this.stopped || (w !== undefined && w !== this.worker)) return;
    this.worker = undefined;
    this.failures++;
    const forGood = this.failures >= MAX_FAILURES;
    this.o.log?.warn({ err: e.message, failures: this.failures }, forGood ? "body worker failed; request bodies are read on the router thread from now on" : "body worker failed; starting another for the next body");
    void w?.terminate();
    const jobs = [...this.jobs.values()];
    this.jobs.clear();
    for (const j of jobs) {
      j.timer.cancel();
      j.then(readBody(j.bytes, this.limits));
    }
  }
}
