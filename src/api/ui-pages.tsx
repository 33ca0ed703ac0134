// The dashboard's other pages: one per model and per node (their replicas with placement,
// recent events, reasons, the last hour's charts), a 404 (the keys and teams: ui-keys.tsx); the
// history sections of the main page; and the operator's actions as POST forms. Every form that
// changes state carries the session's CSRF token, and is drawn only for a session (a script
// signed in by bearer header uses the API). Like ui-view.tsx: Hono's JSX escapes every string,
// and the data arrives already sanitised.

import type { FC } from "hono/jsx";
import { ago, human, oneLine, plural } from "../lib/format";
import type { ModelSpec } from "../protocol/catalog";
import type { EventView, ModelView, NodeView, ReplicaView } from "../protocol/views";
import type { GpuPoint, ModelPoint } from "./history";
import type { WeightsNodeView } from "../protocol/weights-admin";
import { WeightsSection } from "./ui-weights";
import { fmtMs, fmtRate, gpuChart, modelCharts } from "./ui-charts";
import { Badge, Dashboard, type DashboardData, Events, GpuStrip, Prose, REFRESH_SCRIPT, Section, Shell, modelHref, modelStatus, nodeHref, nodeTone, replicaTone } from "./ui-view";


/** The last hour as plain data (sanitised with the rest of a page's data). */
export interface HistoryView {
  now: number;
  windowMs: number;
  /** Whether the router's figures are read at all (only GPU use is charted without). */
  traffic: boolean;
  models: { name: string; points: ModelPoint[] }[];
  classes: { name: string; points: GpuPoint[] }[];
  untrackedModels: number;
  untrackedClasses: number;
}

/** What the previous action said, shown once on the next page. */
export interface Flash {
  tone: "ok" | "bad";
  text: string;
  /** A created API key: its secret, shown this once. */
  key?: { name: string; key: string };
}

// ---- the frame ---------------------------------------------------------------------------

export type NavPage = "overview" | "keys" | "teams" | "usage";

export const TopBar: FC<{ csrf?: string; live?: boolean; here?: NavPage }> = ({ csrf, live, here }) => (
  <header class="top">
    <a class="brand" href="/ui">
      llmgw
    </a>
    <nav class="nav" aria-label="pages">
      <a href="/ui" data-testid="nav-overview" aria-current={here === "overview" ? "page" : undefined}>
        Overview
      </a>
      <a href="/ui/keys" data-testid="nav-keys" aria-current={here === "keys" ? "page" : undefined}>
        API keys
      </a>
      <a href="/ui/teams" data-testid="nav-teams" aria-current={here === "teams" ? "page" : undefined}>
        Teams
      </a>
      <a href="/ui/usage" data-testid="nav-usage" aria-current={here === "usage" ? "page" : undefined}>
        Usage
      </a>
    </nav>
    {live && (
      <>
        <span class="live" aria-live="polite">
          <span class="dot" /> live · every 2s
        </span>
        <span class="stale-note" role="status">
          connection lost, retrying…
        </span>
      </>
    )}
    {csrf !== undefined && (
      <form class="logout" method="post" action="/ui/logout" data-testid="logout-form">
        <input type="hidden" name="csrf" value={csrf} />
        <button type="submit" data-testid="logout">
          Log out
        </button>
      </form>
    )}
  </header>
);

export const FlashBox: FC<{ flash?: Flash }> = ({ flash }) =>
  flash ? (
    <div class={`flash alert ${flash.tone}`} role={flash.tone === "bad" ? "alert" : "status"} data-testid="flash" data-tone={flash.tone}>
      <p>{flash.text}</p>
      {flash.key && (
        <p class="secret">
          <code data-testid="new-key">{flash.key.key}</code>
          <small>Copy it now: this is the only time it is shown. Clients send it as `Authorization: Bearer …` to the router.</small>
        </p>
      )}
    </div>
  ) : null;

