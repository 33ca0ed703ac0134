// The dashboard's keys and teams: the API keys (created and revoked here), the teams with their
// limits, and a page per team with its keys. Each limit is shown as `keys list` shows it, with
// its current use in front ("2/3") once the routers report it (lib/limit-cells.ts). Like the
// other pages: Hono's JSX escapes every string, and the data arrives already sanitised.

import type { FC } from "hono/jsx";
import { ago } from "../lib/format";
import { limitCells } from "../lib/limit-cells";
import type { ApiKeyView, TeamView } from "../protocol/views";
import { Action, type Flash, Page } from "./ui-pages";
import { Badge, Section } from "./ui-view";

export const teamHref = (name: string) => `/ui/teams/${encodeURIComponent(name)}`;

// Links are made from the names as stored, before the page's data is sanitised: a sanitised name
// is for reading, and names no team or key. Percent-encoded, they are printable ASCII, which the
// sanitiser leaves as they are.

/** A team as its row shows it: with the link to its page. */
export type TeamLinked = TeamView & { href: string };
export const linkTeams = (teams: TeamView[]): TeamLinked[] => teams.map((t) => ({ ...t, href: teamHref(t.name) }));

/** A key as its row shows it: with the links to its team's page and to its revoke action. */
export type KeyLinked = ApiKeyView & { teamHref: string | null; revoke: string };
export const linkKeys = (keys: ApiKeyView[]): KeyLinked[] =>
  keys.map((k) => ({ ...k, teamHref: k.team === null ? null : teamHref(k.team), revoke: `/ui/keys/${encodeURIComponent(k.name)}/revoke` }));

const LIMIT_HEADERS = ["RPM", "TPM", "Concurrent", "Budget"] as const;

/** The four limit cells, each named for tests and styles. */
const LimitTds: FC<{ l: TeamView | ApiKeyView }> = ({ l }) => (
  <>
    {limitCells(l).map((v, i) => (
      <td class="num" data-field={LIMIT_HEADERS[i]!.toLowerCase()}>
        {v}
      </td>
    ))}
  </>
);

/** When a key stops working: never, the date (the exact time on hover), or expired. */
const Expiry: FC<{ at: string | null; now: number }> = ({ at, now }) => {
  if (at === null) return <span class="muted">never</span>;
  const t = Date.parse(at);
  return (
    <span title={at}>
      {Number.isFinite(t) && t <= now ? <Badge tone="bad">expired</Badge> : at.slice(0, 16).replace("T", " ")}
    </span>
  );
};

/** The keys with their team, pool, tier, limits with use, models and expiry; a revoke form each for a session. */
const KeyTable: FC<{ keys: KeyLinked[]; now: number; csrf?: string; team?: boolean }> = ({ keys, now, csrf, team = true }) => (
  <div class="scroll">
    <table>
      <thead>
        <tr>
          <th>Name</th>
          {team && <th>Team</th>}
          <th>Pool</th>
          <th>Tier</th>
          {LIMIT_HEADERS.map((h) => (
            <th class="num">{h}</th>
          ))}
          <th>Models</th>
          <th>Expires</th>
          <th>Created</th>
          {csrf !== undefined && <th>Revoke</th>}
        </tr>
      </thead>
      <tbody>
        {keys.map((k) => (
          <tr data-testid="key-row" data-key={k.name}>
            <td class="name">{k.name}</td>
            {team && <td data-field="team">{k.team === null || k.teamHref === null ? "-" : <a href={k.teamHref}>{k.team}</a>}</td>}
            <td>{k.pool ?? "-"}</td>
            <td data-field="tier">{k.priority ?? (k.team ? "(team)" : "interactive")}</td>
            <LimitTds l={k} />
            <td data-field="models">{k.models ? k.models.join(", ") : <span class="muted">all</span>}</td>
            <td data-field="expires">
              <Expiry at={k.expires_at} now={now} />
            </td>
            <td class="muted" title={k.created_at}>
              {ago(k.created_at, now)}
            </td>
            {csrf !== undefined && (
              <td class="act">
                <Action action={k.revoke} csrf={csrf} label="Revoke" testid="revoke-form" danger confirm="sure" />
              </td>
            )}
          </tr>
        ))}
      </tbody>
    </table>
  </div>
);

