// What several control planes share through the PostgreSQL store: the leader lease and the
// control planes' rows (by the database's clock), each router's usage, nodes' reports, the
// engine secret and the shared tokens' digests.

import { eq, inArray, sql } from "drizzle-orm";
import { FALLBACK, type ShareRow, type Shares } from "../../control/limit-shares";
import type { LimitSharesPort, MembershipPort, NodeReportsPort, SharedSecretsPort, UsagePort } from "../../control/store-port";
import type { ControlPlaneRecord, ControlPlaneRow, Lease, NodeReportRow, RouterUsage, SharedTokenKind, TokenDigests } from "../../control/types";
import { DIGEST_KEYS, TOKEN_KEYS, clearTokenMigration, digestsOf, nextDigest } from "../token-digests";
import { releaseOf } from "../rows";
import type { PgConnection } from "./connection";
import * as schema from "./schema";
import { DB_NOW, byBytes, readLeaseRow, tokenRows } from "./sql";

export class PgShared implements MembershipPort, UsagePort, LimitSharesPort, NodeReportsPort, SharedSecretsPort {
  constructor(private readonly c: PgConnection) {}

  // ---- several control planes -------------------------------------------------------------

  acquireLease(holder: string, ttlMs: number, take = false): Promise<Lease> {
    const ttl = Math.max(1, Math.floor(ttlMs));
    // A second try after a lost answer renews what the first took (same holder, same epoch); a
    // second try of a take takes again, one epoch higher: still one holder.
    return this.c.write("idempotent", "meta", async (tx) => {
      // Renewed by its holder while unexpired (same epoch); taken when free or lapsed, or asked to take (epoch + 1).
      await tx.execute(sql`INSERT INTO leases (name, holder, epoch, expires_at) VALUES ('leader', ${holder}, 1, ${DB_NOW} + ${ttl}::bigint)
        ON CONFLICT (name) DO UPDATE SET
          epoch = CASE WHEN ${!take}::boolean AND leases.holder = excluded.holder AND leases.expires_at > ${DB_NOW} THEN leases.epoch ELSE leases.epoch + 1 END,
          holder = excluded.holder,
          expires_at = excluded.expires_at
        WHERE leases.holder = excluded.holder OR leases.expires_at <= ${DB_NOW}`);
      return (await readLeaseRow(tx))!;
    });
  }

  releaseLease(holder: string): Promise<void> {
    return this.c.write("idempotent", "meta", async (tx) => {
      await tx.execute(sql`UPDATE leases SET expires_at = ${DB_NOW} - 1 WHERE name = 'leader' AND holder = ${holder}`);
    });
  }

  readLease(): Promise<Lease | undefined> {
    return this.c.call("read", () => readLeaseRow(this.c.db));
  }

  upsertControlPlane(cp: ControlPlaneRecord): Promise<void> {
    return this.c.write("idempotent", "meta", async (tx) => {
      await tx.execute(sql`INSERT INTO control_planes (name, admin_url, router_url, started_at, seen_at, version, protocol) VALUES (${cp.name}, ${cp.adminUrl}, ${cp.routerUrl}, ${cp.startedAt}::bigint, ${DB_NOW}, ${cp.version ?? null}, ${cp.protocol ?? null}::integer)
        ON CONFLICT (name) DO UPDATE SET admin_url = excluded.admin_url, router_url = excluded.router_url, started_at = excluded.started_at, seen_at = excluded.seen_at, version = excluded.version, protocol = excluded.protocol`);
    });
  }

  controlPlanes(): Promise<ControlPlaneRow[]> {
    return this.c.call("read", async () =>
      (
        (await this.c.db.execute(sql`SELECT name, admin_url, router_url, started_at, ${DB_NOW} - seen_at AS ago, version, protocol FROM control_planes ORDER BY name COLLATE "C"`)) as unknown as {
          name: string;
          admin_url: string;
          router_url: string;
          started_at: number;
          ago: number;
          version: string | null;
          protocol: number | null;
        }[]
      ).map((r) => ({ name: r.name, adminUrl: r.admin_url, routerUrl: r.router_url, startedAt: Number(r.started_at), seenAgoMs: Number(r.ago), ...releaseOf(r) })),
    );
  }

  removeControlPlane(name: string): Promise<void> {
    return this.c.write("idempotent", "meta", async (tx) => {
      await tx.delete(schema.controlPlanes).where(eq(schema.controlPlanes.name, name));
      await tx.delete(schema.routerUsage).where(eq(schema.routerUsage.router, name));
      await tx.delete(schema.limitShares).where(eq(schema.limitShares.router, name));
    });
  }

  reportUsage(router: string, watchingSince: number, lastUsed: ReadonlyMap<string, number>): Promise<void> {
    const map = JSON.stringify(Object.fromEntries(lastUsed));
    return this.c.write("idempotent", "meta", async (tx) => {
      await tx.execute(sql`INSERT INTO router_usage (router, watching_since, last_used, reported_at) VALUES (${router}, ${watchingSince}::bigint, ${map}::jsonb, ${DB_NOW})
        ON CONFLICT (router) DO UPDATE SET watching_since = excluded.watching_since, last_used = excluded.last_used, reported_at = excluded.reported_at`);
    });
  }

