// The usage ledger's off switch (`serve --usage-ledger off`, `usage_ledger = "off"`): with it off,
// a streamed request reaches the engine exactly as the client sent it (no
// stream_options.include_usage added, so no usage chunk to take out), nothing is counted in the
// ledger, and a key's token limit still counts the tokens that stream; with it on (the default)
// the router adds the option. Through a real Router on 127.0.0.1 in front of a raw-socket engine
// that records the bodies it gets.

import { afterEach, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { routerSettings } from "../../src/app/router-settings";
import { SERVE_FLAGS } from "../../src/cli/serve";
import { ServeConfig, loadConfig } from "../../src/config";
import { parseFlags } from "../../src/config/flags";
import type { EndpointInfo } from "../../src/protocol/routing";
import { promptEstimate } from "../../src/router/admission";
import { Router } from "../../src/router/router";
import { type RawEngine, rawEngine } from "../helpers/raw-http";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { scratchDir } from "../helpers/tmp";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const KEY = "sk-ledger-switch-0123456789";
/** Low enough that the bucket refills less than a token during a test (0.01 a ms). */
const TPM = 600;
const sha = (s: string) => createHash("sha256").update(s).digest("hex");

/** The stream an OpenAI-style engine sends: three content chunks, then, when asked, the usage chunk. */
function sseAnswer(body: string): string {
  const usage = (JSON.parse(body) as { stream_options?: { include_usage?: boolean } }).stream_options?.include_usage === true;
  const tail = usage ? ',"usage":null' : "";
  const chunk = (c: string) => `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"${c}"},"finish_reason":null}]${tail}}\n\n`;
  let sse = chunk("a") + chunk("b") + chunk("c");
  if (usage) sse += 'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}\n\n';
  sse += "data: [DONE]\n\n";
  return `HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: ${Buffer.byteLength(sse)}\r\n\r\n${sse}`;
}

function setup(usageLedger: boolean | undefined): { r: Router; url: string; engine: RawEngine } {
  const engine = rawEngine((req) => sseAnswer(req.body));
  cleanups.push(() => engine.stop());
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, ...(usageLedger !== undefined ? { usageLedger } : {}) });
  r.setCatalog([{ name: "m", aliases: [], on_demand: false, pool: "default", created: 1 }]);
  const ep: EndpointInfo = { id: "a", url: engine.url, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0 };
  r.setEndpoints([ep]);
  r.setApiKeys([{ name: "svc", sha256: sha(KEY), pool: null, team: "search", limits: { tpm: TPM } }]);
  const { url } = r.start();
  cleanups.push(() => r.stop());
  return { r, url, engine };
}

const BODY = JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] });

async function streamed(url: string): Promise<string> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` }, body: BODY });
  const text = await res.text();
  expect(res.status).toBe(200);
  return text;
}

describe("the usage ledger's off switch", () => {
  test("off: the engine gets the client's body byte for byte, the client the engine's stream, the ledger nothing, and the key's token limit the streamed tokens", async () => {
    const { r, url, engine } = setup(false);
    const text = await streamed(url);
    expect(engine.requests).toHaveLength(1);
    expect(engine.requests[0]!.body).toBe(BODY);
    expect(text).not.toContain("usage");
    expect(text).toContain('"content":"c"');
    expect(r.takeLedger()).toEqual([]);
    // The prompt's estimate, then the three streamed chunks: counted without the engine's usage.
    const left = r.keyUse()[0]!.tokensLeft!;
    const spent = promptEstimate(BODY.length) + 3;
    expect(left).toBeGreaterThanOrEqual(TPM - spent);
    expect(left).toBeLessThanOrEqual(TPM - spent + 1);
  });

  test("on (the default): the router adds include_usage, takes the usage out of the answer and counts the engine's tokens", async () => {
    const { r, url, engine } = setup(undefined);
    const text = await streamed(url);
    const sent = JSON.parse(engine.requests[0]!.body) as { stream_options?: unknown; messages: unknown };
    expect(sent.stream_options).toEqual({ include_usage: true });
    expect(sent.messages).toEqual([{ role: "user", content: "hi" }]);
    expect(text).not.toContain("usage");
    expect(r.takeLedger()).toMatchObject([{ key: "svc", team: "search", model: "m", requests: 1, prompt_tokens: 7, completion_tokens: 3 }]);
    // Settled from the engine's usage: 7 prompt and 3 completion tokens.
    const left = r.keyUse()[0]!.tokensLeft!;
    expect(left).toBeGreaterThanOrEqual(TPM - 10);
    expect(left).toBeLessThanOrEqual(TPM - 10 + 1);
  });

  test("--usage-ledger off, LLMGW_USAGE_LEDGER=off and usage_ledger = \"off\" or false in the config file turn it off; it is on by default, and another value is refused naming the key", async () => {
    const settings = async (flags: Record<string, unknown>, env: Record<string, string> = {}) => routerSettings(await loadConfig(ServeConfig, { flags: flags as never, env })).usageLedger;
    expect(await settings({})).toBe(true);
    expect(await settings(parseFlags(["--usage-ledger", "off"], SERVE_FLAGS).flags)).toBe(false);
    expect(await settings(parseFlags(["--usage-ledger", "on"], SERVE_FLAGS).flags)).toBe(true);
    expect(await settings({}, { LLMGW_USAGE_LEDGER: "off" })).toBe(false);
    const dir = scratchDir("llmgw-ledger-switch-");
    const toml = join(dir, "serve.toml");
    writeFileSync(toml, 'usage_ledger = "off"\n');
    expect(await settings({ config: toml })).toBe(false);
    const json = join(dir, "serve.json");
    writeFileSync(json, JSON.stringify({ usage_ledger: false }));
    expect(await settings({ config: json })).toBe(false);
    await expect(settings({}, { LLMGW_USAGE_LEDGER: "maybe" })).rejects.toThrow(/usage_ledger.*on.*off/s);
  });
});
