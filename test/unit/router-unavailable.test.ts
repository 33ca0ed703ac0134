// The router's answer for a model waiting will not bring back (never, parked), and what the three
// client families make of it with their default retries: each library runs in-process with a
// fetch that answers that reply and counts the calls. One call each, the reason in the error.
// The same through the compiled binary, counted at the router: test/e2e/client-retries.test.ts.

import { describe, expect, test } from "bun:test";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { APICallError, generateText } from "ai";
import OpenAI from "openai";
import { openAIError, type Reply } from "../../src/router/errors";
import { unavailableReply } from "../../src/router/unavailable";

const NEVER = { kind: "never" as const, reason: "'big' can never fit on this fleet: no node has H200-141GB GPUs; waiting will not help (add such nodes, or change the model's profiles)" };
const PARKED = { kind: "parked" as const, reason: "'broken' is parked after 5 failed starts: CUDA out of memory; it is not retried until an operator runs `llmgw models unpark broken`" };

/** A fetch that answers every request with `reply`, counting them. */
function answering(reply: Reply): { fetch: typeof fetch; calls: () => number } {
  let n = 0;
  const f = async (_input: string | URL | Request, init?: RequestInit) => {
    n++;
    // The body is read as a server would, so a client's request is complete before it is answered.
    if (init?.body !== undefined) await new Response(init.body).text();
    return new Response(reply.body, { status: reply.status, headers: reply.headers });
  };
  return { fetch: Object.assign(f, { preconnect: fetch.preconnect }), calls: () => n };
}

const BASE = "http://127.0.0.1:9/v1";
/** Long enough for one answer; a client that retries is cut short and shows its count. */
const CALL_MS = 3_000;

describe("the answer for a model waiting will not bring back", () => {
  test("400 in OpenAI's shape: the reason, invalid_request_error, param model, a code per kind; x-should-retry: false, no Retry-After", () => {
    for (const [u, code] of [[NEVER, "model_cannot_run"], [PARKED, "model_parked"]] as const) {
      const r = unavailableReply(u);
      expect(r.status).toBe(400);
      expect(r.headers).toEqual({ "content-type": "application/json", "x-should-retry": "false" });
      expect(JSON.parse(r.body)).toEqual({ error: { message: u.reason, type: "invalid_request_error", param: "model", code } });
    }
  });

  for (const u of [NEVER, PARKED]) {
    describe(`${u.kind}: one request per call with each client's default retries, the reason in its error`, () => {
      test("the official openai SDK", async () => {
        const server = answering(unavailableReply(u));
        const client = new OpenAI({ baseURL: BASE, apiKey: "x", fetch: server.fetch });
        const err = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }, { signal: AbortSignal.timeout(CALL_MS) }).catch((e: unknown) => e);
        expect(server.calls()).toBe(1);
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        expect((err as Error).message).toContain(u.reason);
      });

      test("the Vercel AI SDK: generateText with @ai-sdk/openai", async () => {
        const server = answering(unavailableReply(u));
        const provider = createOpenAI({ baseURL: BASE, apiKey: "x", fetch: server.fetch });
        const err = await generateText({ model: provider("m"), prompt: "hi", abortSignal: AbortSignal.timeout(CALL_MS) }).catch((e: unknown) => e);
        expect(server.calls()).toBe(1);
        expect(APICallError.isInstance(err)).toBe(true);
        expect((err as APICallError).isRetryable).toBe(false);
        expect((err as Error).message).toBe(u.reason);
      });

      test("LangChain: ChatOpenAI.invoke", async () => {
        const server = answering(unavailableReply(u));
        const chat = new ChatOpenAI({ model: "m", apiKey: "x", configuration: { baseURL: BASE, fetch: server.fetch } });
        const err = await chat.invoke("hi", { signal: AbortSignal.timeout(CALL_MS) }).catch((e: unknown) => e);
        expect(server.calls()).toBe(1);
        expect((err as Error).message).toContain(u.reason);
      });
    });
  }

  test("what waiting changes is still a 503 with Retry-After, which the clients do retry", async () => {
    const later = openAIError(503, "2 requests are already waiting for 'm' to start; try again shortly", { code: "too_many_waiting", headers: { "retry-after": "10" } });
    const shouldRetry = (c: OpenAI, r: Response) => (c as unknown as { shouldRetry(r: Response): Promise<boolean> }).shouldRetry(r);
    const client = new OpenAI({ baseURL: BASE, apiKey: "x" });
    expect(await shouldRetry(client, new Response(later.body, { status: later.status, headers: later.headers }))).toBe(true);
    const server = answering(later);
    const err = await generateText({ model: createOpenAI({ baseURL: BASE, apiKey: "x", fetch: server.fetch })("m"), prompt: "hi", maxRetries: 0 }).catch((e: unknown) => e);
    expect((err as APICallError).isRetryable).toBe(true);
  });
});
