// What several control planes on one SQLite file (one machine) share through it: the leader
// lease and the control planes' rows (by the database's clock), each router's usage, nodes'
// reports, the engine secret and the shared tokens' digests.

import { asc, eq, sql } from "drizzle-orm";
import { FALLBACK, type ShareRow, type Shares } from "../../control/limit-shares";
import type { LimitSharesPort, MembershipPort, NodeReportsPort, SharedSecretsPort, UsagePort } from "../../control/store-port";
import type { ControlPlaneRecord, ControlPlaneRow, Lease, NodeReportRow, RouterUsage, SharedTokenKind, TokenDigests } from "../../control/types";
import { guarded } from "../errors";
import { releaseOf } from "../rows";
import { DIGEST_KEYS, digestsOf, nextDigest } from "../token-digests";
import { DB_NOW, type Sqlite, readLeaseRow, schema, tokenRows } from "./db";

export class SqliteShared implements MembershipPort, UsagePort, LimitSharesPort, NodeReportsPort, SharedSecretsPort {
  constructor(private readonly s: Sqlite) {}

  acquireLease(holder: string, ttlMs: number, take = false): Promise<Lease> {
    const ttl = Math.max(1, Math.floor(ttlMs));
    const renew = take ? 0 : 1;
    return guarded(() =>
      this.s.db.transaction(
        (tx) => {
          // Renewed by its holder while unexpired (same epoch); taken when free or lapsed, or asked to take (epoch + 1).
          tx.run(sql`INSERT INTO leases (name, holder, epoch, expires_at) VALUES ('leader', ${holder}, 1, ${DB_NOW} + ${ttl})
          ON CONFLICT (name) DO UPDATE SET
            epoch = CASE WHEN ${renew} = 1 AND leases.holder = excluded.holder AND leases.expires_at > ${DB_NOW} THEN leases.epoch ELSE leases.epoch + 1 END,
            holder = excluded.holder,
            expires_at = excluded.expires_at
          WHERE leases.holder = excluded.holder OR leases.expires_at <= ${DB_NOW}`);
          return readLeaseRow(tx)!;
        },
        { behavior: "immediate" },
      ),
    );
  }

  releaseLease(holder: string): Promise<void> {
    return guarded(() => {
      this.s.db.run(sql`UPDATE leases SET expires_at = ${DB_NOW} - 1 WHERE name = 'leader' AND holder = ${holder}`);
    });
  }

  readLease(): Promise<Lease | undefined> {
    return guarded(() => readLeaseRow(this.s.db));
  }

  upsertControlPlane(cp: ControlPlaneRecord): Promise<void> {
    return guarded(() => {
      this.s.db.run(sql`INSERT INTO control_planes (name, admin_url, router_url, started_at, seen_at, version, protocol) VALUES (${cp.name}, ${cp.adminUrl}, ${cp.routerUrl}, ${cp.startedAt}, ${DB_NOW}, ${cp.version ?? null}, ${cp.protocol ?? null})
        ON CONFLICT (name) DO UPDATE SET admin_url = excluded.admin_url, router_url = excluded.router_url, started_at = excluded.started_at, seen_at = excluded.seen_at, version = excluded.version, protocol = excluded.protocol`);
    });
  }

  controlPlanes(): Promise<ControlPlaneRow[]> {
    return guarded(() =>
      this.s.db
        .all<{ name: string; admin_url: string; router_url: string; started_at: number; ago: number; version: string | null; protocol: number | null }>(
          sql`SELECT name, admin_url, router_url, started_at, ${DB_NOW} - seen_at AS ago, version, protocol FROM control_planes ORDER BY name`,
        )
        .map((r) => ({ name: r.name, adminUrl: r.admin_url, routerUrl: r.router_url, startedAt: r.started_at, seenAgoMs: r.ago, ...releaseOf(r) })),
    );
  }

  removeControlPlane(name: string): Promise<void> {
    return guarded(() => {
      this.s.db.delete(schema.controlPlanes).where(eq(schema.controlPlanes.name, name)).run();
      this.s.db.delete(schema.routerUsage).where(eq(schema.routerUsage.router, name)).run();
      this.s.db.delete(schema.limitShares).where(eq(schema.limitShares.router, name)).run();
    });
  }

