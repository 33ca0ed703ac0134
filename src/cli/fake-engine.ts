// `llmgw fake-engine`: the built-in OpenAI-compatible fake engine on its own, as simulated
// agents run it and as tests and demos use it.

import type { FlagSpecs } from "../config/flags";
import type { Command } from "./command";

// main.ts parses flags before run(); these only have to let the fake engine's own flags
// through (it parses the raw argv itself), and give `--help` something to show.
const FAKE_ENGINE_FLAGS: FlagSpecs = {
  model: { kind: "list", value: "NAME", help: "a name to serve (required; the first is the primary)" },
  host: { kind: "string", value: "HOST", help: "address to listen on (default 127.0.0.1)" },
  port: { kind: "string", value: "PORT", help: "port to listen on (default 0: any free port)" },
  "ttft-ms": { kind: "string", value: "MS", help: "time to first token" },
  "token-delay-ms": { kind: "string", value: "MS", help: "time between tokens" },
  tokens: { kind: "string", value: "N", help: "tokens per completion" },
  slots: { kind: "string", value: "N", help: "requests served at once; more queue" },
  "cache-blocks": { kind: "string", value: "N", help: "size of the simulated prefix cache, in blocks" },
  "api-key": { kind: "string", value: "KEY", help: "answer /v1/* only with Authorization: Bearer KEY, 401 otherwise; /health and /metrics stay open (prefer env LLMGW_FAKE_ENGINE_API_KEY, which `ps` does not show)" },
  help: { kind: "boolean", short: "h", help: "show this help" },
};

export const command: Command = {
  name: "fake-engine",
  summary: "Run the built-in OpenAI-compatible fake engine (for tests and demos).",
  usage: "llmgw fake-engine --model NAME [--model NAME]… [--port P] [--host H] …",
  flags: FAKE_ENGINE_FLAGS,
  details: "Answers /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health and /metrics (vLLM's names). With --api-key (or LLMGW_FAKE_ENGINE_API_KEY) /v1/* needs that key, as the agent starts it. Set LLMGW_FAKE_FAIL=message to make it print the message and exit 1, as a broken engine would.",
  examples: ["llmgw fake-engine --model llama-3.1-8b --port 9000", "llmgw fake-engine --model m --ttft-ms 200 --token-delay-ms 20 --slots 4"],
  async run({ argv }) {
    const { fakeEngineMain } = await import("../sim/fake-engine");
    return fakeEngineMain(argv);
  },
};