/** A page that is not the live overview: a shell, the top bar, the flash, then the content. */
export const Page: FC<{ nonce: string; title: string; csrf?: string; flash?: Flash; here?: Exclude<NavPage, "overview">; children?: unknown }> = ({ nonce, title, csrf, flash, here, children }) => (
  <Shell nonce={nonce} title={`${title} · llmgw`}>
    <body>
      <TopBar csrf={csrf} here={here} />
      <main data-testid="main">
        <FlashBox flash={flash} />
        {children}
      </main>
    </body>
  </Shell>
);

/** A POST form: the CSRF token, an optional confirm box the server checks too, one button. */
export const Action: FC<{ action: string; csrf: string; label: string; testid: string; danger?: boolean; confirm?: string; children?: unknown }> = ({ action, csrf, label, testid, danger, confirm, children }) => (
  <form method="post" action={action} class="action" data-testid={testid}>
    <input type="hidden" name="csrf" value={csrf} />
    {children}
    {confirm && (
      <label class="confirm">
        <input type="checkbox" name="confirm" value="yes" required data-testid={`${testid}-confirm`} /> {confirm}
      </label>
    )}
    <button type="submit" class={danger ? "danger" : undefined}>
      {label}
    </button>
  </form>
);

const Facts: FC<{ rows: [string, unknown][] }> = ({ rows }) => (
  <dl class="facts">
    {rows.map(([k, v]) => (
      <>
        <dt>{k}</dt>
        <dd>{v}</dd>
      </>
    ))}
  </dl>
);

// ---- history on the overview -------------------------------------------------------------

/** Models on the overview at most (the busiest); each has all four on its own page. */
const OVERVIEW_MODELS = 12;

const requestsIn = (pts: readonly ModelPoint[]) => pts.reduce((a, p) => a + (p.rps ?? 0), 0);
/** Asked for at all in the hour: a request answered, or one in flight or held at a sample. */
const active = (pts: readonly ModelPoint[]) => pts.some((p) => (p.rps ?? 0) > 0 || p.inflight > 0 || p.queued > 0);