  reportUsage(router: string, watchingSince: number, lastUsed: ReadonlyMap<string, number>): Promise<void> {
    const map = Object.fromEntries(lastUsed);
    return guarded(() => {
      this.s.db.run(sql`INSERT INTO router_usage (router, watching_since, last_used, reported_at) VALUES (${router}, ${watchingSince}, ${JSON.stringify(map)}, ${DB_NOW})
        ON CONFLICT (router) DO UPDATE SET watching_since = excluded.watching_since, last_used = excluded.last_used, reported_at = excluded.reported_at`);
    });
  }

  routerUsage(): Promise<RouterUsage[]> {
    return guarded(() =>
      this.s.db
        .all<{ router: string; watching_since: number; last_used: string; ago: number }>(sql`SELECT router, watching_since, last_used, ${DB_NOW} - reported_at AS ago FROM router_usage ORDER BY router`)
        .map((r) => ({ router: r.router, watchingSince: r.watching_since, lastUsed: new Map(Object.entries(JSON.parse(r.last_used) as Record<string, number>)), reportedAgoMs: r.ago })),
    );
  }

  shareLimits(router: string, demand: ReadonlyMap<string, number>, decide: (rows: ShareRow[]) => Shares): Promise<Shares> {
    const d = JSON.stringify(Object.fromEntries(demand));
    return guarded(() =>
      this.s.db.transaction(
        (tx) => {
          const rows = tx
            .all<{ router: string; demand: string; shares: string; ago: number }>(sql`SELECT router, demand, shares, ${DB_NOW} - reported_at AS ago FROM limit_shares ORDER BY router`)
            .map((r) => ({ router: r.router, demand: JSON.parse(r.demand) as Record<string, number>, shares: JSON.parse(r.shares) as Record<string, number>, reportedAgoMs: r.ago }));
          const out = decide(rows);
          const s = JSON.stringify({ ...Object.fromEntries(out.shares), ...Object.fromEntries(out.slots ?? []), [FALLBACK]: out.fallback });
          tx.run(sql`INSERT INTO limit_shares (router, demand, shares, reported_at) VALUES (${router}, ${d}, ${s}, ${DB_NOW})
            ON CONFLICT (router) DO UPDATE SET demand = excluded.demand, shares = excluded.shares, reported_at = excluded.reported_at`);
          return out;
        },
        // Taken for writing at once: two control planes' read-decide-write never interleave.
        { behavior: "immediate" },
      ),
    );
  }

  saveNodeReport(node: string, report: string, now: number): Promise<void> {
    return guarded(() => {
      this.s.db.insert(schema.nodeReports).values({ node, report, at: now }).onConflictDoUpdate({ target: schema.nodeReports.node, set: { report, at: now } }).run();
    });
  }

  nodeReports(): Promise<NodeReportRow[]> {
    return guarded(() => this.s.db.select().from(schema.nodeReports).orderBy(asc(schema.nodeReports.node)).all());
  }

  sharedSecret(key: string, candidate: string): Promise<string> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        tx.insert(schema.meta).values({ key: `secret:${key}`, value: candidate }).onConflictDoNothing({ target: schema.meta.key }).run();
        return tx.select().from(schema.meta).where(eq(schema.meta.key, `secret:${key}`)).get()!.value;
      }),
    );
  }

  tokenDigests(): Promise<TokenDigests> {
    return guarded(() => this.s.db.transaction((tx) => digestsOf(tokenRows(tx))));
  }

  putTokenDigest(kind: SharedTokenKind, sha256: string, mode: "claim" | "replace"): Promise<TokenDigests> {
    return guarded(() =>
      this.s.db.transaction(
        (tx) => {
          const held = digestsOf(tokenRows(tx));
          const next = nextDigest(held[kind], sha256, mode);
          if (!next) return held;
          const value = JSON.stringify(next);
          tx.insert(schema.meta).values({ key: DIGEST_KEYS[kind], value }).onConflictDoUpdate({ target: schema.meta.key, set: { value } }).run();
          return { ...held, [kind]: next };
        },
        { behavior: "immediate" },
      ),
    );
  }
}
