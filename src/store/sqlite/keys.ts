// The SQLite dialect's client API keys and teams (KeysPort): rows mapped by ../key-rows.ts.

import { asc, eq } from "drizzle-orm";
import type { KeysPort } from "../../control/store-port";
import type { ApiKeyRow, KeyPatch, TeamPatch, TeamRow } from "../../control/types";
import { guarded } from "../errors";
import { keyColumns, keyPatchColumns, teamColumns, teamPatchColumns, toKeyRow, toTeamRow } from "../key-rows";
import { type Sqlite, schema } from "./db";

export class SqliteKeys implements KeysPort {
  constructor(private readonly s: Sqlite) {}

  createApiKey(k: ApiKeyRow): Promise<boolean> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        if (tx.select({ n: schema.apiKeys.name }).from(schema.apiKeys).where(eq(schema.apiKeys.name, k.name)).get()) return false;
        tx.insert(schema.apiKeys).values(keyColumns(k)).run();
        return true;
      }),
    );
  }

  listApiKeys(): Promise<ApiKeyRow[]> {
    return guarded(() => this.s.db.select().from(schema.apiKeys).orderBy(asc(schema.apiKeys.name)).all().map(toKeyRow));
  }

  revokeApiKey(name: string): Promise<boolean> {
    return guarded(() => this.s.db.delete(schema.apiKeys).where(eq(schema.apiKeys.name, name)).returning({ n: schema.apiKeys.name }).all().length > 0);
  }

  updateApiKey(name: string, patch: KeyPatch, now: number): Promise<ApiKeyRow | undefined> {
    return guarded(() => {
      const r = this.s.db.update(schema.apiKeys).set(keyPatchColumns(patch, now)).where(eq(schema.apiKeys.name, name)).returning().all()[0];
      return r && toKeyRow(r);
    });
  }

  createTeam(t: TeamRow): Promise<boolean> {
    return guarded(() => this.s.db.insert(schema.teams).values(teamColumns(t)).onConflictDoNothing({ target: schema.teams.name }).returning({ n: schema.teams.name }).all().length > 0);
  }

  listTeams(): Promise<TeamRow[]> {
    return guarded(() => this.s.db.select().from(schema.teams).orderBy(asc(schema.teams.name)).all().map(toTeamRow));
  }

  updateTeam(name: string, patch: TeamPatch, now: number): Promise<TeamRow | undefined> {
    return guarded(() => {
      const r = this.s.db.update(schema.teams).set(teamPatchColumns(patch, now)).where(eq(schema.teams.name, name)).returning().all()[0];
      return r && toTeamRow(r);
    });
  }

  deleteTeam(name: string, force: boolean): Promise<{ deleted: boolean; keys: string[] } | undefined> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        if (!tx.select({ n: schema.teams.name }).from(schema.teams).where(eq(schema.teams.name, name)).get()) return undefined;
        const keys = tx.select({ n: schema.apiKeys.name }).from(schema.apiKeys).where(eq(schema.apiKeys.team, name)).orderBy(asc(schema.apiKeys.name)).all().map((r) => r.n);
        if (keys.length > 0 && !force) return { deleted: false, keys };
        tx.delete(schema.apiKeys).where(eq(schema.apiKeys.team, name)).run();
        tx.delete(schema.teams).where(eq(schema.teams.name, name)).run();
        return { deleted: true, keys };
      }),
    );
  }
}