export const TrafficSection: FC<{ h: HistoryView }> = ({ h }) => {
  const asked = h.models.filter((m) => active(m.points));
  const busiest = asked.sort((a, b) => requestsIn(b.points) - requestsIn(a.points) || a.name.localeCompare(b.name)).slice(0, OVERVIEW_MODELS);
  const quiet = h.models.length - asked.length;
  const more = asked.length - busiest.length + h.untrackedModels;
  return (
    <Section id="traffic" title="Traffic, last hour" note="per model, as the router saw it; sampled every 15 s, kept in memory only">
      {!h.traffic ? (
        <p class="empty">The router's figures are not available to this dashboard.</p>
      ) : busiest.length === 0 ? (
        <p class="empty">{h.models.length === 0 ? "No traffic sampled yet." : "No requests in the last hour."}</p>
      ) : (
        <div class="traffic">
          {busiest.map((m) => {
            const last = m.points[m.points.length - 1];
            return (
              <div class="model-traffic" data-testid="model-traffic" data-model={m.name}>
                <h3>
                  <a href={modelHref(m.name)}>{m.name}</a>
                  <small>
                    {fmtRate(last?.rps)} req/s · {fmtRate(last?.tokens_ps)} tok/s · p50 {fmtMs(last?.ttft_p50)} · p99 {fmtMs(last?.ttft_p99)} · {last?.inflight ?? 0} in flight · {last?.queued ?? 0} held
                  </small>
                </h3>
                <div class="charts">{modelCharts(m.points, h.now, h.windowMs, true)}</div>
              </div>
            );
          })}
        </div>
      )}
      {quiet > 0 && busiest.length > 0 && <p class="more">{plural(quiet, "model")} not asked for in the last hour.</p>}
      {more > 0 && <p class="more">… and {plural(more, "more model")}: each model's page has its charts{h.untrackedModels > 0 ? ` (${h.untrackedModels} beyond the history's limit are not kept)` : ""}.</p>}
    </Section>
  );
};

export const GpuHistorySection: FC<{ h: HistoryView }> = ({ h }) => (
  <Section id="gpu-history" title="GPU use, last hour" note="per class: used and unhealthy, the top of each chart is the class's total">
    {h.classes.length === 0 ? (
      <p class="empty">No GPUs sampled yet.</p>
    ) : (
      <div class="charts">{h.classes.map((c) => gpuChart(c.name, c.points, h.now, h.windowMs))}</div>
    )}
    {h.untrackedClasses > 0 && <p class="more">{plural(h.untrackedClasses, "more class", "more classes")} not charted.</p>}
  </Section>
);

// ---- shared tables -----------------------------------------------------------------------

const ReplicaTable: FC<{ replicas: ReplicaView[]; show: "model" | "node" }> = ({ replicas, show }) =>
  replicas.length === 0 ? (
    <p class="empty">No replicas.</p>
  ) : (
    <div class="scroll">
      <table>
        <thead>
          <tr>
            <th>ID</th>
            <th>{show === "model" ? "Model" : "Profile"}</th>
            <th>State</th>
            <th>Placement</th>
            <th class="num">Idle</th>
            <th class="num">Failures</th>
            <th>Error</th>
          </tr>
        </thead>
        <tbody>
          {replicas.map((r) => (
            <tr data-testid="replica-row" data-replica={r.id} data-model={r.model}>
              <td class="mono">{r.id}</td>
              <td class="name">{show === "model" ? <a href={modelHref(r.model)}>{r.model}</a> : r.profile}</td>
              <td>
                <Badge tone={replicaTone(r.state)} field="state">
                  {r.state}
                </Badge>
              </td>
              <td class="mono" data-field="placement">
                {r.state === "failed" && r.shards.length > 0 && <span class="muted">released </span>}
                {r.shards.length === 0
                  ? "-"
                  : r.shards.map((s, i) => (
                      <>
                        {i > 0 && " "}
                        <a href={nodeHref(s.node)}>{s.node}</a>:{s.gpus.join(",")}
                      </>
                    ))}
              </td>
              <td class="num">{human(r.idle_seconds)}</td>
              <td class="num">{r.failures}</td>
              <td class="reason" title={r.error ?? undefined}>
                {r.error ? <Prose text={oneLine(r.error, 160)} /> : "-"}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );

// ---- a model -----------------------------------------------------------------------------

export interface ModelPageData {
  view: ModelView;
  spec: ModelSpec;
  replicas: ReplicaView[];
  events: EventView[];
  points: ModelPoint[];
  windowMs: number;
  traffic: boolean;
  now: number;
  /** Each node's copy of the weights, when they come from the Hub. */
  weights?: WeightsNodeView[] | undefined;
}

export const ModelPage: FC<{ nonce: string; csrf?: string; flash?: Flash; d: ModelPageData }> = ({ nonce, csrf, flash, d }) => {
  const m = d.view;
  const st = modelStatus(m);
  const href = modelHref(m.name);
  return (
    <Page nonce={nonce} title={`model ${m.name}`} csrf={csrf} flash={flash}>
      <p class="crumbs">
        <a href="/ui">Overview</a> › models
      </p>
      <h1 class="title" data-testid="model-title" data-model={m.name}>
        {m.name}{" "}
        <Badge tone={st === "ok" ? "ok" : st === "short" ? "warn" : "bad"} field="status">
          {st}
        </Badge>
      </h1>
      {m.reason && (
        <p class={`alert ${m.never_fits || m.parked ? "bad" : "warn"}`} data-testid="model-reason">
          <Prose text={m.reason} />
        </p>
      )}
      {m.rollout && (
        <p class="alert warn" data-testid="model-rollout">
          Rollout: <Prose text={m.rollout.text} />
        </p>
      )}
      <div class="grid">
        <Section id="model" title="Model">
          <Facts
            rows={[
              ["Replicas", `${m.ready} ready of ${m.desired} wanted (min ${m.min}, max ${m.max})`],
              ["On demand", m.on_demand ? "yes: started by the first request" : "no"],
              ["Aliases", m.aliases.join(", ") || "-"],
              // The catalog's count of this model's changes; the Hugging Face commit is the spec's revision.
              ["Catalog revision", String(m.revision)],
              ...(d.spec.revision ? [["Hugging Face revision", d.spec.revision] as [string, string]] : []),
              ["Failures", String(m.failures)],
              ["Crashes soon after ready", String(m.crashes)],
            ]}
          />
        </Section>
        <Section id="actions" title="Actions">
          {csrf === undefined ? (
            <p class="empty">Sign in with the form to act here; scripts use the admin API.</p>
          ) : (
            <div class="actions">
              {m.parked ? (
                <Action action={`${href}/unpark`} csrf={csrf} label="Unpark: try again" testid="unpark-form" />
              ) : (
                <p class="muted">Not parked.</p>
              )}
              <Action action={`${href}/delete`} csrf={csrf} label="Delete model" testid="delete-form" danger confirm={`yes, delete ${m.name} and stop its replicas`} />
            </div>
          )}
        </Section>
      </div>
      <Section id="history" title="Last hour">
        {d.traffic ? <div class="charts">{modelCharts(d.points, d.now, d.windowMs)}</div> : <p class="empty">The router's figures are not available to this dashboard.</p>}
      </Section>
      {d.weights !== undefined && <WeightsSection nodes={d.weights} />}
      <Section id="profiles" title="Profiles" count={d.spec.profiles.length}>
        <div class="scroll">
          <table>
            <thead>
              <tr>
                <th>Profile</th>
                <th>Engine</th>
                <th>GPU class</th>
                <th class="num">GPUs × nodes</th>
                <th class="num">Priority</th>
              </tr>
            </thead>
            <tbody>
              {d.spec.profiles.map((p) => (
                <tr data-testid="profile-row">
                  <td class="name">{p.name}</td>
                  <td>{p.engine}</td>
                  <td>{p.gpu_class}</td>
                  <td class="num">
                    {p.gpus} × {p.nodes}
                  </td>
                  <td class="num">{p.priority}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </Section>
      <Section id="replicas" title="Replicas" count={d.replicas.length}>
        <ReplicaTable replicas={d.replicas} show="node" />
      </Section>
      <Events events={d.events} />
    </Page>
  );
};

// ---- a node ------------------------------------------------------------------------------

export interface NodePageData {
  node: NodeView;
  replicas: ReplicaView[];
  events: EventView[];
  now: number;
}

export const NodePage: FC<{ nonce: string; csrf?: string; flash?: Flash; d: NodePageData }> = ({ nonce, csrf, flash, d }) => {
  const n = d.node;
  const href = nodeHref(n.name);
  return (
    <Page nonce={nonce} title={`node ${n.name}`} csrf={csrf} flash={flash}>
      <p class="crumbs">
        <a href="/ui">Overview</a> › nodes
      </p>
      <h1 class="title" data-testid="node-title" data-node={n.name}>
        {n.name}{" "}
        <Badge tone={nodeTone(n.state)} field="state">
          {n.state}
        </Badge>
      </h1>
      {n.discovery_error && (
        <p class="alert bad">
          GPU discovery: {n.discovery_error}
          {n.gpus_last_known && ` (the ${plural(n.gpus.length, "GPU")} below are the last it reported, counted unhealthy until it answers again)`}
        </p>
      )}
      <div class="grid">
        <Section id="node" title="Node">
          <Facts
            rows={[
              ["Address", n.address],
              ["GPUs", `${n.gpu_free} free of ${n.gpu_total}${n.gpu_unhealthy ? `, ${n.gpu_unhealthy} unhealthy` : ""}`],
              ["Fabrics", n.fabrics.join(", ") || "-"],
              ["Labels", Object.entries(n.labels).map(([k, v]) => `${k}=${v}`).join(", ") || "-"],
              ["Weights", n.models.join(", ") || "-"],
              ["Agent", n.agent_version],
              ["Engines", n.engines.map((e) => `${e.engine} ${e.version ?? `(none: ${e.error ?? "not found"})`}`).join(", ") || "-"],
              ["Heartbeat", ago(n.last_heartbeat, d.now)],
            ]}
          />
        </Section>
        <Section id="actions" title="Actions" note={`admin state: ${n.admin_state}`}>
          {csrf === undefined ? (
            <p class="empty">Sign in with the form to act here; scripts use the admin API.</p>
          ) : (
            <div class="actions">
              <Action action={`${href}/cordon`} csrf={csrf} label="Cordon" testid="cordon-form" />
              <Action action={`${href}/uncordon`} csrf={csrf} label="Uncordon" testid="uncordon-form" />
              <Action action={`${href}/drain`} csrf={csrf} label="Drain" testid="drain-form" danger />
              <p class="muted hint">Cordon: no new replicas. Drain: also moves its replicas elsewhere.</p>
            </div>
          )}
        </Section>
      </div>
      <Section id="gpus" title="GPUs" count={n.gpus.length}>
        {n.gpus.length === 0 ? (
          <p class="empty">No GPUs reported.</p>
        ) : (
          <>
            <GpuStrip n={n} />
            <div class="scroll">
              <table>
                <thead>
                  <tr>
                    <th class="num">#</th>
                    <th>Class</th>
                    <th class="num">Memory</th>
                    <th>Health</th>
                    <th>In use by</th>
                  </tr>
                </thead>
                <tbody>
                  {n.gpus.map((g) => (
                    <tr data-testid="gpu-row" data-index={String(g.index)}>
                      <td class="num">{g.index}</td>
                      <td>{g.class}</td>
                      <td class="num">{Math.round(g.memory_mib / 1024)} GiB</td>
                      <td>{g.healthy ? <Badge tone="ok">healthy</Badge> : <Badge tone="bad">{g.reason ? oneLine(g.reason, 80) : "unhealthy"}</Badge>}</td>
                      <td class="mono">{g.in_use_by ?? "-"}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          </>
        )}
      </Section>
      <Section id="replicas" title="Replicas" count={d.replicas.length}>
        <ReplicaTable replicas={d.replicas} show="model" />
      </Section>
      <Events events={d.events} />
    </Page>
  );
};

export const NotFoundPage: FC<{ nonce: string; csrf?: string; what: string }> = ({ nonce, csrf, what }) => (
  <Page nonce={nonce} title="not found" csrf={csrf}>
    <h1 class="title" data-testid="not-found">
      Not found
    </h1>
    <p>{what}</p>
    <p>
      <a href="/ui">Back to the overview</a>
    </p>
  </Page>
);

// ---- the overview ------------------------------------------------------------------------

/** The part of the overview that refreshes: the tables, with the history after the GPU classes. */
export const Overview: FC<{ d: DashboardData; h: HistoryView }> = ({ d, h }) => (
  <Dashboard
    d={d}
    history={
      <>
        <TrafficSection h={h} />
        <GpuHistorySection h={h} />
      </>
    }
  />
);

/**
 * The overview page. `csrf` is the session's CSRF token, carried by every form that changes
 * state; a script signed in by bearer header has no session and gets no such form.
 */
export const DashboardPage: FC<{ nonce: string; d: DashboardData; h: HistoryView; csrf?: string; flash?: Flash }> = ({ nonce, d, h, csrf, flash }) => (
  <Shell
    nonce={nonce}
    title="llmgw dashboard"
    head={
      <noscript>
        <meta http-equiv="refresh" content="5" />
      </noscript>
    }
  >
    <body>
      <TopBar csrf={csrf} live here="overview" />
      {flash && (
        <div class="flash-wrap">
          <FlashBox flash={flash} />
        </div>
      )}
      <main id="main" data-testid="main">
        <Overview d={d} h={h} />
      </main>
      <script nonce={nonce} dangerouslySetInnerHTML={{ __html: REFRESH_SCRIPT }} />
    </body>
  </Shell>
);
