// How CLI commands reach the admin API: find the server and token (flags, environment, or the
// data dir of a server running beside the CLI), call it, and turn every failure into one line
// a person can act on. No zod here: quick commands must start quickly.

import { readFileSync } from "node:fs";
import { checkServerIdentity, rootCertificates } from "node:tls";
import { DEFAULT_DATA_DIR, type ServerInfo, readServerInfo, readTokenFile } from "../config/datadir";
import { type FlagSpecs, type FlagValues, UsageError } from "../config/flags";
import { exactDuration } from "../lib/format";
import { safeText } from "../lib/text";
import type { ApiError } from "../protocol/views";

/** How long one admin API call may take before the CLI gives up on the server. */
const REQUEST_TIMEOUT_MS = 30_000;

export const CLIENT_FLAGS: FlagSpecs = {
  server: { kind: "string", value: "URL", help: "admin API URL (env LLMGW_SERVER; default: the server recorded in the data dir)" },
  token: { kind: "string", value: "TOKEN", help: "admin token (env LLMGW_TOKEN; default: <data-dir>/admin.token)" },
  ca: { kind: "string", value: "FILE", help: "PEM CA to trust for an https server, e.g. its self-signed certificate (env LLMGW_CA; default: the one a local server records)" },
  "data-dir": { kind: "string", value: "DIR", help: `data dir of a local server (env LLMGW_DATA_DIR; default ${DEFAULT_DATA_DIR})` },
  help: { kind: "boolean", short: "h", help: "show this help" },
};

export type OutputFormat = "table" | "wide" | "json" | "csv";

/** -o/--output taking these formats (the first is the default): its help and its completion say just these. */
export function outputFlag(formats: readonly OutputFormat[]): FlagSpecs {
  const help = `${formats[0]} (default)${formats.length > 2 ? `, ${formats.slice(1, -1).join(", ")}` : ""}${formats.length > 1 ? ` or ${formats.at(-1)}` : ""}`;
  return { output: { kind: "string", short: "o", value: "FORMAT", help, choices: formats } };
}

export const OUTPUT_FLAG: FlagSpecs = outputFlag(["table", "wide", "json"]);

export function outputFormat(flags: FlagValues, allowed: OutputFormat[] = ["table", "wide", "json"]): OutputFormat {
  const o = (flags.output as string | undefined) ?? "table";
  if (!(allowed as string[]).includes(o)) throw new UsageError(`-o/--output must be one of ${allowed.join(", ")}, not "${o}"`);
  return o as OutputFormat;
}

/**
 * A failure to print as `error: …` and exit non-zero. Its message often quotes the server (and
 * through it a node or an engine), so it is sanitised here, once, for every command.
 */
export class CliError extends Error {
  readonly userFacing = true;
  constructor(message: string, readonly exitCode = 1) {
    super(safeText(message, { multiline: true }));
  }
}

/** The server refused a call: its status and the problems it named (path and message each, as the server wrote them). */
export class ApiCallError extends CliError {
  constructor(
    message: string,
    readonly status: number,
    readonly issues: { path: string; message: string }[],
  ) {
    super(message);
  }
}

export interface Client {
  server: string;
  token: string;
  /** TLS options for an https server (its CA); pass them to any fetch of your own to it. */
  tls?: BunFetchRequestInitTLS;
  get<T>(path: string): Promise<T>;
  send<T>(method: "POST" | "PUT" | "PATCH" | "DELETE", path: string, body?: unknown): Promise<T>;
}

/** The admin URL to call (flag, environment, or the server recorded in the data dir) and how to trust it; no token. */
export function resolveServer(flags: FlagValues, env = process.env): { server: string; dataDir: string; caPath?: string; tls?: BunFetchRequestInitTLS } {
  const dataDir = (flags["data-dir"] as string | undefined) ?? env.LLMGW_DATA_DIR ?? DEFAULT_DATA_DIR;
  let server = (flags.server as string | undefined) ?? env.LLMGW_SERVER;
  let info: ServerInfo | undefined;
  if (!server) {
    info = readServerInfo(dataDir);
    if (!info)
      throw new CliError(`no server given and none recorded in ${dataDir}/server.json: pass --server URL (or LLMGW_SERVER), or run beside llmgw serve`);
    server = info.admin_url;
  }
  if (!/^https?:\/\/[^\s/]+/.test(server)) throw new UsageError(`--server must be an http(s) URL like http://10.0.0.1:8001, not "${server}"`);
  server = server.replace(/\/+$/, "");
  const caPath = (flags.ca as string | undefined) ?? env.LLMGW_CA;
  const tls = /^https:/i.test(server) ? clientTls(server, caPath, info ?? readServerInfo(dataDir)) : undefined;
  return { server, dataDir, ...(caPath ? { caPath } : {}), ...(tls ? { tls } : {}) };
}

