// Teams as the operator manages them: limits shared by a team's keys (a key is held to its own
// and its team's), created, listed with their keys, changed, deleted (refused while keys belong
// to the team, unless forced, which revokes them). Each change reaches every router the way a
// key's does: this control plane's router at once, the others' through the change feed.

import type { CreateTeamBody, UpdateTeamBody } from "../protocol/admin";
import type { TeamView } from "../protocol/views";
import { ConflictError, NotFoundError } from "./errors";
import { describeLimits, limitsOf, limitsPatchOf, teamView, withUse } from "./key-views";
import type { KeyAdminOptions } from "./api-keys";
import type { TeamRow } from "./types";

export class Teams {
  constructor(private readonly o: KeyAdminOptions) {}

  async createTeam(body: CreateTeamBody): Promise<TeamView> {
    const now = this.o.scheduler.now();
    const { limits, tier } = limitsOf(body);
    const row: TeamRow = { name: body.name, createdAt: now, updatedAt: now, ...(limits ? { limits } : {}), ...(tier ? { tier } : {}) };
    if (!(await this.o.store.createTeam(row))) throw new ConflictError(`a team named "${body.name}" already exists; change it with \`llmgw teams update\` or pick another name`, ["name"]);
    const what = describeLimits(limits, tier);
    await this.o.events.event("team.created", `team/${body.name}`, `team ${body.name} created${what ? `: ${what}` : ""}`);
    return teamView(row, []);
  }

  async listTeams(): Promise<TeamView[]> {
    const [teams, keys] = await Promise.all([this.o.store.listTeams(), this.o.store.listApiKeys()]);
    const byTeam = new Map<string, string[]>();
    for (const k of keys) if (k.team !== undefined) (byTeam.get(k.team) ?? byTeam.set(k.team, []).get(k.team)!).push(k.name);
    const use = this.o.usage?.limitUse() ?? [];
    return teams.map((t) => withUse(teamView(t, byTeam.get(t.name) ?? []), "team", use));
  }

  async team(name: string): Promise<TeamView> {
    const t = (await this.listTeams()).find((x) => x.name === name);
    if (!t) throw new NotFoundError(`team "${name}" not found`);
    return t;
  }

  /** Changes the limits the body names (null clears one); the team as it now stands. */
  async updateTeam(name: string, body: UpdateTeamBody): Promise<TeamView> {
    const { limits, tier } = limitsPatchOf(body);
    const row = await this.o.store.updateTeam(name, { limits, ...(tier !== undefined ? { tier } : {}) }, this.o.scheduler.now());
    if (!row) throw new NotFoundError(`team "${name}" not found`);
    const what = describeLimits(limits, tier);
    await this.o.events.event("team.updated", `team/${name}`, `team ${name} changed${what ? `: ${what}` : ""}`);
    await this.o.projector.publishKeys();
    return this.team(name);
  }

  /** Deletes a team; while keys belong to it only with `force`, which revokes them. Answers the keys revoked. */
  async deleteTeam(name: string, force: boolean): Promise<string[]> {
    const r = await this.o.store.deleteTeam(name, force);
    if (!r) throw new NotFoundError(`team "${name}" not found`);
    if (!r.deleted) {
      const list = r.keys.length > 5 ? `${r.keys.slice(0, 5).join(", ")} and ${r.keys.length - 5} more` : r.keys.join(", ");
      throw new ConflictError(`team "${name}" still has ${r.keys.length} key${r.keys.length === 1 ? "" : "s"} (${list}): revoke ${r.keys.length === 1 ? "it" : "them"} first, or delete with --force (?force=1) to revoke them with the team`, ["name"]);
    }
    for (const k of r.keys) await this.o.events.event("key.revoked", `key/${k}`, `API key ${k} revoked with its team ${name}`);
    await this.o.events.event("team.deleted", `team/${name}`, `team ${name} deleted${r.keys.length > 0 ? `, its ${r.keys.length} key${r.keys.length === 1 ? "" : "s"} revoked` : ""}`);
    await this.o.projector.publishKeys();
    return r.keys;
  }
}
