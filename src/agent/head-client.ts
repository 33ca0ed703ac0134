// The agent's client of the head node's agent API: one request at a time as the loops ask,
// every failure sorted into a kind the loops act on (retry, give up, tell the operator what to
// fix), and the server's certificate trusted the way the operator said (--server-ca, a pinned
// --server-fingerprint, or the system's CAs). With several control planes it holds their list
// and the one requests go to now: a loop that got no answer there moves it on (failover), and
// both loops follow. It knows nothing of heartbeats' contents or of what the answers mean:
// conversation.ts and answers.ts do.

import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { type PeerCertificate, connect as tlsConnect, rootCertificates } from "node:tls";
import type { Logger } from "pino";
import { timeoutSignal } from "../lib/abort";
import type { Scheduler } from "../lib/scheduler";
import { HeartbeatResponse } from "../protocol/heartbeat";
import { AgentError } from "./errors";

export type FetchLike = (input: string | URL | Request, init?: BunFetchRequestInit) => Promise<Response>;

/**
 * Why a request got no usable answer; the kind decides what the loops do next. "switched": the
 * request was cut short because the client moved to another server meanwhile (ask there).
 */
export type Failure = {
  ok: false;
  kind: "aborted" | "switched" | "unreachable" | "unauthorized" | "forbidden" | "untrusted" | "rejected" | "not_found" | "taken" | "limited" | "http" | "bad_answer";
  message: string;
  /** The HTTP status, when the server answered with one. */
  status?: number;
};
export type Outcome<T> = { ok: true; value: T } | Failure;
/** An outcome and the server it came from. */
export type Answer<T> = Outcome<T> & { server: string };

/**
 * Whether another server may do better: no connection or no answer in time, or a server error
 * (a 503 from a control plane standing by or shedding load among them). A refusal of this node
 * (401, 403, 409, 400) or a bad certificate would be the same everywhere.
 */
export function worthFailover(f: Failure): boolean {
  return f.kind === "unreachable" || (f.status !== undefined && f.status >= 500);
}

/** The code of the error the pin check hands to fetch (which rejects with that very error). */
const PIN_MISMATCH = "LLMGW_PIN_MISMATCH";
/** Certificate verification failures, as Bun's fetch reports them in `code`. */
const CERT_ERROR = /CERT|SELF_SIGNED|LEAF_SIGNATURE|ISSUER|ALTNAME|HOSTNAME_MISMATCH/;

/** HTTP statuses of the agent API with a meaning of their own; any other is "http". */
const STATUS_KIND: Record<number, Failure["kind"]> = {
  400: "rejected",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  409: "taken",
  429: "limited",
};

export interface HeadClientOptions {
  /**
   * The head node's admin URL, or the control planes' (or their floating address), without
   * trailing slashes, in the order they are tried; distinct.
   */
  servers: readonly string[];
  /** --server-ca: a PEM file to trust instead of the system's CAs. */
  serverCa: string | undefined;
  /** --server-fingerprint: the SHA-256 fingerprint the server's certificate must have (upper case). */
  serverFingerprint: string | undefined;
  fetch: FetchLike;
  /** What a request presents as its bearer token (the node's credential, or the join token). */
  bearer: () => string;
  /** Aborts every request in flight and refuses new ones (the agent stopping). */
  signal: AbortSignal;
  scheduler: Scheduler;
  /** Where a move to another server is logged. */
  log?: Logger;
}

export class HeadClient {
  private readonly o: HeadClientOptions;
  // An https server: the connections to it (one pool, one certificate check per connection).
  private session: Bun.FetchSession | undefined;
  /** Pinned without --server-ca: the server's certificate must be fetched and checked first. */
  private needsProbe = false;
  private probing: Promise<Failure | undefined> | null = null;
  /** The server requests go to now, as an index into o.servers. */
  private current = 0;
  /** Servers that failed since one last answered: once all have, the loops back off. */
  private readonly failedSince = new Set<number>();
  /** Every server has failed since one last answered (and that was logged once). */
  private exhausted = false;
  /** Aborted on each move, so a request still waiting on the server left is asked again at the next. */
  private moved = new AbortController();

