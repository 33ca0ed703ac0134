// A steady client for rolling-restart tests: a few loops each sending chat completions one after
// another, streamed and not in turn, to a router. A request that fails before its first byte (no
// answer, or an error status) is retried, as any client would, and counted; one that fails after
// (a stream cut, a short body) is a failure. stop() ends the loops and says what happened.

export interface SteadyLoadReport {
  /** Requests that got a whole answer. */
  ok: number;
  /** Attempts retried because they failed before the first byte of an answer. */
  retries: number;
  /** Requests that failed after their answer began, or whose retries ran out; each with why. */
  failures: string[];
  streamed: number;
  plain: number;
}

export interface SteadyLoadOptions {
  routerUrl: string;
  model: string;
  /** Loops sending at once (default 3). */
  concurrency?: number;
  /** Completion tokens per request (default 8). */
  maxTokens?: number;
  /** Attempts per request before it counts as failed (default 20). */
  attempts?: number;
  /** Between a failed attempt and the next (default 100 ms). */
  retryDelayMs?: number;
}

export interface SteadyLoad {
  stop(): Promise<SteadyLoadReport>;
  /** The report so far. */
  now(): SteadyLoadReport;
}

export function steadyLoad(o: SteadyLoadOptions): SteadyLoad {
  const report: SteadyLoadReport = { ok: 0, retries: 0, failures: [], streamed: 0, plain: 0 };
  let stopping = false;
  const attempts = o.attempts ?? 20;
  const body = (stream: boolean) => JSON.stringify({ model: o.model, stream, max_tokens: o.maxTokens ?? 8, messages: [{ role: "user", content: "hello" }] });

  /** One attempt: "ok", "retry" (failed before the first byte) or a failure's text. */
  async function attempt(stream: boolean): Promise<"ok" | "retry" | string> {
    let res: Response;
    try {
      res = await fetch(`${o.routerUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: body(stream) });
    } catch {
      return "retry";
    }
    if (res.status !== 200) {
      await res.arrayBuffer().catch(() => undefined);
      return "retry";
    }
    let text: string;
    try {
      text = await res.text();
    } catch (e) {
      return `${stream ? "stream" : "answer"} cut after its first byte: ${(e as Error).message}`;
    }
    if (stream) return text.includes("data: [DONE]") ? "ok" : `stream ended without [DONE]: ${JSON.stringify(text.slice(-200))}`;
    try {
      const j = JSON.parse(text) as { choices?: unknown[] };
      return Array.isArray(j.choices) && j.choices.length > 0 ? "ok" : `answer without choices: ${text.slice(0, 200)}`;
    } catch {
      return `answer not JSON: ${JSON.stringify(text.slice(0, 200))}`;
    }
  }

  async function loop(n: number): Promise<void> {
    let stream = n % 2 === 0;
    while (!stopping) {
      let done = false;
      for (let i = 0; i < attempts && !done; i++) {
        const r = await attempt(stream);
        if (r === "ok") {
          report.ok++;
          if (stream) report.streamed++;
          else report.plain++;
          done = true;
        } else if (r === "retry") {
          report.retries++;
          await Bun.sleep(o.retryDelayMs ?? 100);
        } else {
          report.failures.push(r);
          done = true;
        }
      }
      if (!done) report.failures.push(`${stream ? "streamed" : "plain"} request failed before its first byte ${attempts} times`);
      stream = !stream;
    }
  }

  const loops = Array.from({ length: o.concurrency ?? 3 }, (_, i) => loop(i));
  return {
    async stop() {
      stopping = true;
      await Promise.all(loops);
      return { ...report, failures: [...report.failures] };
    },
    now: () => ({ ...report, failures: [...report.failures] }),
  };
}
