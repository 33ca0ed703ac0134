// `llmgw fake-engine`: the built-in OpenAI-compatible fake engine on its own, as simulated
// agents run it and as tests and demos use it.

import { FAKE_ENGINE_FLAGS, fakeEngineMain } from "../sim/fake-engine";
import type { Command } from "./command";

export const command: Command = {
  name: "fake-engine",
  summary: "Run the built-in OpenAI-compatible fake engine (for tests and demos).",
  usage: "llmgw fake-engine --model NAME [--model NAME]… [--port P] [--host H] …",
  flags: FAKE_ENGINE_FLAGS,
  details: "Answers /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health and /metrics (vLLM's names). With --api-key (or LLMGW_FAKE_ENGINE_API_KEY) /v1/* needs that key, as the agent starts it. Set LLMGW_FAKE_FAIL=message to make it print the message and exit 1, as a broken engine would.",
  examples: ["llmgw fake-engine --model llama-3.1-8b --port 9000", "llmgw fake-engine --model m --ttft-ms 200 --token-delay-ms 20 --slots 4"],
  // main.ts has parsed argv with these flags already; fakeEngineMain parses it again with the
  // same parser and specs, because it also runs on its own (`bun src/sim/fake-engine.ts`).
  run: ({ argv }) => fakeEngineMain(argv),
};