  constructor(o: HeadClientOptions) {
    if (o.servers.length === 0) throw new Error("HeadClient needs at least one server");
    this.o = o;
  }

  /** The server requests go to now. */
  get server(): string {
    return this.o.servers[this.current]!;
  }

  get servers(): readonly string[] {
    return this.o.servers;
  }

  url(path: string, server = this.server): string {
    return server + path;
  }

  /**
   * A request to `from` got no answer another server might give (worthFailover), or an answer
   * the agent cannot use (a stale leader): moves to the next server, unless a request of the
   * other loop already did. Returns whether to ask again at once: the server now current has
   * not failed since one last answered. Once every one has, the loops back off as with one
   * server, and the client goes on trying them in turn. With one server nothing moves.
   */
  failover(from: string, reason: string): boolean {
    const n = this.o.servers.length;
    const i = this.o.servers.indexOf(from);
    if (i >= 0) this.failedSince.add(i);
    if (n === 1) return false;
    if (i === this.current) {
      const to = (i + 1) % n;
      this.current = to;
      const was = this.moved;
      this.moved = new AbortController();
      was.abort();
      const fields = { from, to: this.server, reason };
      if (!this.failedSince.has(to)) this.o.log?.warn(fields, `switching to ${this.server}: ${from} ${reason}`);
      else if (!this.exhausted) {
        this.exhausted = true;
        this.o.log?.error({ ...fields, servers: this.o.servers }, `no server answers (${this.o.servers.join(", ")}); trying each in turn, backing off; running replicas are left as they are`);
      } else this.o.log?.debug(fields, `switching to ${this.server}: ${from} ${reason}`);
    }
    return !this.failedSince.has(this.current);
  }

  /** A request to `server` got an answer the agent uses: the list's failures are forgotten. */
  answered(server: string): void {
    if (this.o.servers.indexOf(server) !== this.current) return;
    if (this.exhausted) this.o.log?.info({ server }, `${server} answers again`);
    this.exhausted = false;
    this.failedSince.clear();
  }

  close(): void {
    this.session?.close();
  }

  /** A request to the agent API whose answer is a heartbeat response (the heartbeat and the long poll). */
  async request(path: string, init: RequestInit, timeoutMs: number): Promise<Answer<HeartbeatResponse>> {
    const server = this.server;
    return { ...(await this.requestAt(server, path, init, timeoutMs)), server };
  }

