// The head node's Hub client: where hf:// sources are fetched from (--hf-endpoint, else
// HF_ENDPOINT as huggingface_hub reads it, else the Hub itself) and the token for gated and
// private repositories (--hf-token-file), read once at start. The token is kept here and
// nowhere else on the head node: not in the store, not in a log line.

import { readFileSync } from "node:fs";
import type { ServeConfig } from "../config";
import { ConfigError } from "../config";
import { HF_ENDPOINT_DEFAULT, HF_ENDPOINT_ENV, HubClient } from "../hub/client";

export function hubFor(config: Pick<ServeConfig, "hf_endpoint" | "hf_token_file">, env: Record<string, string | undefined>): HubClient {
  const fromEnv = env[HF_ENDPOINT_ENV];
  let endpoint = config.hf_endpoint ?? HF_ENDPOINT_DEFAULT;
  if (config.hf_endpoint === undefined && fromEnv !== undefined && fromEnv !== "") {
    if (!/^https?:\/\/[^\s/]+/.test(fromEnv)) throw new ConfigError([`${HF_ENDPOINT_ENV} (from the environment): must be an http:// or https:// URL, got ${JSON.stringify(fromEnv.slice(0, 80))}`]);
    endpoint = fromEnv;
  }
  let token: string | undefined;
  if (config.hf_token_file !== undefined) {
    let text: string;
    try {
      text = readFileSync(config.hf_token_file, "utf8");
    } catch (e) {
      throw new ConfigError([`hf_token_file: cannot read ${config.hf_token_file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`]);
    }
    token = text.trim();
    if (token === "" || /\s/.test(token) || token.length > 512) throw new ConfigError([`hf_token_file: ${config.hf_token_file} must hold one token (no spaces, at most 512 characters)`]);
  }
  return new HubClient({ endpoint, token });
}