export function resolveClient(flags: FlagValues, env = process.env, opts: { timeoutMs?: number } = {}): Client {
  const timeoutMs = opts.timeoutMs ?? REQUEST_TIMEOUT_MS;
  const { server, dataDir, caPath, tls } = resolveServer(flags, env);
  const token = (flags.token as string | undefined) ?? env.LLMGW_TOKEN ?? readTokenFile(dataDir, "admin.token");
  if (!token) throw new CliError(`no admin token: pass --token (or LLMGW_TOKEN), or run where ${dataDir}/admin.token is readable`);

  const call = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    let res: Response;
    try {
      res = await fetch(`${server}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
        ...(tls ? { tls } : {}),
      });
    } catch (e) {
      const err = e as Error & { code?: string };
      const why =
        err.name === "TimeoutError"
          ? `no answer within ${exactDuration(timeoutMs)}`
          : err.code === "ConnectionRefused" || err.code === "ECONNREFUSED"
            ? "connection refused"
            : certificateProblem(err, server, caPath) ?? err.message;
      throw new CliError(`cannot reach the llmgw server at ${server}: ${why}`);
    }
    const text = await res.text();
    let data: unknown;
    try {
      data = text ? JSON.parse(text) : undefined;
    } catch {
      throw new CliError(`the server at ${server} answered ${res.status} with something that is not JSON (is it an llmgw admin API?)`);
    }
    if (!res.ok) {
      const e = (data as ApiError | undefined)?.error;
      if (res.status === 401) throw new CliError(`the server at ${server} refused the admin token: ${e?.message ?? "unauthorized"}`);
      const issues = e?.issues && e.issues.length > 1 ? `\n${e.issues.map((i) => `  - ${i.path}: ${i.message}`).join("\n")}` : "";
      throw new ApiCallError(`${e?.message ?? `HTTP ${res.status}`}${issues}`, res.status, e?.issues ?? []);
    }
    return data as T;
  };
  return {
    server,
    token,
    ...(tls ? { tls } : {}),
    get: (path) => call("GET", path),
    send: (method, path, body) => call(method, path, body),
  };
}

/**
 * Whom to trust at an https server: --ca (or LLMGW_CA) alone, as curl's --cacert; else, for the
 * URL a server beside the CLI recorded, the certificate it recorded, accepted for whatever
 * address the URL uses (it is the server's own file); else the system's CAs.
 */
function clientTls(server: string, caPath: string | undefined, info: ServerInfo | undefined): BunFetchRequestInitTLS | undefined {
  if (caPath) {
    try {
      return { ca: readFileSync(caPath, "utf8") };
    } catch (e) {
      throw new CliError(`--ca ${caPath}: cannot read it (${(e as Error).message})`);
    }
  }
  if (!info?.tls_cert || info.admin_url.replace(/\/+$/, "") !== server) return undefined;
  let pem: string;
  try {
    pem = readFileSync(info.tls_cert, "utf8");
  } catch {
    return undefined; // Not readable by this user: the system's CAs may still do.
  }
  const fingerprint = info.tls_fingerprint;
  return {
    ca: [...rootCertificates, pem],
    checkServerIdentity: (host, cert) => (fingerprint && cert.fingerprint256 === fingerprint ? undefined : checkServerIdentity(host, cert)),
  };
}

export function certificateProblem(err: Error & { code?: string }, server: string, caPath: string | undefined): string | undefined {
  const code = err.code ?? "";
  if (/ALTNAME|HOSTNAME_MISMATCH/.test(code))
    return `its TLS certificate is not valid for ${new URL(server).hostname} (${err.message}); use a --server name or address the certificate lists`;
  if (/CERT|SELF_SIGNED|LEAF_SIGNATURE|ISSUER/.test(code))
    return caPath
      ? `its TLS certificate is not trusted by --ca ${caPath} (${err.message}, ${code})`
      : `its TLS certificate is not trusted (${err.message}, ${code}); pass --ca FILE (or LLMGW_CA) with the server's certificate or the CA that signed it`;
  if (/^http:/i.test(server) && /ECONNRESET/.test(code)) return `${err.message} (does the server use TLS? then use https://)`;
  return undefined;
}
