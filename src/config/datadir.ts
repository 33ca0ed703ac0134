// The data directory: the database, the generated secrets and the file that tells a CLI on
// the same machine where the server listens. Created 0700, secrets 0600. Free of zod, since the
// CLI reads it on every quick command.

import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { bracketHost } from "../lib/net";

export const DEFAULT_DATA_DIR = "./llmgw-data";

export function ensureDataDir(dir: string): string {
  const abs = resolve(dir);
  if (!existsSync(abs)) mkdirSync(abs, { recursive: true, mode: 0o700 });
  else if (!statSync(abs).isDirectory()) throw new Error(`data dir ${abs} exists and is not a directory`);
  chmodSync(abs, 0o700);
  return abs;
}

/** Writes a file readable only by its owner, atomically (a crash never leaves half a token). */
export function writePrivateFile(path: string, content: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, content, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

export function generateToken(prefix: string): string {
  return `${prefix}_${randomBytes(24).toString("base64url")}`;
}

/**
 * The secret given on the command line or in the environment, else the one stored in the data
 * dir, else a new one written there. Returns where it came from, for the start-up log.
 */
export function resolveToken(dataDir: string, file: string, given: string | undefined, prefix: string): { token: string; source: "given" | "stored" | "generated"; path: string } {
  const path = join(dataDir, file);
  if (given) return { token: given, source: "given", path };
  if (existsSync(path)) {
    const token = readFileSync(path, "utf8").trim();
    if (token.length >= 16) return { token, source: "stored", path };
  }
  const token = generateToken(prefix);
  writePrivateFile(path, `${token}\n`);
  return { token, source: "generated", path };
}

/**
 * The head node's engine secret (`<data-dir>/engine.secret`, 0600): every replica's engine key
 * is derived from it, so keys need no store column and are the same after a restart. Generated
 * on first start; several head nodes serving one store must share this file.
 */
export function resolveEngineSecret(dataDir: string): { token: string; source: "stored" | "generated"; path: string } {
  const r = resolveToken(dataDir, "engine.secret", undefined, "llmgw_engine");
  return { token: r.token, source: r.source === "given" ? "stored" : r.source, path: r.path };
}

export interface ServerInfo {
  admin_url: string;
  /** host:port the admin listener is bound to (the port the one it got), so `join-command` prints an address it accepts. */
  admin_listen?: string;
  /** --advertise-url, when serve was given one. */
  advertise_url?: string;
  router_url: string;
  pid: number;
  version: string;
  started_at: string;
  /** When the listeners serve HTTPS: the certificate file (absolute), which a CLI here trusts for these URLs. */
  tls_cert?: string;
  /** Its SHA-256 fingerprint, for pinning agents (--server-fingerprint). */
  tls_fingerprint?: string;
}

export const SERVER_INFO_FILE = "server.json";

export function writeServerInfo(dataDir: string, info: ServerInfo): void {
  writePrivateFile(join(dataDir, SERVER_INFO_FILE), `${JSON.stringify(info, null, 2)}\n`);
}

export function readServerInfo(dataDir: string): ServerInfo | undefined {
  try {
    return JSON.parse(readFileSync(join(dataDir, SERVER_INFO_FILE), "utf8")) as ServerInfo;
  } catch {
    return undefined;
  }
}

export function readTokenFile(dataDir: string, file: string): string | undefined {
  try {
    const t = readFileSync(join(dataDir, file), "utf8").trim();
    return t || undefined;
  } catch {
    return undefined;
  }
}

/** The URL a local client should use for a listener bound to host:port. */
export function localUrl(host: string, port: number, scheme: "http" | "https" = "http"): string {
  const h = host === "0.0.0.0" || host === "" ? "127.0.0.1" : host === "::" ? "[::1]" : bracketHost(host);
  return `${scheme}://${h}:${port}`;
}
