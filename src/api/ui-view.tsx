// The dashboard's markup: the login form, the page shell and the fragment the page swaps in
// every two seconds, all server-rendered with Hono's JSX (which escapes every string: model
// names, reasons and errors are user input). Elements carry `data-testid` / `data-field` so
// tests read numbers from the markup, not from prose. No style attributes anywhere: the CSP
// allows only the nonce'd stylesheet, so bars are SVG rects sized by attributes.

import type { FC } from "hono/jsx";
import { ago, human, oneLine, plural } from "../lib/format";
import { CHART_CSS } from "./ui-charts";
import type { ClassUse, EventView, ModelView, NodeView, ReplicaView, Summary, Tables } from "../protocol/views";

// ---- small formatting helpers (the rest are lib/format's, shared with the CLI) ------------

/** "2025-01-02T03:04:05.678Z" → "03:04:05" (UTC, labelled as such in the page). */
export const clock = (iso: string) => iso.slice(11, 19);

export const modelHref = (name: string) => `/ui/models/${encodeURIComponent(name)}`;
export const nodeHref = (name: string) => `/ui/nodes/${encodeURIComponent(name)}`;

export type Tone = "ok" | "warn" | "bad" | "muted";

export function nodeTone(s: NodeView["state"]): Tone {
  return s === "ready" ? "ok" : s === "unreachable" ? "bad" : "warn";
}

export function replicaTone(s: ReplicaView["state"]): Tone {
  return s === "ready" ? "ok" : s === "failed" ? "bad" : "warn";
}

export function modelStatus(m: ModelView): "parked" | "unplaceable" | "short" | "ok" {
  if (m.parked) return "parked";
  if (m.unplaceable) return "unplaceable";
  return m.ready < m.desired ? "short" : "ok";
}

export function eventTone(kind: string): Tone {
  if (/failed|parked|unreachable|lost|unplaceable|unhealthy/.test(kind)) return "bad";
  if (/stopping|drain|cordon|evict/.test(kind)) return "warn";
  if (/ready|registered|created|unparked|reachable|healthy|recovered/.test(kind)) return "ok";
  return "muted";
}

// ---- pieces ---------------------------------------------------------------------------

/**
 * Text that names commands in backticks, as the CLI and the server write them (`llmgw models
 * unpark NAME`): each such command shown as code rather than between literal backticks. A lone
 * backtick stays as it is. JSX escapes every part.
 */