export const KeysPage: FC<{ nonce: string; csrf?: string; flash?: Flash; keys: KeyLinked[]; now: number }> = ({ nonce, csrf, flash, keys, now }) => (
  <Page nonce={nonce} title="API keys" csrf={csrf} flash={flash} here="keys">
    <h1 class="title">API keys</h1>
    <p class="muted">Client keys for the router. Only a hash is stored: a key is shown once, when created. A limit shows its use this minute in front of it.</p>
    {csrf !== undefined && (
      <Section id="create-key" title="Create a key">
        <Action action="/ui/keys" csrf={csrf} label="Create key" testid="create-key-form">
          <label class="field">
            Name <input name="name" required maxlength={64} pattern="[A-Za-z0-9][A-Za-z0-9._\-]*" autocomplete="off" data-testid="key-name" />
          </label>
          <label class="field">
            Pool <small>(optional: the key sees only that pool's models)</small> <input name="pool" maxlength={64} autocomplete="off" />
          </label>
        </Action>
      </Section>
    )}
    <Section id="keys" title="Keys" count={keys.length}>
      {keys.length === 0 ? <p class="empty">No API keys.</p> : <KeyTable keys={keys} now={now} csrf={csrf} />}
    </Section>
  </Page>
);

export const TeamsPage: FC<{ nonce: string; csrf?: string; flash?: Flash; teams: TeamLinked[] }> = ({ nonce, csrf, flash, teams }) => (
  <Page nonce={nonce} title="Teams" csrf={csrf} flash={flash} here="teams">
    <h1 class="title">Teams</h1>
    <p class="muted">
      A team's limits are shared by its keys; a key is held to its own and its team's. A limit shows its use this minute in front of it. Teams are managed with <code>llmgw teams</code>.
    </p>
    <Section id="teams" title="Teams" count={teams.length}>
      {teams.length === 0 ? (
        <p class="empty">
          No teams. Create one with <code>llmgw teams create NAME</code>.
        </p>
      ) : (
        <div class="scroll">
          <table>
            <thead>
              <tr>
                <th>Name</th>
                <th>Priority</th>
                {LIMIT_HEADERS.map((h) => (
                  <th class="num">{h}</th>
                ))}
                <th>Keys</th>
              </tr>
            </thead>
            <tbody>
              {teams.map((t) => (
                <tr data-testid="team-row" data-team={t.name}>
                  <td class="name">
                    <a href={t.href}>{t.name}</a>
                  </td>
                  <td data-field="priority">{t.priority ?? "interactive"}</td>
                  <LimitTds l={t} />
                  <td data-field="keys">{t.keys.length === 0 ? <span class="muted">none</span> : t.keys.join(", ")}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </Section>
  </Page>
);

/** A team's page; `usage` is its usage section (ui-usage.tsx). */
export const TeamPage: FC<{ nonce: string; csrf?: string; flash?: Flash; team: TeamView; keys: KeyLinked[]; now: number; usage?: unknown }> = ({ nonce, csrf, flash, team, keys, now, usage }) => {
  const cells = limitCells(team);
  return (
    <Page nonce={nonce} title={`team ${team.name}`} csrf={csrf} flash={flash} here="teams">
      <p class="crumbs">
        <a href="/ui/teams">Teams</a> /
      </p>
      <h1 class="title" data-testid="team-title" data-team={team.name}>
        {team.name}
      </h1>
      <Section id="team-limits" title="Limits and use">
        <dl class="facts">
          <dt>Priority</dt>
          <dd data-field="priority">{team.priority ?? "interactive"}</dd>
          {LIMIT_HEADERS.map((h, i) => (
            <>
              <dt>{h}</dt>
              <dd data-field={h.toLowerCase()}>{cells[i]}</dd>
            </>
          ))}
          <dt>Created</dt>
          <dd title={team.created_at}>{ago(team.created_at, now)}</dd>
        </dl>
      </Section>
      {usage}
      <Section id="keys" title="Keys" count={keys.length}>
        {keys.length === 0 ? (
          <p class="empty">
            No keys in this team. Add one with <code>llmgw keys create NAME --team {team.name}</code>.
          </p>
        ) : (
          <KeyTable keys={keys} now={now} team={false} />
        )}
      </Section>
    </Page>
  );
};
