// A head node among several on one store (`serve --ha`, or any PostgreSQL store): the lease
// keeper that decides whether this one leads, its row in control_planes (refreshed with every
// renewal), the store's watch and a periodic backstop that make a standby see the leader's writes,
// the probe of the floating address, and the summary's `control_planes` built from them. Each
// renewal round refreshes what the summary shows, so a summary never waits on the store or the
// network for it.

import { randomBytes } from "node:crypto";
import { connect } from "node:net";
import { hostname, networkInterfaces } from "node:os";
import type { Logger } from "pino";
import { ConfigError } from "../config";
import { LeaseKeeper, controlPlanesView } from "../control/ha";
import type { StoreImage } from "../control/image";
import type { ControlLoop } from "../control/control-loop";
import type { LeadershipCell } from "../control/leadership";
import { liveNamesake } from "../control/name-clash";
import type { MembershipPort } from "../control/store-port";
import type { ControlPlaneRecord, Lease } from "../control/types";
import { bracketHost, isLoopbackHost } from "../lib/net";
import type { Scheduler, Timer } from "../lib/scheduler";
import { HealthSchema, type Summary } from "../protocol/views";

/**
 * How often a control plane reloads everything even without a notification (one missed is not
 * forever). The read is the whole store: at a few thousand nodes, a pause of the head node's
 * thread worth keeping rare.
 */
export const BACKSTOP_RELOAD_MS = 30_000;

export interface MembershipOptions {
  /** Whether this control plane leads: the lease keeper decides it, and hears of fenced writes. */
  leadership: LeadershipCell;
  /** Told when another control plane wrote to the store. */
  loop: Pick<ControlLoop, "storeChanged">;
  image: StoreImage;
  scheduler: Scheduler;
  log: Logger;
  record: ControlPlaneRecord;
  /** This process's own id: the lease is held by name and id (two processes of one name are two holders). */
  instance: string;
  ttlMs: number;
  renewMs: number;
  /** Told whenever the store may hold news beyond the image's rows (another's write, a lease round, the backstop): the shared join token is read again. */
  onStoreNews?: () => void;
  /** Why this control plane must not lead now (the store's schema is newer than it knows), asked before every lease round. */
  mayLead?: () => Promise<string | undefined>;
  /** `--floating-address`: probed on this control plane's admin port, with its scheme. */
  floating?: { address: string; port: number; scheme: "http" | "https"; ca?: string };
}

export interface ControlPlaneMembership {
  keeper: LeaseKeeper;
  /** The summary's control_planes as the last renewal round saw them. */
  view(): Summary["control_planes"];
  /** Stops watching and renewing; a leader releases the lease (a standby takes over at once). */
  stop(): Promise<void>;
}

/** A new id for this process among the control planes (random: a restart is another holder of the lease). */
export function newInstanceId(): string {
  return randomBytes(4).toString("hex");
}

/**
 * Refuses to start while another live control plane goes by this one's name on the store (see
 * control/name-clash.ts): it would write over this one's rows, and keepalived could not tell the
 * two apart. A recent row that turns out to be this one's own earlier run costs a short wait.
 */
export async function refuseNamesake(o: { store: Pick<MembershipPort, "controlPlanes">; describe: string; name: string; ttlMs: number; renewMs: number; scheduler: Scheduler; log: Logger }): Promise<void> {
  const live = await liveNamesake({
    ...o,
    goneAlready: async (row) => {
      const gone = await nobodyListensHere(row.adminUrl, o.scheduler);
      if (gone) o.log.info({ name: o.name, seen_ago_ms: row.seenAgoMs, address: row.adminUrl }, `a control plane named ${o.name} was on this store moments ago; nothing listens at ${row.adminUrl} on this machine any more: an earlier run of this one`);
      return gone;
    },
    onWatch: (row, upToMs) =>
      o.log.info({ name: o.name, seen_ago_ms: row.seenAgoMs, address: row.adminUrl, wait_ms: upToMs }, `a control plane named ${o.name} was on this store moments ago: waiting up to ${upToMs} ms to tell a live one from an earlier run of this one`),
  });
  if (!live) return;
  throw new ConfigError([
    `name ${o.name}: another control plane named ${o.name} is running on this store (${o.describe}); it answers at ${live.adminUrl} and refreshed its row ${live.seenAgoMs} ms ago. ` +
      "Give each control plane its own --name (the default is the machine's host name, so two on one machine, or machines cloned from one image, clash), or stop the other one first",
  ]);
}

/**
 * True when `url` names this machine (a loopback address or one of its interfaces') and a TCP
 * connection to its port is refused: whatever wrote that URL no longer listens there. Anything
 * else (another machine, a connection accepted, a timeout, a URL that does not parse) is false:
 * not known to be gone.
 */
export async function nobodyListensHere(url: string, scheduler: Scheduler, timeoutMs = 1000): Promise<boolean> {
  let host: string;
  let port: number;
  try {
    const u = new URL(url);
    host = u.hostname.replace(/^\[|\]$/g, "");
    port = Number(u.port || (u.protocol === "https:" ? 443 : 80));
  } catch {
    return false;
  }
  const local = isLoopbackHost(host) || Object.values(networkInterfaces()).some((list) => (list ?? []).some((a) => a.address.toLowerCase() === host.toLowerCase()));
  if (!local) return false;
  return new Promise<boolean>((resolve) => {
    const socket = connect({ host, port });
    const done = (gone: boolean) => {
      timer.cancel();
      socket.destroy();
      resolve(gone);
    };
    const timer = scheduler.after(timeoutMs, () => done(false));
    socket.once("connect", () => done(false));
    socket.once("error", (e: NodeJS.ErrnoException) => done(e.code === "ECONNREFUSED"));
  });
}

