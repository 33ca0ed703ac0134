// The PostgreSQL dialect's client API keys and teams (KeysPort): rows mapped by ../key-rows.ts.

import { eq } from "drizzle-orm";
import type { KeysPort } from "../../control/store-port";
import type { ApiKeyRow, KeyPatch, TeamPatch, TeamRow } from "../../control/types";
import { keyColumns, keyPatchColumns, teamColumns, teamPatchColumns, toKeyRow, toTeamRow } from "../key-rows";
import type { PgConnection } from "./connection";
import * as schema from "./schema";
import { byBytes } from "./sql";

export class PgKeys implements KeysPort {
  constructor(private readonly c: PgConnection) {}

  createApiKey(k: ApiKeyRow): Promise<boolean> {
    return this.c.write("once", "any", async (tx) => (await tx.insert(schema.apiKeys).values(keyColumns(k)).onConflictDoNothing({ target: schema.apiKeys.name }).returning({ n: schema.apiKeys.name })).length > 0);
  }

  listApiKeys(): Promise<ApiKeyRow[]> {
    return this.c.call("read", async () => (await this.c.db.select().from(schema.apiKeys).orderBy(byBytes(schema.apiKeys.name))).map(toKeyRow));
  }

  revokeApiKey(name: string): Promise<boolean> {
    return this.c.write("once", "any", async (tx) => (await tx.delete(schema.apiKeys).where(eq(schema.apiKeys.name, name)).returning({ n: schema.apiKeys.name })).length > 0);
  }

  updateApiKey(name: string, patch: KeyPatch, now: number): Promise<ApiKeyRow | undefined> {
    return this.c.write("once", "any", async (tx) => {
      const r = (await tx.update(schema.apiKeys).set(keyPatchColumns(patch, now)).where(eq(schema.apiKeys.name, name)).returning())[0];
      return r && toKeyRow(r);
    });
  }

  createTeam(t: TeamRow): Promise<boolean> {
    return this.c.write("once", "any", async (tx) => (await tx.insert(schema.teams).values(teamColumns(t)).onConflictDoNothing({ target: schema.teams.name }).returning({ n: schema.teams.name })).length > 0);
  }

  listTeams(): Promise<TeamRow[]> {
    return this.c.call("read", async () => (await this.c.db.select().from(schema.teams).orderBy(byBytes(schema.teams.name))).map(toTeamRow));
  }

  updateTeam(name: string, patch: TeamPatch, now: number): Promise<TeamRow | undefined> {
    return this.c.write("once", "any", async (tx) => {
      const r = (await tx.update(schema.teams).set(teamPatchColumns(patch, now)).where(eq(schema.teams.name, name)).returning())[0];
      return r && toTeamRow(r);
    });
  }

  deleteTeam(name: string, force: boolean): Promise<{ deleted: boolean; keys: string[] } | undefined> {
    return this.c.write("once", "any", async (tx) => {
      // The team's row locked first: a key created for it meanwhile waits for this to commit.
      if ((await tx.select({ n: schema.teams.name }).from(schema.teams).where(eq(schema.teams.name, name)).for("update")).length === 0) return undefined;
      const keys = (await tx.select({ n: schema.apiKeys.name }).from(schema.apiKeys).where(eq(schema.apiKeys.team, name)).orderBy(byBytes(schema.apiKeys.name))).map((r) => r.n);
      if (keys.length > 0 && !force) return { deleted: false, keys };
      await tx.delete(schema.apiKeys).where(eq(schema.apiKeys.team, name));
      await tx.delete(schema.teams).where(eq(schema.teams.name, name));
      return { deleted: true, keys };
    });
  }
}
