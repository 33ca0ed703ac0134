// What the node keeps in its state dir about itself: the directory kept 0700, the node's own
// credential (once the head node gave one; the join token until then), the highest leader epoch
// it has seen, and the log listener's self-signed certificate. Every file is written atomically
// and readable by its owner alone.

import { X509Certificate } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { NodeCredential, newNodeCredential } from "../protocol/heartbeat";
import type { AgentLogger } from "./log";
import { AgentError } from "./errors";
import { selfSignedCertificate } from "./selfsigned";

/** The node's own credential, in its state dir; the head node names this file when it refuses a re-join. */
export const CREDENTIAL_FILE = "node.credential";

/** Writes a file only its owner can read, atomically: a crash never leaves half a credential. */
export function writePrivate(path: string, content: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, content, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

/** The state dir holds the credential and engine logs: its owner's alone. */
export function prepareStateDir(dir: string): void {
  try {
    if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700);
  } catch (e) {
    throw new AgentError(`--state-dir ${dir}: cannot create or restrict it (${(e as Error).message})`);
  }
}

/** How the node speaks for itself: its stored credential, or (none yet) the join token. */
export type NodeSecret = { credential: string } | { joinToken: string };

/**
 * The node's stored credential, checked to be this node's; without one, the join token (read
 * once, here: a token file that goes away later cannot fail a heartbeat in flight).
 */
export function loadCredential(path: string, node: string, token: { token?: string | undefined; token_file?: string | undefined }, log: AgentLogger): NodeSecret {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    const joinToken = readJoinToken(token);
    if (joinToken === undefined)
      throw new AgentError(`no join token: give --token-file FILE (or env LLMGW_TOKEN) with the head node's <data-dir>/join.token; the node has no credential yet (${path})`);
    return { joinToken };
  }
  let stored: { node?: unknown; credential?: unknown };
  try {
    stored = JSON.parse(text) as typeof stored;
  } catch {
    throw new AgentError(`${path} is not a credential file this agent wrote; remove it to join again`);
  }
  if (typeof stored.credential !== "string" || typeof stored.node !== "string") throw new AgentError(`${path} is not a credential file this agent wrote; remove it to join again`);
  if (stored.node !== node)
    throw new AgentError(`${path} is node ${stored.node}'s credential, and this agent is node ${node}: use --name ${stored.node}, or another --state-dir for a new node`);
  chmodSync(path, 0o600);
  log.info({ path }, "using this node's stored credential");
  return { credential: stored.credential };
}

export function saveCredential(path: string, node: string, server: string, credential: string): void {
  writePrivate(path, `${JSON.stringify({ node, server, credential })}\n`);
}

/**
 * The credential a joining node chose for itself, kept until the head node has answered its
 * join: every try of the join (after a timeout, a restart, a store failover) sends the same
 * one, so a join that took effect but whose answer was lost is answered when sent again.
 */
export const JOINING_FILE = "node.joining";

/** The stored choice for this node, or a new one stored now (a file for another node, or unreadable, is replaced). */
export function joiningCredential(path: string, node: string, log: AgentLogger): string {
  try {
    const stored = JSON.parse(readFileSync(path, "utf8")) as { node?: unknown; credential?: unknown };
    if (stored.node === node && typeof stored.credential === "string" && NodeCredential.safeParse(stored.credential).success) {
      log.info({ path }, "a join begun earlier is tried again with the credential chosen then");
      return stored.credential;
    }
  } catch {
    // None yet (the common case), or not one this agent wrote: a new one replaces it.
  }
  const credential = newNodeCredential();
  writePrivate(path, `${JSON.stringify({ node, credential })}\n`);
  return credential;
}

/** The join was answered: the choice is the node's credential now (kept in CREDENTIAL_FILE). */
export function joined(path: string): void {
  rmSync(path, { force: true });
}

/**
 * The highest leader epoch this node has seen (several control planes): kept so that an agent
 * restarted while an old leader still answers refuses that leader's assignments. Removing it is
 * how an agent is told that its cluster went back to one head node (epoch 0).
 */
export const EPOCH_FILE = "leader.epoch";

/** The stored epoch, or undefined when none was stored (never more than 0). */
export function loadEpoch(path: string): { epoch: number; server: string | undefined } | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new AgentError(`${path}: cannot read the leader epoch kept there (${(e as Error).message})`);
  }
  let stored: { epoch?: unknown; server?: unknown };
  try {
    stored = JSON.parse(text) as typeof stored;
  } catch {
    stored = {};
  }
  if (typeof stored !== "object" || stored === null || typeof stored.epoch !== "number" || !Number.isSafeInteger(stored.epoch) || stored.epoch < 0)
    throw new AgentError(`${path} is not a leader epoch file this agent wrote; remove it (the agent then follows whichever leader answers) and start again`);
  return { epoch: stored.epoch, server: typeof stored.server === "string" ? stored.server : undefined };
}

export function saveEpoch(path: string, epoch: number, server: string): void {
  writePrivate(path, `${JSON.stringify({ epoch, server })}\n`);
}

/** --token, else the first line of --token-file. */
function readJoinToken(o: { token?: string | undefined; token_file?: string | undefined }): string | undefined {
  if (o.token) return o.token;
  const file = o.token_file;
  if (!file) return undefined;
  try {
    const t = readFileSync(file, "utf8").trim();
    return t === "" ? undefined : t;
  } catch (e) {
    throw new AgentError(`--token-file ${file}: cannot read it (${(e as Error).message})`);
  }
}

/** The log listener's certificate: made once, kept beside the credential (key 0600). */
export function logCertificate(stateDir: string, names: string[], now: number, log: AgentLogger): { cert: string; key: string } {
  const certPath = join(stateDir, "logs-tls.crt");
  const keyPath = join(stateDir, "logs-tls.key");
  try {
    const cert = readFileSync(certPath, "utf8");
    const key = readFileSync(keyPath, "utf8");
    const x = new X509Certificate(cert);
    if (names.every((n) => x.checkIP(n) !== undefined || x.checkHost(n) !== undefined)) return { cert, key };
  } catch {
    // None yet, or unreadable: make one.
  }
  const made = selfSignedCertificate(names, now);
  writePrivate(keyPath, made.key);
  writePrivate(certPath, made.cert);
  log.info({ cert: certPath, fingerprint256: made.fingerprint256 }, "engine logs served over HTTPS with a self-signed certificate the head node pins");
  return { cert: made.cert, key: made.key };
}