/** The name a control plane goes by without `--name`. */
export function defaultName(): string {
  return hostname().replace(/[^A-Za-z0-9._:-]/g, "-").replace(/^[^A-Za-z0-9]+/, "") || "llmgw";
}

/**
 * The admin URL others reach this control plane at, without `--advertise-url`: the listen host,
 * or on a wildcard listener the machine's first non-internal address.
 */
export function advertisedUrl(host: string, port: number, scheme: "http" | "https"): string {
  let h = host;
  if (h === "" || h === "0.0.0.0" || h === "::") {
    const v6 = h === "::";
    h = v6 ? "::1" : "127.0.0.1";
    found: for (const list of Object.values(networkInterfaces()))
      for (const a of list ?? [])
        if (!a.internal && (a.family === "IPv4" || v6)) {
          h = a.address;
          break found;
        }
  }
  return `${scheme}://${bracketHost(h)}:${port}`;
}

export async function joinControlPlanes(o: MembershipOptions): Promise<ControlPlaneMembership> {
  const { leadership, loop, image, scheduler, log, record } = o;
  const self = record.name;
  let view: Summary["control_planes"] = { members: [] };
  let floatingUp = false;
  let refreshing = false;
  let probing = false;
  let registerFailing = false;

  const register = async () => {
    try {
      await image.upsertControlPlane(record);
      if (registerFailing) log.info({ name: self }, "control plane registered again");
      registerFailing = false;
    } catch (e) {
      if (!registerFailing) log.warn({ name: self, err: (e as Error).message }, "control plane row not refreshed: others may show this one as not answering");
      registerFailing = true;
    }
  };
  const refresh = async (lease: Lease | undefined) => {
    if (refreshing) return;
    refreshing = true;
    try {
      await register();
      const rows = await image.controlPlanes();
      const floating = o.floating ? { address: o.floating.address, up: floatingUp } : undefined;
      const barred = keeper.barred();
      view = controlPlanesView({ rows, lease: lease ?? (await image.readLease()), self, ttlMs: o.ttlMs, ...(floating ? { floating } : {}), ...(barred !== undefined ? { barred } : {}) });
    } catch {
      // The store does not answer: the last picture stays (the keeper logs the cause).
    } finally {
      refreshing = false;
    }
  };
  const probe = async () => {
    if (!o.floating || probing) return;
    probing = true;
    floatingUp = await probeLeader(o.floating, scheduler, Math.min(1000, o.renewMs / 2));
    probing = false;
  };

  const keeper = new LeaseKeeper({
    store: image,
    scheduler,
    log: log.child({ component: "lease" }),
    name: self,
    instance: o.instance,
    ttlMs: o.ttlMs,
    renewMs: o.renewMs,
    onChange: (l) => leadership.set(l),
    ...(o.mayLead ? { mayLead: o.mayLead } : {}),
    onRound: (lease) => {
      void refresh(lease);
      void probe();
      o.onStoreNews?.();
    },
  });
  const unfence = leadership.onFenced((e) => keeper.fenced(e));
  leadership.set(keeper.leadership());

  // Another control plane's commit: the image reads what it changed at its next read (a tick soon);
  // the backstop reloads everything now and then all the same, in the background: reads (the
  // heartbeats answered from memory) go on from memory meanwhile.
  const unwatch = image.watch((change) => {
    void loop.storeChanged(change);
    if (change !== "seen" && change !== "reports") o.onStoreNews?.();
  });
  let reloading = false;
  const backstop: Timer = scheduler
    .every(BACKSTOP_RELOAD_MS, () => {
      if (reloading) return;
      reloading = true;
      void image
        .reload()
        .then(
          () => (o.onStoreNews?.(), loop.storeChanged()),
          (e: unknown) => {
            log.warn({ err: (e as Error).message }, "the backstop reload of the store failed: memory is read again from the store");
            image.invalidate();
            return loop.storeChanged();
          },
        )
        .finally(() => (reloading = false));
    })
    .unref();

  await register();
  await keeper.start();
  await refresh(keeper.lease());
  const barred = keeper.barred();
  log.info(
    { name: self, holder: keeper.holder, address: record.adminUrl, leading: keeper.leadership().leading, epoch: keeper.leadership().epoch, lease_ttl_ms: o.ttlMs, lease_renew_ms: o.renewMs, ...(barred !== undefined ? { barred } : {}) },
    keeper.leadership().leading ? "control plane leads" : barred !== undefined ? `control plane stands by: ${barred}` : "control plane stands by",
  );

  return {
    keeper,
    view: () => view,
    async stop() {
      unwatch();
      backstop.cancel();
      await keeper.stop();
      unfence();
    },
  };
}

/** Whether the floating address answers `/healthz?leader=1` as a leader (200, leading: true), within timeoutMs. */
async function probeLeader(f: NonNullable<MembershipOptions["floating"]>, scheduler: Scheduler, timeoutMs: number): Promise<boolean> {
  const abort = new AbortController();
  const timer = scheduler.after(timeoutMs, () => abort.abort());
  try {
    // The control planes share one certificate (agents pin one fingerprint across them): trust
    // it, whatever name the floating address goes by.
    const tls = f.scheme === "https" ? { tls: { ...(f.ca ? { ca: f.ca } : {}), checkServerIdentity: () => undefined } } : {};
    const res = await fetch(`${f.scheme}://${bracketHost(f.address)}:${f.port}/healthz?leader=1`, { signal: abort.signal, ...tls });
    if (res.status !== 200) {
      await res.arrayBuffer().catch(() => undefined);
      return false;
    }
    const body = HealthSchema.safeParse(await res.json());
    return body.success && body.data.leading;
  } catch {
    return false;
  } finally {
    timer.cancel();
  }
}