  routerUsage(): Promise<RouterUsage[]> {
    return this.c.call("read", async () =>
      (
        (await this.c.db.execute(sql`SELECT router, watching_since, last_used, ${DB_NOW} - reported_at AS ago FROM router_usage ORDER BY router COLLATE "C"`)) as unknown as {
          router: string;
          watching_since: number;
          last_used: Record<string, number> | string;
          ago: number;
        }[]
      ).map((r) => ({
        router: r.router,
        watchingSince: Number(r.watching_since),
        lastUsed: new Map(Object.entries(typeof r.last_used === "string" ? (JSON.parse(r.last_used) as Record<string, number>) : r.last_used)),
        reportedAgoMs: Number(r.ago),
      })),
    );
  }

  shareLimits(router: string, demand: ReadonlyMap<string, number>, decide: (rows: ShareRow[]) => Shares): Promise<Shares> {
    const d = JSON.stringify(Object.fromEntries(demand));
    return this.c.write("idempotent", "meta", async (tx) => {
      // Self-conflicting, reads still pass: two control planes' read-decide-write never interleave.
      await tx.execute(sql`LOCK TABLE limit_shares IN SHARE ROW EXCLUSIVE MODE`);
      const read = (await tx.execute(sql`SELECT router, demand, shares, ${DB_NOW} - reported_at AS ago FROM limit_shares ORDER BY router COLLATE "C"`)) as unknown as {
        router: string;
        demand: Record<string, number> | string;
        shares: Record<string, number> | string;
        ago: number;
      }[];
      const obj = (v: Record<string, number> | string) => (typeof v === "string" ? (JSON.parse(v) as Record<string, number>) : v);
      const out = decide(read.map((r) => ({ router: r.router, demand: obj(r.demand), shares: obj(r.shares), reportedAgoMs: Number(r.ago) })));
      const s = JSON.stringify({ ...Object.fromEntries(out.shares), ...Object.fromEntries(out.slots ?? []), [FALLBACK]: out.fallback });
      await tx.execute(sql`INSERT INTO limit_shares (router, demand, shares, reported_at) VALUES (${router}, ${d}::jsonb, ${s}::jsonb, ${DB_NOW})
        ON CONFLICT (router) DO UPDATE SET demand = excluded.demand, shares = excluded.shares, reported_at = excluded.reported_at`);
      return out;
    });
  }

  saveNodeReport(node: string, report: string, now: number): Promise<void> {
    return this.c.write("idempotent", "reports", async (tx) => {
      await tx.insert(schema.nodeReports).values({ node, report, at: now }).onConflictDoUpdate({ target: schema.nodeReports.node, set: { report, at: now } });
    });
  }

  nodeReports(): Promise<NodeReportRow[]> {
    return this.c.call("read", () => this.c.db.select().from(schema.nodeReports).orderBy(byBytes(schema.nodeReports.node)));
  }

  sharedSecret(key: string, candidate: string): Promise<string> {
    return this.c.write("idempotent", "meta", async (tx) => {
      await tx.insert(schema.meta).values({ key: `secret:${key}`, value: candidate }).onConflictDoNothing({ target: schema.meta.key });
      return (await tx.select().from(schema.meta).where(eq(schema.meta.key, `secret:${key}`)))[0]!.value;
    });
  }

  tokenDigests(): Promise<TokenDigests> {
    return this.c.call("read", () => this.c.db.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS))).then((rows) => {
      const { put, remove } = clearTokenMigration(rows);
      // An older version wrote a token in clear again (several control planes during an upgrade).
      if (put.length > 0 || remove.length > 0) return this.c.write("idempotent", "meta", async (tx) => digestsOf(await tokenRows(tx)));
      return digestsOf(rows);
    });
  }

  putTokenDigest(kind: SharedTokenKind, sha256: string, mode: "claim" | "replace"): Promise<TokenDigests> {
    return this.c.write("idempotent", "meta", async (tx) => {
      // The row locked to the commit: two rotations at once apply one after the other.
      await tx.execute(sql`SELECT key FROM meta WHERE key = ${DIGEST_KEYS[kind]} FOR UPDATE`);
      const held = digestsOf(await tokenRows(tx));
      const next = nextDigest(held[kind], sha256, mode);
      if (!next) return held;
      const value = JSON.stringify(next);
      // A claim never overwrites: the first control plane's stays, whoever committed first.
      if (mode === "claim") await tx.insert(schema.meta).values({ key: DIGEST_KEYS[kind], value }).onConflictDoNothing({ target: schema.meta.key });
      else await tx.insert(schema.meta).values({ key: DIGEST_KEYS[kind], value }).onConflictDoUpdate({ target: schema.meta.key, set: { value } });
      return digestsOf(await tokenRows(tx));
    });
  }
}
