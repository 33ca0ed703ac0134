// The SQLite dialect's node registry: who a node is (its credential's hash), what it may do
// (admin state, an address allowed besides its own), and its deletion.

import { asc, count, eq, inArray } from "drizzle-orm";
import type { NodeRegistry } from "../../control/store-port";
import type { NewEvent, NodeTrust } from "../../control/types";
import type { AdminState } from "../../protocol/views";
import { guarded } from "../errors";
import { type Sqlite, eventRecord, schema } from "./db";

export class SqliteNodes implements NodeRegistry {
  constructor(private readonly s: Sqlite) {}

  nodeTrust(name: string): Promise<NodeTrust> {
    return guarded(() =>
      this.s.db.transaction(
        (tx) => {
          const row = tx.select({ h: schema.nodes.credentialHash, s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
          const allowed = tx.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).get();
          return { exists: !!row, hasCredential: !!row?.h, adminState: row?.s, allowedAddress: allowed?.a };
        },
        { behavior: "deferred" },
      ),
    );
  }

  nodeByCredentialHash(hash: string): Promise<string | undefined> {
    return guarded(() => this.s.db.select({ n: schema.nodes.name }).from(schema.nodes).where(eq(schema.nodes.credentialHash, hash)).get()?.n);
  }

  credentialHashOf(name: string): Promise<string | undefined> {
    return guarded(() => this.s.db.select({ h: schema.nodes.credentialHash }).from(schema.nodes).where(eq(schema.nodes.name, name)).get()?.h ?? undefined);
  }

  nodeCredentials(): Promise<{ node: string; hash: string }[]> {
    return guarded(() =>
      this.s.db
        .select({ node: schema.nodes.name, hash: schema.nodes.credentialHash })
        .from(schema.nodes)
        .all()
        .flatMap((r) => (r.hash === null ? [] : [{ node: r.node, hash: r.hash }])),
    );
  }

  countNodes(): Promise<number> {
    return guarded(() => this.s.db.select({ n: count() }).from(schema.nodes).get()?.n ?? 0);
  }

  deleteNode(name: string, replicaIds: string[], events: NewEvent[], now: number): Promise<boolean> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        const row = tx.select({ n: schema.nodes.name }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
        if (!row) return false;
        if (replicaIds.length > 0) tx.delete(schema.replicas).where(inArray(schema.replicas.id, replicaIds)).run();
        tx.delete(schema.nodes).where(eq(schema.nodes.name, name)).run();
        tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).run();
        for (const e of events) tx.insert(schema.events).values(eventRecord(e, now)).run();
        return true;
      }),
    );
  }

  setAllowedAddress(name: string, address: string | null, now: number): Promise<{ previous: string | undefined }> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        const prev = tx.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).get()?.a;
        if (address === null) tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).run();
        else tx.insert(schema.nodeAddresses).values({ node: name, address, createdAt: now }).onConflictDoUpdate({ target: schema.nodeAddresses.node, set: { address, createdAt: now } }).run();
        return { previous: prev };
      }),
    );
  }

  listAllowedAddresses(): Promise<{ node: string; address: string }[]> {
    return guarded(() => this.s.db.select({ node: schema.nodeAddresses.node, address: schema.nodeAddresses.address }).from(schema.nodeAddresses).orderBy(asc(schema.nodeAddresses.node)).all());
  }

  setAdminState(name: string, state: AdminState): Promise<{ previous: AdminState | undefined }> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        const row = tx.select({ s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
        if (!row) return { previous: undefined };
        tx.update(schema.nodes).set({ adminState: state }).where(eq(schema.nodes.name, name)).run();
        return { previous: row.s };
      }),
    );
  }
}
