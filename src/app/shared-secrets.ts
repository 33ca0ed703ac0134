// The secrets several control planes on one store share, at start and while they run: the
// engine secret (kept in the store as it is: every router derives the engines' keys from it),
// and the admin and join tokens, of which the store keeps digests only (control/shared-tokens.ts
// has the rules). Here is the I/O around those rules: the data dir's token files, the store,
// the log, and `join-token rotate`, which replaces the join token in the store (every control
// plane follows it) and in this control plane's data dir.

import { rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { ConfigError } from "../config";
import { generateToken, readTokenFile, writePrivateFile } from "../config/datadir";
import { JoinToken } from "../control/join-token";
import { TokenFollower, type TokenSource, tokenAtStart } from "../control/shared-tokens";
import type { SharedSecretsPort } from "../control/store-port";
import type { SharedTokenKind } from "../control/types";
import type { Scheduler } from "../lib/scheduler";
import type { OpenedStore } from "../store/open";
import { sha256hex } from "../store/token-digests";

/** A token as this control plane found it: its value, where it came from, and its file in the data dir. */
export interface LocalToken {
  token: string;
  source: TokenSource;
  path: string;
}

export interface SharedSecrets {
  engineSecret: string;
  /** The join token's digest in force: the store's. */
  joinSha256: string;
  /** Whether this control plane holds that join token in clear (its file, or given): `join-command` here needs it. */
  joinHeld: boolean;
}

const FLAGS: Record<SharedTokenKind, string> = {
  admin: "--admin-token (or LLMGW_ADMIN_TOKEN, or the config file's admin_token)",
  join: "--join-token (or LLMGW_JOIN_TOKEN, or the config file's join_token)",
};

/**
 * Every control plane on one store must derive the same engine keys (any router may serve any
 * replica) and check the same tokens (an agent joins, and the CLI calls, whichever answers). The
 * engine secret: the first to start stores its own, the others adopt it into their data dir. The
 * tokens: see control/shared-tokens.ts. A refusal closes the store and says what to do.
 */
export async function adoptSharedSecrets(o: {
  opened: OpenedStore;
  log: Logger;
  secret: LocalToken;
  admin: LocalToken;
  join: LocalToken;
  /** This control plane's name and the lease TTL: who else is running on the store. */
  name: string;
  ttlMs: number;
}): Promise<SharedSecrets> {
  const { opened, log } = o;
  /** Tokens whose digest the store holds now: theirs, whatever happens next. */
  const kept = new Set<LocalToken>();
  try {
    const engineSecret = await opened.store.sharedSecret("engine_secret", o.secret.token);
    if (engineSecret !== o.secret.token) {
      writePrivateFile(o.secret.path, `${engineSecret}\n`);
      log.info({ kind: "engine_secret", path: o.secret.path }, "engine secret taken from the store, shared by every control plane");
    }
    const others = (await opened.store.controlPlanes()).filter((r) => r.name !== o.name && r.seenAgoMs <= o.ttlMs).map((r) => r.name);
    let digests = await opened.store.tokenDigests();
    const adopt = async (kind: SharedTokenKind, t: LocalToken): Promise<boolean> => {
      const at = { kind, source: t.source, sha256: sha256hex(t.token), from: t.source === "given" ? FLAGS[kind] : t.path };
      let v = tokenAtStart(at, digests[kind], others);
      if (v.act === "claim") {
        digests = await opened.store.putTokenDigest(kind, at.sha256, "claim");
        // Another control plane claimed first: decide again against its token.
        v = tokenAtStart(at, digests[kind], others);
      }
      if (v.act === "refuse") throw new ConfigError([v.problem]);
      if (v.act === "replace") {
        digests = await opened.store.putTokenDigest(kind, at.sha256, "replace");
        log.warn({ kind, source: t.source }, `${kind} token given to this control plane replaces the one the store held (no other control plane runs): start the others with it too`);
      }
      if (v.act === "follow") {
        dropJoinCopy(t, log);
        return false;
      }
      kept.add(t);
      return true;
    };
    await adopt("admin", o.admin);
    const joinHeld = await adopt("join", o.join);
    log.info({ admin: "digest", join: "digest", join_held: joinHeld }, "the admin and join tokens are shared by the control planes on this store, which keeps only their digests");
    return { engineSecret, joinSha256: digests.join!.sha256, joinHeld };
  } catch (e) {
    await opened.close().catch(() => undefined);
    // Tokens made just now that the store does not hold are no one's: the next start must not take them for copies.
    for (const t of [o.admin, o.join]) if (t.source === "generated" && !kept.has(t)) rmSync(t.path, { force: true });
    if (e instanceof ConfigError) throw e;
    throw new Error(`cannot read the shared secrets from the store (${opened.describe}): ${(e as Error).message}`);
  }
}

/** This control plane's join token is not the store's: a copy made just now, or an old one (rotated away since). Neither may be handed to a node. */
function dropJoinCopy(t: LocalToken, log: Logger): void {
  rmSync(t.path, { force: true });
  const copy = `for \`llmgw join-command\` here, copy join.token from the control plane that made or last rotated it to ${t.path} (mode 0600)`;
  if (t.source === "stored")
    log.warn({ kind: "join", path: t.path }, `${t.path} held a join token the control planes on this store no longer accept (rotated away, or another store's): removed. Nodes join here with the store's join token; ${copy}`);
  else log.info({ kind: "join", path: t.path }, `this control plane holds no copy of the join token the control planes on this store share; nodes join here with it all the same; ${copy}`);
}

/**
 * The join token followed as the store changes it: put in force at once, and a copy in the data
 * dir that no longer matches is removed (join-command must not hand out a rotated-away token).
 * Checked and removed in one synchronous step, so a rotation here writing the file meanwhile is
 * never undone.
 */
export function onStoreJoinToken(o: { joinToken: JoinToken; dataDir: string; log: Logger }): (sha256: string) => void {
  const path = join(o.dataDir, "join.token");
  return (sha256) => {
    o.joinToken.useDigest(sha256);
    const copy = readTokenFile(o.dataDir, "join.token");
    const stale = copy !== undefined && sha256hex(copy) !== sha256;
    if (stale) rmSync(path, { force: true });
    o.log.warn(
      { kind: "join_token.rotated", ...(stale ? { removed: path } : {}) },
      `the join token was rotated on another control plane: the old one no longer admits nodes here${stale ? `; ${path} held it and was removed (copy the new join.token from the control plane that rotated it for \`llmgw join-command\` here)` : ""}`,
    );
  };
}

/**
 * The join token agents present, put in force: with several control planes the store's digest,
 * followed as the store changes it (the follower, poked by the membership), else this control
 * plane's own token; and how `join-token rotate` replaces it.
 */
export function keepJoinToken(o: { shared?: SharedSecrets; join: LocalToken; store: SharedSecretsPort; scheduler: Scheduler; log: Logger; dataDir: string }): {
  joinToken: JoinToken;
  follower?: TokenFollower;
  rotation: ReturnType<typeof joinTokenRotation>;
} {
  const { shared, dataDir, log } = o;
  if (!shared) {
    const joinToken = new JoinToken({ token: o.join.token });
    return { joinToken, rotation: joinTokenRotation({ dataDir, source: o.join.source, joinToken }) };
  }
  const joinToken = new JoinToken({ sha256: shared.joinSha256 });
  const follower = new TokenFollower({ store: o.store, scheduler: o.scheduler, log, join: shared.joinSha256, onJoin: onStoreJoinToken({ joinToken, dataDir, log }) });
  return { joinToken, follower, rotation: joinTokenRotation({ dataDir, source: o.join.source, joinToken, store: o.store, follower }) };
}

/**
 * `join-token rotate`: a new token, put in force in the store first (with several control planes:
 * when the store refuses, nothing changed anywhere), then in this data dir's join.token and here.
 */
export function joinTokenRotation(o: { dataDir: string; source: TokenSource; joinToken: JoinToken; store?: Pick<SharedSecretsPort, "putTokenDigest">; follower?: TokenFollower }): {
  given: boolean;
  rotate(): Promise<{ path: string; shared: boolean }>;
} {
  return {
    given: o.source === "given",
    async rotate() {
      const path = join(o.dataDir, "join.token");
      const token = generateToken("llmgw_join");
      const sha256 = sha256hex(token);
      if (o.store) await o.store.putTokenDigest("join", sha256, "replace");
      o.follower?.know(sha256);
      writePrivateFile(path, `${token}\n`);
      o.joinToken.useDigest(sha256);
      return { path, shared: o.store !== undefined };
    },
  };
}
