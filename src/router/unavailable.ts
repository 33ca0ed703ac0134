// The router's answer for a model that waiting will not bring back: one that can never run on
// this fleet, or one parked after failing every start. Such a request is answered at once, in
// OpenAI's error shape with the reason, and with a status that no client retries: a retry only
// makes the caller wait longer for the same answer.
//
// What the client families retry (read in their code, and pinned by test/unit/router-unavailable.test.ts
// and test/e2e/client-retries.test.ts):
// - the official OpenAI SDKs: 408, 409, 429 and every 5xx, unless the answer says
//   `x-should-retry: false`;
// - the Vercel AI SDK (APICallError.isRetryable): 408, 409, 429 and every 5xx, headers aside;
// - LangChain (@langchain/core's AsyncCaller, 6 retries by default): everything but 400–407,
//   409 and 413 (and @langchain/openai reads 401 as a wrong key, 404 as a wrong model name).
// Only 400–407 and 413 are left alone by all three. 400 with `param: "model"` says what is so:
// this request, with this model, will not be served here; change the model (or have an operator
// change the fleet or unpark it), not the timing. What waiting does change (a replica starting,
// a held queue full) stays 503 with Retry-After, which every client retries.

import type { CatalogEntry } from "../protocol/routing";
import { openAIError, type Reply } from "./errors";

type Unavailable = NonNullable<CatalogEntry["unavailable"]>;

/** The error code per kind, so a client can tell "never here" from "parked until an operator acts". */
export const UNAVAILABLE_CODES: Record<Unavailable["kind"], string> = { never: "model_cannot_run", parked: "model_parked" };

/** The whole answer for a model waiting will not bring back. */
export function unavailableReply(u: Unavailable): Reply {
  // x-should-retry stays: the OpenAI SDKs read it first, whatever the status.
  return openAIError(400, u.reason, { type: "invalid_request_error", param: "model", code: UNAVAILABLE_CODES[u.kind], headers: { "x-should-retry": "false" } });
}
