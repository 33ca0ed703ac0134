// Shared parts of the contract fakes: the per-version flag list (a fixture under
// test/fixtures/engines, taken from the engine's own source), argument parsing the way each
// engine's parser does it, the record a test reads back, and the failure modes a test asks for.

import { appendFileSync, readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * How a flag takes its value: "value" one argument (also --flag=value), "list" one or more
 * (argparse nargs="+"), "bool" none (store_true), "boolopt" none with a --no- twin
 * (argparse.BooleanOptionalAction), "optional" zero or one (nargs="?").
 */
export type FlagKind = "value" | "list" | "bool" | "boolopt" | "optional";

export type EngineFixture = {
  engine: "vllm" | "sglang" | "llama.cpp";
  /** What the version command prints (vLLM, SGLang) or the build number (llama.cpp). */
  version: string;
  /** llama.cpp only: the commit the version line names. */
  commit?: string;
  source: { repo: string; ref: string; files: string[]; note?: string };
  /** argparse's prog, used in its messages ("vllm serve", "launch_server.py"). */
  prog?: string;
  usage?: string;
  flags: Record<string, FlagKind>;
  /** llama.cpp only: whether --alias is a comma-separated list (PR #19926) in this build. */
  alias_list?: boolean;
  /** Short or alternative spellings, resolved to the flag they stand for. */
  aliases?: Record<string, string>;
};

export function loadFixture(name: string): EngineFixture {
  const file = join(import.meta.dir, "..", "..", "fixtures", "engines", `${name}.json`);
  return JSON.parse(readFileSync(file, "utf8")) as EngineFixture;
}

export type Parsed = { positionals: string[]; values: Map<string, string[]> };

/**
 * argparse as vLLM and SGLang use it: `--flag value`, `--flag=value`, nargs="+" lists, unique
 * prefixes are NOT accepted (vLLM's FlexibleArgumentParser and SGLang both pass
 * allow_abbrev=False since the versions faked here). Everything unknown is collected and
 * reported at once, with the values that followed it, as argparse's parse_args does.
 */
export function parseArgparse(fx: EngineFixture, argv: string[], maxPositionals: number): { ok: Parsed } | { unknown: string[] } {
  const values = new Map<string, string[]>();
  const positionals: string[] = [];
  const unknown: string[] = [];
  let lastUnknown = false;
  for (let i = 0; i < argv.length; i++) {
    const raw = argv[i]!;
    if (raw.startsWith("-") && raw.length > 1 && !/^-\d/.test(raw)) {
      const eq = raw.indexOf("=");
      const given = eq > 0 ? raw.slice(0, eq) : raw;
      let name = fx.aliases?.[given] ?? given;
      let kind = fx.flags[name];
      let negated = false;
      if (kind === undefined && name.startsWith("--no-") && fx.flags[`--${name.slice(5)}`] === "boolopt") {
        name = `--${name.slice(5)}`;
        kind = "boolopt";
        negated = true;
      }
      if (kind === undefined) {
        unknown.push(raw);
        lastUnknown = true;
        continue;
      }
      lastUnknown = false;
      const take: string[] = [];
      if (eq > 0) take.push(raw.slice(eq + 1));
      else if (kind === "value") {
        const v = argv[i + 1];
        if (v === undefined) return { unknown: [`${raw} (expected one argument)`] };
        take.push(v);
        i++;
      } else if (kind === "list") {
        while (i + 1 < argv.length && !argv[i + 1]!.startsWith("-")) take.push(argv[++i]!);
        if (take.length === 0) return { unknown: [`${raw} (expected at least one argument)`] };
      } else if (kind === "optional") {
        if (i + 1 < argv.length && !argv[i + 1]!.startsWith("-")) take.push(argv[++i]!);
      } else take.push(negated ? "false" : "true");
      values.set(name, take);
    } else if (lastUnknown || positionals.length >= maxPositionals) {
      // argparse leaves a value after an unknown option among the extras it reports.
      unknown.push(raw);
    } else positionals.push(raw);
  }
  return unknown.length > 0 ? { unknown } : { ok: { positionals, values } };
}

/**
 * llama.cpp's common_params_parse (common/arg.cpp): every option is looked up in its table, an
 * unknown one stops parsing with "error: invalid argument: ARG"; values are one argument (or
 * `--flag=value` in newer builds, not accepted here to stay with the older rule).
 */
export function parseLlama(fx: EngineFixture, argv: string[]): { ok: Parsed } | { error: string } {
  const values = new Map<string, string[]>();
  for (let i = 0; i < argv.length; i++) {
    const raw = argv[i]!;
    const name = fx.aliases?.[raw] ?? raw;
    const kind = fx.flags[name];
    if (kind === undefined) return { error: `error: invalid argument: ${raw}` };
    if (kind === "value" || kind === "list") {
      const v = argv[i + 1];
      if (v === undefined) return { error: `error while handling argument "${raw}": expected value for argument` };
      values.set(name, [v]);
      i++;
    } else values.set(name, ["true"]);
  }
  return { ok: { positionals: [], values } };
}

export const one = (p: Parsed, flag: string): string | undefined => p.values.get(flag)?.[0];

/**
 * Appends what the fake was started with to the file named by LLMGW_CONTRACT_RECORD (one JSON
 * line per start), so a test can see the argv and GPU environment the agent gave the engine.
 */
export function record(engine: string, version: string, argv: string[]): void {
  const file = process.env.LLMGW_CONTRACT_RECORD;
  if (!file) return;
  const env: Record<string, string> = {};
  for (const k of ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HF_HUB_OFFLINE", "VLLM_API_KEY", "LLAMA_API_KEY"]) {
    const v = process.env[k];
    if (v !== undefined) env[k] = v;
  }
  appendFileSync(file, `${JSON.stringify({ engine, version, argv, env, pid: process.pid })}\n`);
}

/** Which failure the test asked for (LLMGW_CONTRACT_FAIL), if any. */
export function failMode(): string | undefined {
  return process.env.LLMGW_CONTRACT_FAIL || undefined;
}

/** How long "loading the model" takes before the fake serves (LLMGW_CONTRACT_LOAD_MS, default 400 ms). */
export function loadMs(): number {
  const v = Number(process.env.LLMGW_CONTRACT_LOAD_MS ?? "400");
  return Number.isFinite(v) && v >= 0 ? v : 400;
}

export function die(stderr: string, code: number): never {
  process.stderr.write(stderr.endsWith("\n") ? stderr : `${stderr}\n`);
  process.exit(code);
}

/** Keeps the process alive until SIGTERM/SIGINT, like an engine that serves until stopped. */
export function serveUntilSignalled(onStop?: () => void): void {
  const stop = () => {
    onStop?.();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  setInterval(() => {}, 1 << 30);
}

export function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

/** A chat completion in the OpenAI shape, naming the model it was asked for. */
export function chatCompletion(model: string): Record<string, unknown> {
  return {
    id: `chatcmpl-${crypto.randomUUID().replaceAll("-", "")}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message: { role: "assistant", content: "Hello from the contract fake." }, finish_reason: "stop" }],
    usage: { prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 },
  };
}

export function modelList(names: string[], ownedBy: string): Record<string, unknown> {
  return { object: "list", data: names.map((id) => ({ id, object: "model", created: Math.floor(Date.now() / 1000), owned_by: ownedBy })) };
}

export function bearer(req: Request): string | null {
  const h = req.headers.get("authorization");
  return h?.startsWith("Bearer ") ? h.slice(7) : null;
}
