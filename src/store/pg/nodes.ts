// The PostgreSQL dialect's node registry: who a node is (its credential's hash), what it may do
// (admin state, an address allowed besides its own), and its deletion.

import { count, eq, inArray } from "drizzle-orm";
import type { NodeRegistry } from "../../control/store-port";
import type { NewEvent, NodeTrust } from "../../control/types";
import type { AdminState } from "../../protocol/views";
import type { PgConnection } from "./connection";
import * as schema from "./schema";
import { byBytes, eventRecord } from "./sql";

export class PgNodes implements NodeRegistry {
  constructor(private readonly c: PgConnection) {}

  nodeTrust(name: string): Promise<NodeTrust> {
    return this.c.call("read", async () => {
      const [rows, allowed] = await Promise.all([
        this.c.db.select({ h: schema.nodes.credentialHash, s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)),
        this.c.db.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)),
      ]);
      const row = rows[0];
      return { exists: !!row, hasCredential: !!row?.h, adminState: row?.s, allowedAddress: allowed[0]?.a };
    });
  }

  nodeByCredentialHash(hash: string): Promise<string | undefined> {
    return this.c.call("read", async () => (await this.c.db.select({ n: schema.nodes.name }).from(schema.nodes).where(eq(schema.nodes.credentialHash, hash)))[0]?.n);
  }

  credentialHashOf(name: string): Promise<string | undefined> {
    return this.c.call("read", async () => (await this.c.db.select({ h: schema.nodes.credentialHash }).from(schema.nodes).where(eq(schema.nodes.name, name)))[0]?.h ?? undefined);
  }

  countNodes(): Promise<number> {
    return this.c.call("read", async () => (await this.c.db.select({ n: count() }).from(schema.nodes))[0]?.n ?? 0);
  }

  nodeCredentials(): Promise<{ node: string; hash: string }[]> {
    return this.c.call("read", async () =>
      (await this.c.db.select({ node: schema.nodes.name, hash: schema.nodes.credentialHash }).from(schema.nodes)).flatMap((r) => (r.hash === null ? [] : [{ node: r.node, hash: r.hash }])),
    );
  }

  deleteNode(name: string, replicaIds: string[], events: NewEvent[], now: number): Promise<boolean> {
    return this.c.write("once", "any", async (tx) => {
      const gone = await tx.delete(schema.nodes).where(eq(schema.nodes.name, name)).returning({ n: schema.nodes.name });
      if (gone.length === 0) return false;
      if (replicaIds.length > 0) await tx.delete(schema.replicas).where(inArray(schema.replicas.id, replicaIds));
      await tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name));
      if (events.length > 0) await tx.insert(schema.events).values(events.map((e) => eventRecord(e, now)));
      return true;
    });
  }

  setAllowedAddress(name: string, address: string | null, now: number): Promise<{ previous: string | undefined }> {
    return this.c.write("once", "any", async (tx) => {
      const prev = (await tx.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).for("update"))[0]?.a;
      if (address === null) await tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name));
      else await tx.insert(schema.nodeAddresses).values({ node: name, address, createdAt: now }).onConflictDoUpdate({ target: schema.nodeAddresses.node, set: { address, createdAt: now } });
      return { previous: prev };
    });
  }

  listAllowedAddresses(): Promise<{ node: string; address: string }[]> {
    return this.c.call("read", () =>
      this.c.db.select({ node: schema.nodeAddresses.node, address: schema.nodeAddresses.address }).from(schema.nodeAddresses).orderBy(byBytes(schema.nodeAddresses.node)),
    );
  }

  setAdminState(name: string, state: AdminState): Promise<{ previous: AdminState | undefined }> {
    return this.c.write("once", "any", async (tx) => {
      const row = (await tx.select({ s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)).for("update"))[0];
      if (!row) return { previous: undefined };
      await tx.update(schema.nodes).set({ adminState: state }).where(eq(schema.nodes.name, name));
      return { previous: row.s };
    });
  }
}