export const Prose: FC<{ text: string }> = ({ text }) => (
  <>{text.split(/`([^`\n]+)`/).map((part, i) => (i % 2 === 1 ? <code>{part}</code> : part))}</>
);

export const Badge: FC<{ tone: Tone; field?: string; children?: unknown }> = ({ tone, field, children }) => (
  <span class={`badge ${tone}`} data-field={field}>
    {children}
  </span>
);

/**
 * used | unhealthy | free as one SVG bar. Any non-zero part keeps a sliver, so one broken card
 * in a thousand is never rounded away (the numbers beside it are exact).
 */
const UsageBar: FC<{ g: ClassUse }> = ({ g }) => {
  const free = g.total - g.used - g.unhealthy;
  const pct = (n: number) => (g.total > 0 ? (n / g.total) * 100 : 0);
  let used = g.used > 0 ? Math.max(1.5, pct(g.used)) : 0;
  let bad = g.unhealthy > 0 ? Math.max(1.5, pct(g.unhealthy)) : 0;
  const over = used + bad - (free > 0 ? 98.5 : 100);
  if (over > 0) {
    if (used >= bad) used -= over;
    else bad -= over;
  }
  const r = (n: number) => Math.round(n * 100) / 100;
  return (
    <svg class="bar" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" aria-label={`${g.used} used, ${g.unhealthy} unhealthy, ${free} free of ${g.total}`}>
      <rect class="free" x="0" y="0" width="100" height="10" />
      <rect class="used" x="0" y="0" width={String(r(used))} height="10" />
      <rect class="unhealthy" x={String(r(used))} y="0" width={String(r(bad))} height="10" />
    </svg>
  );
};

/** One square per GPU of a node: used, unhealthy, free. */
export const GpuStrip: FC<{ n: NodeView }> = ({ n }) => (
  <span class="strip" aria-hidden="true">
    {n.gpus.map((g) => (
      <i class={!g.healthy ? "unhealthy" : g.in_use_by ? "used" : "free"} title={`${g.index} ${g.class}${!g.healthy ? " unhealthy" : g.in_use_by ? ` ${g.in_use_by}` : " free"}`} />
    ))}
  </span>
);

const Stat: FC<{ id: string; value: number; label: string; tone?: Tone }> = ({ id, value, label, tone }) => (
  <span class={`stat${value === 0 ? " zero" : ""}${tone && value > 0 ? ` ${tone}` : ""}`}>
    <b data-testid={id}>{value}</b> {label}
  </span>
);

export const Section: FC<{ id: string; title: string; note?: string; count?: number; children?: unknown }> = ({ id, title, note, count, children }) => (
  <section class="panel" data-testid={`section-${id}`} aria-labelledby={`h-${id}`}>
    <h2 id={`h-${id}`}>
      {title}
      {count !== undefined && <span class="count">{count}</span>}
      {note && <small>{note}</small>}
    </h2>
    {children}
  </section>
);

// ---- the summary ------------------------------------------------------------------------

const Cards: FC<{ s: Summary }> = ({ s }) => {
  const gpuTotal = s.gpus.reduce((a, g) => a + g.total, 0);
  const gpuUsed = s.gpus.reduce((a, g) => a + g.used, 0);
  const gpuBad = s.gpus.reduce((a, g) => a + g.unhealthy, 0);
  return (
    <div class="cards" data-testid="summary">
      <div class="card">
        <h3>Nodes</h3>
        <p class="big" data-testid="nodes-total">{s.nodes.total}</p>
        <p class="stats">
          <Stat id="nodes-ready" value={s.nodes.ready} label="ready" tone="ok" />
          <Stat id="nodes-cordoned" value={s.nodes.cordoned} label="cordoned" tone="warn" />
          <Stat id="nodes-draining" value={s.nodes.draining} label="draining" tone="warn" />
          <Stat id="nodes-unreachable" value={s.nodes.unreachable} label="unreachable" tone="bad" />
        </p>
      </div>
      <div class="card">
        <h3>GPUs</h3>
        <p class="big">
          <span data-testid="gpus-free">{gpuTotal - gpuUsed - gpuBad}</span>
          <span class="of"> free of {gpuTotal}</span>
        </p>
        <p class="stats">
          <Stat id="gpus-used" value={gpuUsed} label="used" />
          <Stat id="gpus-unhealthy" value={gpuBad} label="unhealthy" tone="bad" />
        </p>
      </div>
      <div class="card">
        <h3>Replicas</h3>
        <p class="big">
          <span data-testid="replicas-ready">{s.replicas.ready}</span>
          <span class="of"> ready</span>
        </p>
        <p class="stats">
          <Stat id="replicas-starting" value={s.replicas.starting} label="starting" tone="warn" />
          <Stat id="replicas-draining" value={s.replicas.draining} label="draining" tone="warn" />
          <Stat id="replicas-failed" value={s.replicas.failed} label="failed" tone="bad" />
        </p>
      </div>
      <div class="card">
        <h3>Models</h3>
        <p class="big">
          <span data-testid="models-satisfied">{s.models.satisfied}</span>
          <span class="of">
            {" "}
            of <span data-testid="models-total">{s.models.total}</span> satisfied
          </span>
        </p>
        <p class="stats">
          <Stat id="models-short" value={s.models.short} label="short" tone="warn" />
          <Stat id="unplaceable-count" value={s.unplaceable.length} label="unplaceable" tone="bad" />
          <Stat id="parked-count" value={s.parked.length} label="parked" tone="bad" />
        </p>
      </div>
    </div>
  );
};

const Gpus: FC<{ s: Summary }> = ({ s }) => (
  <Section id="gpus" title="GPU classes" note="per device: a MIG instance is its own class">
    {s.gpus.length === 0 ? (
      <p class="empty">No GPUs reported yet.</p>
    ) : (
      <>
        <div class="scroll gpus-box">
          <table class="gpus">
            <thead>
              <tr>
                <th>Class</th>
                <th class="wide">Usage</th>
                <th class="num">Used</th>
                <th class="num">Unhealthy</th>
                <th class="num">Free</th>
                <th class="num">Total</th>
              </tr>
            </thead>
            <tbody>
              {s.gpus.map((g) => (
                <tr data-testid="gpu-class" data-class={g.class}>
                  <td class="name">
                    {g.class}
                    {/* In a narrow box (a phone, half a screen) the bar sits under the class, and the numbers keep their columns. */}
                    <span class="bar-under">
                      <UsageBar g={g} />
                    </span>
                  </td>
                  <td class="wide">
                    <UsageBar g={g} />
                  </td>
                  <td class="num" data-field="used">{g.used}</td>
                  <td class={`num${g.unhealthy ? " bad" : ""}`} data-field="unhealthy">{g.unhealthy}</td>
                  <td class="num" data-field="free">{g.total - g.used - g.unhealthy}</td>
                  <td class="num" data-field="total">{g.total}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
        <p class="legend">
          <i class="used" /> used <i class="unhealthy" /> unhealthy <i class="free" /> free
        </p>
      </>
    )}
  </Section>
);

const Fabrics: FC<{ s: Summary }> = ({ s }) => (
  <Section id="fabrics" title="Fabrics" note="a multi-node replica needs whole free nodes in one fabric">
    {s.fabrics.length === 0 ? (
      <p class="empty">No fabrics reported.</p>
    ) : (
      <div class="scroll">
        <table>
          <thead>
            <tr>
              <th>Fabric</th>
              <th class="num">Nodes</th>
              <th class="num">Whole free</th>
              <th class="num">With weights</th>
              <th class="num">Models present</th>
            </tr>
          </thead>
          <tbody>
            {s.fabrics.map((f) => (
              <tr data-testid="fabric" data-fabric={f.fabric}>
                <td class="name">{f.fabric}</td>
                <td class="num" data-field="nodes">{f.nodes}</td>
                <td class="num strong" data-field="largest_free_block">{f.largest_free_block}</td>
                <td class="num" data-field="nodes_with_weights">{f.nodes_with_weights}</td>
                <td class="num" data-field="models_present">{f.models_present}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    )}
  </Section>
);

const Attention: FC<{ s: Summary }> = ({ s }) => {
  // Nodes whose discovery fails and whose GPUs are kept, counted unhealthy (control/gpu-health.ts).
  const kept = (s.gpu_discovery ?? []).filter((p) => p.last_known);
  const nothing = s.unplaceable.length === 0 && s.parked.length === 0 && s.idle_replicas.length === 0 && s.evictions.length === 0 && !s.store_error && kept.length === 0;
  return (
    <Section id="attention" title="Needs attention">
      {nothing && <p class="empty">Nothing: every model is placed or on its way, nothing is parked or idle.</p>}
      {s.store_error && (
        <p class="alert bad" data-testid="store-error">
          Store: {s.store_error}
        </p>
      )}
      {kept.map((p) => (
        <p class="alert bad" data-testid="discovery-fails" data-node={p.node}>
          GPU discovery fails on <a href={nodeHref(p.node)}>{p.node}</a>: its {plural(p.gpus, "GPU")} last reported are counted unhealthy until it answers again. {oneLine(p.error, 300)}
        </p>
      ))}
      {s.unplaceable.length > 0 && <Unplaceable s={s} />}
      {s.parked.length > 0 && <Parked s={s} />}
      {s.idle_replicas.length > 0 && <Idle s={s} />}
      {s.evictions.length > 0 && <Evicted s={s} />}
    </Section>
  );
};

/** Models short and unable to place more, each with why. */
const Unplaceable: FC<{ s: Summary }> = ({ s }) => (
  <>
    <h3 class="bad">Unplaceable</h3>
    <ul class="reasons">
      {s.unplaceable.map((name) => (
        <li data-testid="unplaceable" data-model={name}>
          <b>
            <a href={modelHref(name)}>{name}</a>
          </b>
          {s.unplaceable_reasons[name] && (
            <span class="reason">
              <Prose text={s.unplaceable_reasons[name]} />
            </span>
          )}
        </li>
      ))}
    </ul>
  </>
);

/** Models that failed every start, not retried until unparked. */
const Parked: FC<{ s: Summary }> = ({ s }) => (
  <>
    <h3 class="bad">
      Parked{" "}
      <small data-testid="parked-note">
        not retried until <code>llmgw models unpark NAME</code> or a catalog change
      </small>
    </h3>
    <div class="scroll">
      <table>
        <thead>
          <tr>
            <th>Model</th>
            <th class="num">Failures</th>
            <th>Last error</th>
          </tr>
        </thead>
        <tbody>
          {s.parked.map((p) => (
            <tr data-testid="parked" data-model={p.model}>
              <td class="name">
                <a href={modelHref(p.model)}>{p.model}</a>
              </td>
              <td class="num" data-field="failures">{p.failures}</td>
              <td class="reason" data-field="reason" title={p.reason}>
                <Prose text={oneLine(p.reason, 240)} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  </>
);

/** Ready replicas unasked-for long enough to reclaim, longest first (the first 50). */
const Idle: FC<{ s: Summary }> = ({ s }) => {
  const idleGpus = s.idle_replicas.reduce((a, x) => a + x.gpus, 0);
  return (
    <>
      <h3>
        Idle <small>ready, unasked-for 10m or more: {plural(idleGpus, "GPU")} to reclaim</small>
      </h3>
      <div class="scroll">
        <table>
          <thead>
            <tr>
              <th>Replica</th>
              <th>Model</th>
              <th class="num">Idle</th>
              <th class="num">GPUs</th>
            </tr>
          </thead>
          <tbody>
            {s.idle_replicas.slice(0, 50).map((i) => (
              <tr data-testid="idle" data-replica={i.id}>
                <td class="mono">{i.id}</td>
                <td class="name">{i.model}</td>
                <td class="num">{human(i.idle_seconds)}</td>
                <td class="num">{i.gpus}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {s.idle_replicas.length > 50 && <p class="more">… and {s.idle_replicas.length - 50} more in the replicas table</p>}
    </>
  );
};

/** The last hour's evictions of idle replicas for on-demand models. */
const Evicted: FC<{ s: Summary }> = ({ s }) => (
  <>
    <h3>
      Evicted <small>last hour: idle replicas stopped to make room for on-demand models</small>
    </h3>
    <div class="scroll">
      <table>
        <thead>
          <tr>
            <th>At (UTC)</th>
            <th>Replica</th>
            <th>Model</th>
            <th class="num">Was idle</th>
            <th>For</th>
          </tr>
        </thead>
        <tbody>
          {s.evictions.map((e) => (
            <tr data-testid="eviction" data-replica={e.replica}>
              <td class="mono">{clock(e.at)}</td>
              <td class="mono">{e.replica}</td>
              <td class="name">{e.model}</td>
              <td class="num">{human(e.idle_seconds)}</td>
              <td class="name">{e.for_model}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  </>
);

// ---- the tables -------------------------------------------------------------------------

function classes(n: NodeView): string {
  const counts = new Map<string, number>();
  for (const g of n.gpus) counts.set(g.class, (counts.get(g.class) ?? 0) + 1);
  return [...counts].map(([c, k]) => `${k}× ${c}`).join(", ") || "-";
}

const Nodes: FC<{ nodes: NodeView[]; now: number }> = ({ nodes, now }) => (
  <Section id="nodes" title="Nodes" count={nodes.length}>
    {nodes.length === 0 ? (
      <p class="empty">
        No nodes yet. Start <code>llmgw agent</code> on a GPU node.
      </p>
    ) : (
      <div class="scroll">
        <table>
          <thead>
            <tr>
              <th>Name</th>
              <th>State</th>
              <th>GPUs</th>
              <th class="num">Free</th>
              <th class="num">Unhealthy</th>
              <th>Classes</th>
              <th>Fabrics</th>
              <th>Weights</th>
              <th>Heartbeat</th>
            </tr>
          </thead>
          <tbody>
            {nodes.map((n) => (
              <tr data-testid="node-row" data-node={n.name}>
                <td class="name">
                  <a href={nodeHref(n.name)}>{n.name}</a>
                </td>
                <td>
                  <Badge tone={nodeTone(n.state)} field="state">
                    {n.state}
                  </Badge>
                </td>
                <td>
                  <GpuStrip n={n} />
                </td>
                <td class="num" data-field="free">
                  {n.gpu_free}/{n.gpu_total}
                </td>
                <td class={`num${n.gpu_unhealthy ? " bad" : ""}`} data-field="unhealthy">{n.gpu_unhealthy}</td>
                <td>{classes(n)}</td>
                <td>{n.fabrics.join(", ") || "-"}</td>
                <td title={n.models.join(", ")}>{n.models.length === 0 ? "-" : plural(n.models.length, "model")}</td>
                <td class="muted" title={n.last_heartbeat}>
                  {ago(n.last_heartbeat, now)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    )}
  </Section>
);

const Models: FC<{ models: ModelView[] }> = ({ models }) => (
  <Section id="models" title="Models" count={models.length}>
    {models.length === 0 ? (
      <p class="empty">
        No models in the catalog. Add some with <code>llmgw apply -f catalog.yaml</code>.
      </p>
    ) : (
      <div class="scroll">
        <table>
          <thead>
            <tr>
              <th>Name</th>
              <th class="num">Ready</th>
              <th class="num">Min</th>
              <th class="num">Max</th>
              <th>On demand</th>
              <th>Status</th>
              <th>Reason</th>
            </tr>
          </thead>
          <tbody>
            {models.map((m) => {
              const st = modelStatus(m);
              return (
                <tr data-testid="model-row" data-model={m.name}>
                  <td class="name" title={m.aliases.length ? `aliases: ${m.aliases.join(", ")}` : undefined}>
                    <a href={modelHref(m.name)}>{m.name}</a>
                  </td>
                  <td class="num" data-field="ready">
                    {m.ready}/{m.desired}
                  </td>
                  <td class="num">{m.min}</td>
                  <td class="num">{m.max}</td>
                  <td>{m.on_demand ? "yes" : "no"}</td>
                  <td>
                    <Badge tone={st === "ok" ? "ok" : st === "short" ? "warn" : "bad"} field="status">
                      {st}
                    </Badge>
                  </td>
                  <td class="reason" title={m.reason ?? undefined}>
                    {m.reason ? <Prose text={oneLine(m.reason, 160)} /> : "-"}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
    )}
  </Section>
);

const Replicas: FC<{ replicas: ReplicaView[] }> = ({ replicas }) => (
  <Section id="replicas" title="Replicas" count={replicas.length} note="idle '-' = the router has not reported it yet">
    {replicas.length === 0 ? (
      <p class="empty">No replicas.</p>
    ) : (
      <div class="scroll">
        <table>
          <thead>
            <tr>
              <th>ID</th>
              <th>Model</th>
              <th>Profile</th>
              <th>State</th>
              <th>GPUs</th>
              <th class="num">Idle</th>
              <th class="num">Failures</th>
              <th>Error</th>
            </tr>
          </thead>
          <tbody>
            {replicas.map((r) => (
              <tr data-testid="replica-row" data-replica={r.id} data-model={r.model}>
                <td class="mono">{r.id}</td>
                <td class="name">
                  <a href={modelHref(r.model)}>{r.model}</a>
                </td>
                <td>{r.profile}</td>
                <td>
                  <Badge tone={replicaTone(r.state)} field="state">
                    {r.state}
                  </Badge>
                </td>
                <td class="mono" data-field="gpus">
                  {/* A failed replica's cards went back to the pool: another replica may hold them now. */}
                  {r.state === "failed" ? "released " : ""}
                  {r.shards.map((s) => `${s.node}:${s.gpus.join(",")}`).join(" ") || "-"}
                </td>
                <td class="num">{human(r.idle_seconds)}</td>
                <td class="num">{r.failures}</td>
                <td class="reason" title={r.error ?? undefined}>
                  {r.error ? <Prose text={oneLine(r.error, 120)} /> : "-"}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    )}
  </Section>
);

export const Events: FC<{ events: EventView[]; title?: string }> = ({ events, title = "Recent events" }) => (
  <Section id="events" title={title} note="newest first, times in UTC">
    {events.length === 0 ? (
      <p class="empty">No events yet.</p>
    ) : (
      <ol class="events">
        {events.map((e) => (
          <li data-testid="event" data-id={String(e.id)}>
            <time datetime={e.at} class="mono">
              {clock(e.at)}
            </time>
            <Badge tone={eventTone(e.kind)}>{e.kind}</Badge>
            <span class="msg">
              <Prose text={e.message} />
            </span>
          </li>
        ))}
      </ol>
    )}
  </Section>
);

// ---- whole views ----------------------------------------------------------------------

export interface DashboardData {
  summary: Summary;
  tables: Tables;
  /** Newest first. */
  events: EventView[];
  now: number;
}

/** The part of the page that refreshes: everything inside <main>. */
export const Dashboard: FC<{ d: DashboardData; history?: unknown }> = ({ d, history }) => {
  const s = d.summary;
  const at = new Date(d.now).toISOString();
  return (
    <>
      <p class="updated">
        <span class="version">
          llmgw <span data-testid="version">{s.version}</span>
        </span>
        <span>
          updated <time data-testid="updated" datetime={at}>{clock(at)}</time> UTC
        </span>
      </p>
      <Cards s={s} />
      <div class="grid">
        <Gpus s={s} />
        <Fabrics s={s} />
      </div>
      {history}
      <Attention s={s} />
      <Nodes nodes={d.tables.nodes} now={d.now} />
      <Models models={d.tables.models} />
      <Replicas replicas={d.tables.replicas} />
      <Events events={d.events} />
    </>
  );
};

/** Polls the fragment and swaps it in; after a 401 the page reloads into the login form. */
export const REFRESH_SCRIPT = `(()=>{const m=document.getElementById("main");let busy=false;
async function refresh(){if(busy||document.hidden)return;busy=true;
try{const r=await fetch("/ui/fragment",{cache:"no-store",credentials:"same-origin"});
if(r.status===401){location.replace("/ui");return}
if(!r.ok)throw new Error(String(r.status));
m.innerHTML=await r.text();document.body.classList.remove("stale")}
catch(e){document.body.classList.add("stale")}finally{busy=false}}
setInterval(refresh,${2000});document.addEventListener("visibilitychange",()=>{if(!document.hidden)refresh()})})();`;

export const Shell: FC<{ nonce: string; title: string; head?: unknown; children?: unknown }> = ({ nonce, title, head, children }) => (
  <html lang="en">
    <head>
      <meta charset="utf-8" />
      <meta name="viewport" content="width=device-width, initial-scale=1" />
      <meta name="referrer" content="no-referrer" />
      <meta name="color-scheme" content="light dark" />
      {/* Without one the browser asks for /favicon.ico, and a data: icon would break the CSP. */}
      <link rel="icon" type="image/svg+xml" href="/ui/icon.svg" />
      <title>{title}</title>
      <style nonce={nonce} dangerouslySetInnerHTML={{ __html: CSS }} />
      {head}
    </head>
    {children}
  </html>
);

/** An old sign-in link's ?token= must not stay in the address bar: the sign-in form drops it as it loads. */
export const STRIP_QUERY = `history.replaceState(null,"","/ui");`;

export const LoginPage: FC<{ nonce: string; error?: string; stripQuery?: boolean }> = ({ nonce, error, stripQuery }) => (
  <Shell nonce={nonce} title="llmgw — sign in">
    <body class="login-body">
      <main class="login">
        <h1>llmgw</h1>
        <p>Sign in with the admin token to see the fleet.</p>
        {error && (
          <p class="alert bad" role="alert" data-testid="login-error">
            {error}
          </p>
        )}
        <form method="post" action="/ui/login" data-testid="login-form">
          <label for="token">Admin token</label>
          <input id="token" name="token" type="password" autocomplete="off" spellcheck={false} required autofocus />
          <button type="submit">Sign in</button>
        </form>
        <p class="hint">
          The token is in <code>admin.token</code> in the server's data directory (on the head node: <code>cat llmgw-data/admin.token</code>).
        </p>
      </main>
      {stripQuery && <script nonce={nonce} dangerouslySetInnerHTML={{ __html: STRIP_QUERY }} />}
    </body>
  </Shell>
);

/** The tab icon: a usage bar, used | unhealthy | free. */
export const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#1c2230"/><rect x="3" y="3" width="3" height="10" rx="1" fill="#5b8ff0"/><rect x="7" y="3" width="3" height="10" rx="1" fill="#f06262"/><rect x="11" y="3" width="2" height="10" rx="1" fill="#8c96a6"/></svg>`;

// ---- style ------------------------------------------------------------------------------

const CSS = `
:root{--bg:#f5f6f8;--panel:#fff;--fg:#1c2230;--muted:#687386;--line:#e3e7ee;--head:#f0f2f6;
--used:#2f6bd8;--bad:#d23c3c;--free:#dfe5ee;--ok:#1d8049;--warn:#a96a06;
--ok-bg:#e5f4ea;--warn-bg:#fbf0d9;--bad-bg:#fbe4e4;--muted-bg:#eceff4;
--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace}
@media (prefers-color-scheme:dark){:root{--bg:#0f131a;--panel:#171c25;--fg:#e3e8ef;--muted:#8c96a6;--line:#29303c;--head:#1d232d;
--used:#5b8ff0;--bad:#f06262;--free:#2c3442;--ok:#4cc27e;--warn:#e0a83a;--ok-bg:#173324;--warn-bg:#3a2d12;--bad-bg:#3d1c1c;--muted-bg:#232a35}}
*{box-sizing:border-box}
html{background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
body{margin:0}
a{color:var(--used)}
code,.mono{font-family:var(--mono);font-size:12.5px}
.top{position:sticky;top:0;z-index:1;display:flex;gap:16px;align-items:center;padding:10px 24px;background:var(--panel);border-bottom:1px solid var(--line)}
.brand{font-weight:700;font-size:16px;letter-spacing:.02em}
.live{color:var(--muted);font-size:12.5px;display:flex;align-items:center;gap:6px}
.dot{width:8px;height:8px;border-radius:50%;background:var(--ok);display:inline-block}
.stale-note{display:none;color:var(--bad);font-weight:600;font-size:12.5px}
.stale .stale-note{display:inline}.stale .dot{background:var(--bad)}.stale .live{display:none}
.logout{margin-left:auto;font-size:13px}
.logout button{font:inherit;color:inherit;background:none;border:1px solid var(--line);border-radius:6px;padding:2px 10px;cursor:pointer}
main{max-width:1400px;margin:0 auto;padding:16px 24px 40px}
.flash-wrap{max-width:1400px;margin:0 auto;padding:12px 24px 0}
.flash-wrap .flash{margin:0}
.updated{display:flex;justify-content:space-between;color:var(--muted);font-size:12.5px;margin:0 0 12px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(220px,1fr));gap:12px;margin-bottom:12px}
.card,.panel{background:var(--panel);border:1px solid var(--line);border-radius:8px}
.card{padding:12px 16px}
.card h3{margin:0;font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);font-weight:600}
.big{margin:4px 0 6px;font-size:28px;font-weight:650;line-height:1.1}
.big .of{font-size:14px;font-weight:400;color:var(--muted)}
.stats{margin:0;display:flex;flex-wrap:wrap;gap:4px 12px;font-size:13px}
.stat.zero{color:var(--muted)}.stat.ok b{color:var(--ok)}.stat.warn b{color:var(--warn)}.stat.bad b{color:var(--bad)}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));gap:12px}
.panel{padding:12px 16px;margin-bottom:12px;min-width:0}
.panel h2{margin:0 0 8px;font-size:15px;display:flex;flex-wrap:wrap;align-items:baseline;gap:4px 8px}
.panel h2 small,.panel h3 small{font-weight:400;color:var(--muted);font-size:12.5px}
.panel h3{font-size:13.5px;margin:12px 0 6px}
.count{font-size:12px;font-weight:600;color:var(--muted);background:var(--muted-bg);border-radius:10px;padding:0 8px}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th{font-size:11.5px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);font-weight:600;text-align:left;background:var(--head)}
th,td{padding:5px 10px;border-bottom:1px solid var(--line);vertical-align:middle;white-space:nowrap}
tbody tr:last-child td{border-bottom:0}
.num{text-align:right}
td.name{font-weight:600}
td.reason{white-space:normal;color:var(--muted);min-width:220px;word-break:break-word}
td.muted,.muted{color:var(--muted)}
td.bad,h3.bad{color:var(--bad)}
td.strong{font-weight:700}
td.wide,th.wide{width:45%}
.bar{display:block;width:100%;height:14px;border-radius:3px;overflow:hidden}
.bar .free{fill:var(--free)}.bar .used{fill:var(--used)}.bar .unhealthy{fill:var(--bad)}
.legend{margin:8px 0 0;color:var(--muted);font-size:12.5px;display:flex;align-items:center;gap:6px}
.legend i,.strip i{display:inline-block;width:10px;height:10px;border-radius:2px}
.legend i{margin-left:8px}.legend i:first-child{margin-left:0}
i.used{background:var(--used)}i.unhealthy{background:var(--bad)}i.free{background:var(--free)}
.strip{display:inline-flex;flex-wrap:wrap;gap:2px;max-width:180px}
.badge{display:inline-block;padding:0 8px;border-radius:10px;font-size:12px;font-weight:600;line-height:20px}
.badge.ok{color:var(--ok);background:var(--ok-bg)}.badge.warn{color:var(--warn);background:var(--warn-bg)}
.badge.bad{color:var(--bad);background:var(--bad-bg)}.badge.muted{color:var(--muted);background:var(--muted-bg)}
.empty,.more{color:var(--muted);margin:4px 0}
.alert{padding:8px 12px;border-radius:6px;margin:8px 0}
.alert.bad{background:var(--bad-bg);color:var(--bad)}
ul.reasons{list-style:none;margin:0;padding:0}
ul.reasons li{padding:6px 0;border-bottom:1px solid var(--line);display:flex;gap:12px;align-items:baseline}
ul.reasons li:last-child{border-bottom:0}
ul.reasons .reason{color:var(--muted);word-break:break-word}
ol.events{list-style:none;margin:0;padding:0;font-size:13px}
ol.events li{display:grid;grid-template-columns:70px 170px 1fr;gap:10px;align-items:baseline;padding:3px 0;border-bottom:1px solid var(--line)}
ol.events li:last-child{border-bottom:0}
ol.events .badge{justify-self:start;max-width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
ol.events .msg{word-break:break-word}
ol.events time{color:var(--muted)}
.login-body{display:flex;min-height:100vh;align-items:center;justify-content:center}
.login{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:28px 32px;width:min(420px,92vw);margin:0}
.login h1{margin:0 0 4px;font-size:22px}
.login form{display:grid;gap:8px;margin:16px 0}
.login label{font-weight:600;font-size:13px}
.login input{font:inherit;padding:8px 10px;border:1px solid var(--line);border-radius:6px;background:var(--bg);color:var(--fg)}
.login button{font:inherit;font-weight:600;padding:8px 12px;border:0;border-radius:6px;background:var(--used);color:#fff;cursor:pointer}
.hint{color:var(--muted);font-size:12.5px;margin:0}
.hint code{white-space:nowrap}
.bar-under{display:none}
.gpus-box{container-type:inline-size}
@container (max-width:560px){table.gpus th,table.gpus td{padding:5px 6px}table.gpus .wide{display:none}
table.gpus td.name{white-space:normal;overflow-wrap:anywhere}table.gpus .bar-under{display:block;margin-top:4px}}
@media (max-width:700px){.grid{grid-template-columns:1fr}main,.top,.flash-wrap{padding-left:12px;padding-right:12px}ol.events li{grid-template-columns:64px 1fr}ol.events .msg{grid-column:1/-1}}
.top{flex-wrap:wrap;row-gap:6px}
.brand{color:inherit;text-decoration:none}
.nav{display:flex;gap:12px;font-size:13.5px}
.nav a{color:var(--muted);text-decoration:none}.nav a[aria-current=page],.nav a:hover{color:var(--fg)}
td.name a,.model-traffic h3 a{color:inherit}
.crumbs{margin:0 0 4px;color:var(--muted);font-size:12.5px}
h1.title{margin:0 0 12px;font-size:22px;display:flex;flex-wrap:wrap;gap:8px;align-items:center;overflow-wrap:anywhere}
.alert.warn{background:var(--warn-bg);color:var(--warn)}.alert.ok{background:var(--ok-bg);color:var(--ok)}
.flash p{margin:0}.flash .secret{margin-top:6px;display:grid;gap:4px}
.flash code{font-size:13px;background:var(--panel);color:var(--fg);padding:4px 8px;border-radius:4px;overflow-wrap:anywhere;user-select:all}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:0}
.facts dt{color:var(--muted)}.facts dd{margin:0;overflow-wrap:anywhere}
.actions{display:flex;flex-wrap:wrap;gap:10px;align-items:center}
.action{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:0}
.action button{font:inherit;font-weight:600;padding:5px 12px;border:1px solid var(--line);border-radius:6px;background:var(--head);color:var(--fg);cursor:pointer}
.action button.danger{border-color:var(--bad);color:var(--bad)}
.confirm{font-size:12.5px;color:var(--muted);display:flex;gap:4px;align-items:center}
.field{display:grid;gap:2px;font-size:13px;font-weight:600}
.field small{font-weight:400;color:var(--muted)}
.field input{font:inherit;font-weight:400;padding:5px 8px;border:1px solid var(--line);border-radius:6px;background:var(--bg);color:var(--fg);max-width:100%}
.traffic{display:grid;gap:12px}
.model-traffic h3{margin:0 0 4px;display:flex;flex-wrap:wrap;gap:2px 10px;align-items:baseline;overflow-wrap:anywhere}
.model-traffic h3 small{font-weight:400;color:var(--muted)}
.hint{font-size:12.5px;margin:0;flex-basis:100%}
td.act{white-space:normal;min-width:120px}td .action{gap:4px 8px}
`+CHART_CSS;
