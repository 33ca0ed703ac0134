// Several control planes in one process on one SQLite file: each its own Store connection
// wrapped in its own in-memory image, its own control plane's parts, one shared manual clock.
// Leadership is given by hand (lead(): the lease taken for long enough, no keeper renewing it;
// the lease is another test's subject); store.watch is wired as the app wires it.

import { rmSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import type { CatalogEntry, DemandSink, EndpointInfo, EndpointSink } from "../../src/control/interfaces";
import { StoreImage } from "../../src/control/image";
import type { ManualScheduler } from "../../src/lib/scheduler";
import type { UsageSource } from "../../src/protocol/routing";
import { Store } from "../../src/store";
import { type RouterStandIn, type TestControl, type TestControlOptions, testControl } from "./control";
import { SQLITE_DEFAULTS } from "./control-settings";
import { scratchDir } from "./tmp";

export interface Plane {
  name: string;
  store: Store;
  image: StoreImage;
  ctl: TestControl;
  /** The router's side: what it was told, the usage it reports (a test says what it served). */
  router: RouterStandIn;
  /** Every endpoint list the control plane published to its router, oldest first. */
  published: EndpointInfo[][];
  catalogs: CatalogEntry[][];
}

/**
 * The usage side of one router, as the control loop reads it: a test stamps what it served, and
 * restarts it (its stamps are lost, and it watches from then).
 */
export class RouterUsageSide implements UsageSource {
  private used = new Map<string, number>();
  constructor(private since: number) {}
  served(id: string, at: number): void {
    this.used.set(id, at);
  }
  restart(at: number): void {
    this.used = new Map();
    this.since = at;
  }
  lastUsed(): ReadonlyMap<string, number> {
    return this.used;
  }
  inflightByModel(): ReadonlyMap<string, number> {
    return new Map();
  }
  watchingSince(): number {
    return this.since;
  }
}

/** Makes `p` the leader: it takes the lease (for ten minutes of the database's clock) and leads under its epoch. */
export async function lead(p: Plane): Promise<void> {
  const lease = await p.image.acquireLease(p.name, 600_000);
  if (lease.holder !== p.name) throw new Error(`${lease.holder} holds the lease`);
  p.ctl.leadership.set({ leading: true, epoch: lease.epoch, name: p.name });
}

export interface Planes {
  dir: string;
  path: string;
  planes: Plane[];
  /** One more control plane on the same file (as a restarted one starts). */
  add(name: string): Promise<Plane>;
  stop(): void;
}

export async function startPlanes(o: {
  names: string[];
  clock: ManualScheduler;
  liveWithinMs?: number;
  log?: pino.Logger;
  watch?: boolean;
  control?: Partial<TestControlOptions>;
  /** A plane's own router beside the stand-in (told the same tables), built with the plane's demand sink. */
  routerOf?: (name: string, demand: DemandSink) => (EndpointSink & Partial<UsageSource>) | undefined;
}): Promise<Planes> {
  const dir = scratchDir("llmgw-planes-");
  const path = join(dir, "llmgw.db");
  const log = o.log ?? pino({ level: "silent" });
  const planes: Plane[] = [];
  const unwatch: (() => void)[] = [];
  const add = async (name: string): Promise<Plane> => {
    const store = new Store({ path, ...SQLITE_DEFAULTS });
    const image = new StoreImage(store, o.clock);
    // The plane's demand goes to its catalog once it is built; a router only asks while it serves.
    let ctl: TestControl | undefined;
    const router = o.routerOf?.(name, { requestModel: (m) => void ctl!.catalog.requestModel(m) });
    ctl = testControl({
      store: image,
      scheduler: o.clock,
      log: log.child({ plane: name }),
      nodeTimeoutMs: 15_000,
      heartbeatIntervalMs: 1_000,
      // No load-based scale-down while a test moves minutes ahead: its subject is idleness.
      scaleDownDelayMs: 24 * 3_600_000,
      reconcile: { backoffMs: 2_000, backoffMaxMs: 60_000, maxFailures: 3, replaceAfterMs: 30_000, reportGraceMs: 5_000, startTimeoutMs: 120_000 },
      shared: { name, liveWithinMs: o.liveWithinMs ?? 15_000 },
      leadership: { leading: false, epoch: 1, name },
      ...(router ? { alsoTell: router } : {}),
      ...o.control,
    });
    await ctl.started;
    const c = ctl;
    const p: Plane = { name, store, image, ctl: c, router: c.router, published: c.router.published, catalogs: c.router.catalogs };
    await c.memory.loadReports();
    if (o.watch !== false) unwatch.push(image.watch((change) => void c.loop.storeChanged(change)));
    planes.push(p);
    return p;
  };
  for (const name of o.names) await add(name);
  return {
    dir,
    path,
    planes,
    add,
    stop() {
      for (const u of unwatch) u();
      for (const p of planes) {
        p.ctl.load.stop();
        p.store.close();
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
