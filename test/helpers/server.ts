// Starts a real head node in-process on 127.0.0.1 with a fresh data dir and a manual scheduler,
// plus small fetch helpers that carry the right token. Tests speak to it over HTTP as users and
// agents do; where a test must go around the API (state the edge would refuse, rows the API
// never shows) it goes through `seed`, `peek` and `db` below, the one list of such back doors.

import type { Database } from "bun:sqlite";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { type HeadParts, type RunningServer, startHead } from "../../src/app/head";
import { ServeConfig } from "../../src/config";
import { ManualScheduler } from "../../src/lib/scheduler";
import { SegmentName } from "../../src/protocol/common";
import type { UsageSource } from "../../src/protocol/routing";
import { T0 } from "./fleet";
import { scratchDir } from "./tmp";

type Store = NonNullable<HeadParts["store"]>;
type Control = HeadParts["control"];

/** Writes straight into the head node, past the API's checks. */
export interface Seed {
  /** Lets `node` report `address` from anywhere (before it has joined, too). */
  allowAddress(node: string, address: string): Promise<void>;
  /** A replica row as the reconciler would write it (no tick places or checks it). */
  replica(row: Parameters<Store["insertReplica"]>[0]): void;
  /** A model's control state (parked, failures, last requested…) as a tick would leave it. */
  modelState(model: string, patch: Parameters<Store["updateModelState"]>[1]): Promise<void>;
  /** Catalog entries, without the admin API's validation. */
  models(specs: Parameters<Control["catalog"]["putModels"]>[0]): ReturnType<Control["catalog"]["putModels"]>;
  /** A heartbeat handed to the control plane as parsed, without the agent API's edge. */
  heartbeat(hb: Parameters<Control["intake"]["heartbeat"]>[0]): ReturnType<Control["intake"]["heartbeat"]>;
  /** Stands in for the router's usage report and collects it, as a tick does first. */
  usage(source: UsageSource): void;
}

/** Reads what the API never shows. */
export interface Peek {
  /** Rows per table. */
  counts(): ReturnType<Store["counts"]>;
  nodeExists(name: string): Promise<boolean>;
  /** API keys as stored (hashes). */
  apiKeys(): ReturnType<Store["listApiKeys"]>;
  nodeForCredential(credential: string): ReturnType<Control["identity"]["nodeForCredential"]>;
  engineKey(replicaId: string): string | null;
  /** Where and with what the head node reads a replica's engine log. */
  logSource(replicaId: string): ReturnType<Control["logs"]["logSource"]>;
  replicas(): ReturnType<Control["views"]["replicas"]>;
}

export interface TestServer extends RunningServer {
  /** The head node's time: it stands still until a test moves it. */
  clock: ManualScheduler;
  admin(path: string, init?: RequestInit): Promise<Response>;
  /**
   * A heartbeat through HTTP. Without a token it speaks as the node it names, the way an agent
   * does: the join token the first time, that node's credential after (kept in `credentials`),
   * with the node's reported address allowed (tests report made-up addresses from 127.0.0.1).
   * With a token, exactly that token and nothing else.
   */
  agent(body: unknown, token?: string): Promise<Response>;
  /** Credentials the helper's heartbeats got, by node. */
  credentials: Map<string, string>;
  seed: Seed;
  peek: Peek;
  /** The head node's parts (benchmarks drive the control plane directly). */
  parts: HeadParts;
  /** The store's database itself: raw rows, dumps, PRAGMAs (a full disk). */
  db: Database;
}

export async function testServer(overrides: Record<string, unknown> = {}, log: pino.Logger = pino({ level: "silent" })): Promise<TestServer> {
  const dataDir = scratchDir("llmgw-test-");
  const config = ServeConfig.parse({ data_dir: dataDir, admin_listen: "127.0.0.1:0", listen: "127.0.0.1:0", ...overrides });
  const clock = new ManualScheduler(T0);
  const { server, parts } = await startHead({ config, log, scheduler: clock, loop: false });
  const { image, control } = parts;
  if (!parts.store) throw new Error("testServer: the test helpers' back doors need the SQLite store");
  const store = parts.store;
  // Writes past the control plane leave the in-memory image behind: each back door drops it, so the
  // next read loads the store again.
  const past = <T>(v: T): T => {
    image.invalidate();
    return v;
  };
  const db = new Proxy(store.sqlite, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target) as unknown;
      if (typeof v !== "function") return v;
      return (...args: unknown[]) => {
        // Last-seen times held in memory reach the rows first (bun:sqlite writes them at once).
        void image.flush().catch(() => undefined);
        image.invalidate();
        // A statement prepared now runs later, still within this turn: drop memory after it too.
        queueMicrotask(() => image.invalidate());
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  const credentials = new Map<string, string>();
  // A server with tls_cert: the helpers trust that certificate.
  const tls = config.tls_cert ? { tls: { ca: readFileSync(config.tls_cert, "utf8") } } : {};
  const seed: Seed = {
    allowAddress: async (node, address) => {
      await image.setAllowedAddress(node, address, clock.now());
    },
    replica: (row) => past(store.insertReplica(row)),
    modelState: (name, patch) => image.updateModelState(name, patch),
    models: (specs) => control.catalog.putModels(specs),
    heartbeat: (hb) => control.intake.heartbeat(hb),
    usage: (source) => control.usage.collect(source),
  };
  const peek: Peek = {
    counts: () => store.counts(),
    nodeExists: async (name) => (await image.nodeTrust(name)).exists,
    apiKeys: () => image.listApiKeys(),
    nodeForCredential: (credential) => control.identity.nodeForCredential(credential),
    engineKey: (id) => control.projector.engineKey(id),
    logSource: (id) => control.logs.logSource(id),
    replicas: () => control.views.replicas(),
  };
  return Object.assign(server, {
    clock,
    parts,
    seed,
    peek,
    db,
    admin: (path: string, init: RequestInit = {}) =>
      fetch(`${server.adminUrl}${path}`, {
        ...tls,
        ...init,
        headers: { authorization: `Bearer ${server.adminToken}`, "content-type": "application/json", ...(init.headers as Record<string, string>) },
      }),
    credentials,
    agent: async (body: unknown, token?: string) => {
      const hb = typeof body === "object" && body !== null ? (body as { node?: unknown; address?: unknown }) : {};
      const node = typeof hb.node === "string" ? hb.node : undefined;
      if (token === undefined && node !== undefined && typeof hb.address === "string" && SegmentName.safeParse(node).success && hb.address.length <= 255)
        try {
          if ((await image.nodeTrust(node)).allowedAddress !== hb.address) await seed.allowAddress(node, hb.address);
        } catch {
          // A store that cannot take the write (a test of a locked or full disk) refuses the heartbeat too.
        }
      const presented = token ?? (node !== undefined ? credentials.get(node) : undefined) ?? server.joinToken;
      const res = await fetch(`${server.adminUrl}/agent/v1/heartbeat`, {
        ...tls,
        method: "POST",
        headers: { authorization: `Bearer ${presented}`, "content-type": "application/json" },
        body: typeof body === "string" ? body : JSON.stringify(body),
      });
      if (res.ok && node !== undefined) {
        const answer = (await res.clone().json()) as { credential?: string };
        if (answer.credential) credentials.set(node, answer.credential);
      }
      return res;
    },
  });
}