  private async requestAt(server: string, path: string, init: RequestInit, timeoutMs: number): Promise<Outcome<HeartbeatResponse>> {
    const got = await this.send(server, path, init, timeoutMs);
    if (!got.ok) return got;
    const { res, text } = got.value;
    if (!res.ok) return { ok: false, kind: STATUS_KIND[res.status] ?? "http", message: `${res.status} ${serverMessage(text) ?? res.statusText}`, status: res.status };
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return { ok: false, kind: "bad_answer", message: `the answer is not JSON: ${text.slice(0, 200)}` };
    }
    const parsed = HeartbeatResponse.safeParse(json);
    if (!parsed.success) {
      const first = parsed.error.issues[0];
      return { ok: false, kind: "bad_answer", message: `the answer is not a heartbeat response: ${first?.path.join(".") || "(body)"}: ${first?.message}` };
    }
    return { ok: true, value: parsed.data };
  }

  /** The request on the wire and its body read; a failure says what kept an answer from arriving. */
  private async send(server: string, path: string, init: RequestInit, timeoutMs: number): Promise<Outcome<{ res: Response; text: string }>> {
    const { signal } = this.o;
    const moved = this.moved.signal;
    const switched = (): Failure => ({ ok: false, kind: "switched", message: `moved to ${this.server}` });
    if (this.needsProbe) {
      const failed = await this.probe(server, timeoutMs);
      if (failed) return failed;
    }
    const deadline = timeoutSignal(this.o.scheduler, timeoutMs);
    try {
      let res: Response;
      try {
        res = await this.o.fetch(this.url(path, server), {
          ...init,
          headers: { authorization: `Bearer ${this.o.bearer()}`, "content-type": "application/json" },
          signal: AbortSignal.any([signal, deadline.signal, moved]),
          ...(this.session ? { session: this.session } : {}),
        });
      } catch (e) {
        if (signal.aborted) return { ok: false, kind: "aborted", message: "stopped" };
        if (moved.aborted) return switched();
        const untrusted = this.certificateFailure(e, server);
        if (untrusted) {
          // Pinned without a CA, the certificate may have changed since the probe: probing
          // again names the fingerprint the server has now.
          const changed = this.needsProbe ? await this.probe(server, timeoutMs) : undefined;
          return changed?.kind === "untrusted" ? changed : untrusted;
        }
        const err = e as Error;
        const why = err.name === "TimeoutError" ? `no answer within ${Math.round(timeoutMs / 1000)}s` : err.message;
        return { ok: false, kind: "unreachable", message: why };
      }
      try {
        return { ok: true, value: { res, text: await res.text() } };
      } catch (e) {
        if (signal.aborted) return { ok: false, kind: "aborted", message: "stopped" };
        if (moved.aborted) return switched();
        return { ok: false, kind: "unreachable", message: `connection lost while reading the answer: ${(e as Error).message}` };
      }
    } finally {
      deadline.cancel();
    }
  }

  // ---- TLS --------------------------------------------------------------------------------

  /**
   * How the server's certificate is trusted: --server-ca replaces the system's CAs;
   * --server-fingerprint is checked on every new connection by the session's
   * checkServerIdentity, which Bun's fetch calls only once the chain has verified. A pin
   * without a CA therefore needs the certificate itself as the trust anchor: probe() gets it
   * over node:tls, compares the fingerprint, and trusts that certificate from then on.
   * The same CA and pin apply to every server of the list (one certificate, or one CA, for
   * all the control planes). Throws AgentError for a --server-ca that cannot be used.
   */
  setUpTls(): void {
    if (!this.o.servers.some((s) => /^https:/i.test(s))) return;
    const { serverCa: caPath, serverFingerprint: pin } = this.o;
    let ca: string | undefined;
    if (caPath !== undefined) {
      try {
        ca = readFileSync(caPath, "utf8");
      } catch (e) {
        const err = e as NodeJS.ErrnoException;
        const why = err.code === "ENOENT" ? "no such file" : err.code === "EACCES" ? "permission denied" : err.message;
        throw new AgentError(`--server-ca ${caPath}: cannot read it (${why})`);
      }
      try {
        new X509Certificate(ca);
      } catch (e) {
        throw new AgentError(`--server-ca ${caPath}: not a PEM certificate (${(e as Error).message})`);
      }
    }
    if (pin !== undefined && ca === undefined) {
      this.needsProbe = true;
      return;
    }
    if (ca !== undefined || pin !== undefined) this.useTls(ca);
  }

  private useTls(ca: string | string[] | undefined): void {
    const pin = this.o.serverFingerprint;
    this.session?.close();
    this.session = new Bun.FetchSession({
      tls: {
        ...(ca !== undefined ? { ca } : {}),
        // The pin replaces the host name check: it names the one certificate to accept, and
        // agents often reach the head node by an address its certificate does not list.
        ...(pin !== undefined ? { checkServerIdentity: (_host: string, cert: PeerCertificate) => pinCheck(pin, cert) } : {}),
      },
    });
  }

  /** One probe at a time; the heartbeat and the long poll share its outcome. */
  private probe(server: string, timeoutMs: number): Promise<Failure | undefined> {
    this.probing ??= (async (): Promise<Failure | undefined> => {
      const pin = this.o.serverFingerprint!;
      const u = new URL(server);
      const host = u.hostname.replace(/^\[|\]$/g, "");
      let cert: PeerCertificate;
      try {
        cert = await peerCertificate(host, Number(u.port || 443), timeoutMs, this.o.signal, this.o.scheduler);
      } catch (e) {
        if (this.o.signal.aborted) return { ok: false, kind: "aborted", message: "stopped" };
        return { ok: false, kind: "unreachable", message: (e as Error).message };
      }
      const mismatch = pinCheck(pin, cert);
      if (mismatch) return { ok: false, kind: "untrusted", message: mismatch.message };
      // Beside the system's CAs, so a pinned certificate a public CA signed verifies as well.
      this.useTls([...rootCertificates, derToPem(cert.raw)]);
      this.needsProbe = false;
      return undefined;
    })().finally(() => {
      this.probing = null;
    });
    return this.probing;
  }

  /** A fetch error that says the server's certificate was not accepted, as the operator's to-do. */
  private certificateFailure(e: unknown, server: string): Failure | undefined {
    const err = e as Error & { code?: string };
    const code = typeof err.code === "string" ? err.code : "";
    if (code !== PIN_MISMATCH && !CERT_ERROR.test(code)) return undefined;
    const { serverCa: caPath, serverFingerprint: pin } = this.o;
    const pinOnly = pin !== undefined && caPath === undefined;
    if (pinOnly) this.needsProbe = true;
    let message: string;
    if (code === PIN_MISMATCH) message = err.message;
    else if (pinOnly)
      message = `the server's certificate matches --server-fingerprint but does not verify (${err.message}, ${code}): a pin alone trusts a self-signed certificate; for one a private CA signed, give that CA with --server-ca as well`;
    else if (/ALTNAME|HOSTNAME/.test(code))
      message = `the server's TLS certificate is not valid for ${new URL(server).hostname} (${err.message}); use a --server name or address its certificate lists, or pin the certificate with --server-fingerprint`;
    else if (caPath !== undefined)
      message = `the server's TLS certificate is not trusted by --server-ca ${caPath} (${err.message}, ${code}); give the head node's --tls-cert, or the CA that signed it`;
    else
      message = `the server's TLS certificate is not trusted (${err.message}, ${code}); give --server-ca FILE (the head node's --tls-cert, or the CA that signed it) or pin it with --server-fingerprint SHA256 (llmgw serve prints it)`;
    return { ok: false, kind: "untrusted", message };
  }
}

// ---- helpers ------------------------------------------------------------------------------

/** The pin check: undefined when the certificate is the pinned one, else the error to fail with. */
function pinCheck(pin: string, cert: PeerCertificate): Error | undefined {
  const got = (cert.fingerprint256 ?? "").toUpperCase();
  if (got === pin) return undefined;
  const err = new Error(`the server's certificate does not match --server-fingerprint: expected ${pin}, got ${got || "(none)"}`);
  return Object.assign(err, { code: PIN_MISMATCH });
}

/** The server's leaf certificate, without judging it (the pin does that). */
function peerCertificate(host: string, port: number, timeoutMs: number, signal: AbortSignal, scheduler: Scheduler): Promise<PeerCertificate> {
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host, port, rejectUnauthorized: false, ...(isIP(host) ? {} : { servername: host }) });
    const done = (e: Error | undefined, cert?: PeerCertificate) => {
      timer.cancel();
      signal.removeEventListener("abort", onAbort);
      socket.destroy();
      if (e) reject(e);
      else resolve(cert!);
    };
    const onAbort = () => done(new Error("stopped"));
    const timer = scheduler.after(timeoutMs, () => done(new Error(`no TLS handshake within ${Math.round(timeoutMs / 1000)}s`)));
    signal.addEventListener("abort", onAbort, { once: true });
    socket.once("secureConnect", () => {
      const cert = socket.getPeerCertificate();
      if (!cert?.raw) done(new Error(`the TLS handshake with ${host}:${port} gave no certificate`));
      else done(undefined, cert);
    });
    socket.once("error", (e) => done(new Error(`TLS handshake with ${host}:${port} failed: ${e.message}`)));
  });
}

function derToPem(der: Buffer): string {
  return `-----BEGIN CERTIFICATE-----\n${der.toString("base64").match(/.{1,64}/g)!.join("\n")}\n-----END CERTIFICATE-----\n`;
}

/** The admin/agent API's error message from an error body, if it is one. */
function serverMessage(text: string): string | undefined {
  try {
    const body = JSON.parse(text) as { error?: { message?: unknown } };
    if (typeof body.error?.message === "string") return body.error.message;
  } catch {
    // Not JSON: a proxy's page, say.
  }
  const t = text.trim();
  return t === "" ? undefined : t.slice(0, 300);
}
