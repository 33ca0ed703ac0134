// `llmgw status`: the fleet in one screen. Aggregates, not a per-node list, so it reads the
// same at 4 nodes and at 200: capacity per GPU class, whole free nodes per fabric, replica and
// model counts, and the three lists that need a person: unplaceable, parked, idle.

import type { Summary } from "../protocol/views";
import { CLIENT_FLAGS, OUTPUT_FLAG, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { weightsLine } from "./weights";
import { WATCH_FLAGS, runWatched, watchSettings } from "./watch";
import { safeDeep } from "../lib/text";
import { bytes, human, oneLine, plural } from "../lib/format";
import { type Style, detectStyle, fitTable, fitText, paint, terminalWidth, usageBar, wrap } from "./render";

/**
 * "2 unreachable (gpu-07, gpu-09)": the nodes in a state that needs a person, the first few by
 * name (all the summary names with -o wide), then how many more.
 */
function namedCount(count: number, what: string, names: readonly string[] | undefined, wide: boolean): string {
  if (!names || names.length === 0) return `${count} ${what}`;
  const shown = names.slice(0, wide ? names.length : NAMED);
  const more = count - shown.length;
  return `${count} ${what} (${shown.join(", ")}${more > 0 ? `, and ${more} more` : ""})`;
}

/**
 * The status screen. `width` is the terminal's: tables narrow their free text and prose wraps to
 * fit it (none given: as wide as it is). `wide` shows every name and cuts nothing.
 */
export function renderStatus(summary: Summary, style: Style, opts: { wide?: boolean; width?: number } = {}): string {
  // Every string in the summary came from a node, an engine or the catalog.
  const s = safeDeep(summary);
  const out: string[] = [];
  const n = s.nodes;
  const names = s.node_names;
  const wide = opts.wide === true;
  const W = wide ? Number.POSITIVE_INFINITY : (opts.width ?? Number.POSITIVE_INFINITY);
  /** A line of prose, wrapped to the width; its continuation lines start at column `hang`. */
  const say = (line: string, hang: number) => out.push(...wrap(line, W, hang));
  let cut = false;
  const tableOf = (...args: Parameters<typeof fitTable>) => {
    const t = fitTable(args[0], args[1], { ...args[2], width: W });
    cut ||= t.cut;
    return t.text;
  };
  const nodeParts = [`${n.ready} ready`];
  if (n.cordoned) nodeParts.push(paint(style, "yellow", namedCount(n.cordoned, "cordoned", names?.cordoned, wide)));
  if (n.draining) nodeParts.push(paint(style, "yellow", namedCount(n.draining, "draining", names?.draining, wide)));
  if (n.unreachable) nodeParts.push(paint(style, "red", namedCount(n.unreachable, "unreachable", names?.unreachable, wide)));
  if (n.pending) nodeParts.push(paint(style, "yellow", `${namedCount(n.pending, "pending approval", names?.pending, wide)}: llmgw nodes approve NAME`));
  out.push(`${paint(style, "bold", "llmgw")} ${s.version}`);
  for (const l of haLines(s, style)) say(l, 16);
  say(`Nodes     ${plural(n.total, "node")}: ${nodeParts.join(", ")}`, 10);
  if (s.router?.open)
    say(paint(style, "yellow", `Router    open, no API key required: anyone who reaches ${s.router.listen} can use every model (serve --require-api-key)`), 10);
  for (const l of discoveryLines(s, style, wide)) say(l, 12);
  const head = headLine(s);
  if (head) say(paint(style, "yellow", head), 10);

  out.push("", paint(style, "bold", "GPUs"));
  if (s.gpus.length === 0) out.push("  none reported yet");
  else {
    // In a narrow terminal the bars give way (down to 8 cells) before the class names do.
    const numbers = ["USED", "FREE", "UNHEALTHY", "TOTAL"].map((h, i) => Math.max(h.length, ...s.gpus.map((g) => String([g.used, g.total - g.used - g.unhealthy, g.unhealthy, g.total][i]).length)));
    const rest = 2 + Math.max(5, ...s.gpus.map((g) => g.class.length)) + numbers.reduce((a, x) => a + x, 0) + 2 * 5 + 2;
    const barCells = Number.isFinite(W) ? Math.max(8, Math.min(24, W - rest)) : 24;
    const legend = style.color
      ? `${paint(style, "cyan", "█")} used  ${paint(style, "red", "█")} unhealthy  ${paint(style, "gray", "░")} free`
      : "# used  x unhealthy  . free";
    out.push(
      tableOf(
        ["CLASS", "USAGE", "USED", "FREE", "UNHEALTHY", "TOTAL"],
        s.gpus.map((g) => {
          const free = g.total - g.used - g.unhealthy;
          return [{ text: g.class }, usageBar(style, g.used, g.unhealthy, g.total, barCells), String(g.used), String(free), g.unhealthy ? paint(style, "red", String(g.unhealthy)) : "0", String(g.total)];
        }),
        { right: [2, 3, 4, 5], indent: "  " },
      ),
    );
    out.push(`  ${legend}`);
  }

  if (s.fabrics.length > 0) {
    out.push("");
    say(paint(style, "bold", "Fabrics") + "  (a multi-node replica needs whole free nodes in one fabric)", 2);
    out.push(
      tableOf(
        ["FABRIC", "NODES", "WHOLE FREE", "WITH WEIGHTS", "MODELS PRESENT"],
        s.fabrics.map((f) => [{ text: f.fabric }, String(f.nodes), String(f.largest_free_block), String(f.nodes_with_weights), String(f.models_present)]),
        { right: [1, 2, 3, 4], indent: "  " },
      ),
    );
  }

  const r = s.replicas;
  const rParts = [`${r.ready} ready`, `${r.starting} starting`];
  if (r.draining) rParts.push(`${r.draining} draining`);
  if (r.failed) rParts.push(paint(style, "red", `${r.failed} failed`));
  const m = s.models;
  out.push("");
  say(`Replicas  ${rParts.join(" · ")}`, 10);
  const weights = weightsLine(s.weights);
  if (weights !== undefined) say(weights, 10);
  say(`Models    ${m.total} total · ${m.satisfied} satisfied · ${m.short ? paint(style, "yellow", `${m.short} short`) : "0 short"}`, 10);

  const attention = [...haAttention(s), ...versionAttention(s), ...admissionAttention(s), ...keptGpusAttention(s), ...drainAttention(s, wide)];
  if (attention.length > 0) {
    out.push("", paint(style, "bold", paint(style, "red", "Attention")));
    for (const a of attention) say(`  ${a}`, 4);
  }
  if (s.unplaceable.length > 0) {
    out.push("", paint(style, "bold", paint(style, "red", "Unplaceable")));
    for (const name of s.unplaceable) {
      const reason = s.unplaceable_reasons[name];
      if (!reason) {
        out.push(`  ${name}`);
        continue;
      }
      const flat = oneLine(reason, Number.POSITIVE_INFINITY);
      const shown = fitText(flat, 4 + name.length, W);
      cut ||= shown !== flat;
      out.push(`  ${name}  ${paint(style, "dim", shown)}`);
    }
  }
  if (s.parked.length > 0) {
    out.push("");
    say(paint(style, "bold", paint(style, "red", "Parked")) + "  (not retried until `llmgw models unpark NAME` or a catalog change)", 2);
    out.push(tableOf(["MODEL", "FAILURES", "LAST ERROR"], s.parked.map((p) => [p.model, String(p.failures), { text: oneLine(p.reason, Number.POSITIVE_INFINITY) }]), { right: [1], indent: "  " }));
  }
  if (s.idle_replicas.length > 0) {
    const gpus = s.idle_replicas.reduce((a, x) => a + x.gpus, 0);
    out.push("");
    say(paint(style, "bold", "Idle") + `  (ready, unasked-for 10m or more: ${plural(gpus, "GPU")} to reclaim)`, 2);
    const shown = s.idle_replicas.slice(0, 20);
    out.push(tableOf(["REPLICA", "MODEL", "IDLE", "GPUS"], shown.map((i) => [i.id, i.model, human(i.idle_seconds), String(i.gpus)]), { right: [2, 3], indent: "  " }));
    if (s.idle_replicas.length > shown.length) out.push(`  … and ${s.idle_replicas.length - shown.length} more (llmgw replicas)`);
  }
  if (s.evictions.length > 0) {
    out.push("");
    say(paint(style, "bold", "Evicted") + "  (last hour: idle replicas stopped to make room for on-demand models)", 2);
    out.push(tableOf(["REPLICA", "MODEL", "WAS IDLE", "FOR", "AT"], s.evictions.map((e) => [e.replica, e.model, human(e.idle_seconds), e.for_model, e.at.slice(11, 19)]), { indent: "  " }));
  }
  if (cut) out.push("", ...wrap(paint(style, "dim", `Reasons cut to fit ${W} columns: llmgw status -o wide shows them whole.`), W, 2));
  return out.join("\n") + "\n";
}

/**
 * A replica further behind than this is worth a look: Patroni's default
 * maximum_lag_on_failover, past which it would not fail over to that member.
 */
export const STORE_LAG_WARN = 1024 * 1024;

/** Patroni 3.0.2 says a healthy replica is "running", later versions "streaming". */
const HEALTHY_STORE_STATES = new Set(["running", "streaming"]);
const STORE_LEADER_ROLES = new Set(["leader", "standby_leader", "master", "primary"]);

function storeLeader(s: Summary) {
  return s.store.find((m) => STORE_LEADER_ROLES.has(m.role) && HEALTHY_STORE_STATES.has(m.state));
}

/**
 * Above the fleet, only with several control planes or a replicated store: who leads, who
 * stands by, the floating address; the store's leader and replicas with their lag. A single
 * head node on SQLite shows neither line.
 */
function haLines(s: Summary, style: Style): string[] {
  const lines: string[] = [];
  const cp = s.control_planes ?? {};
  const members = cp.members ?? [];
  if (members.length > 0 || cp.floating) {
    const parts: string[] = [];
    const leaders = members.filter((m) => m.state === "leading");
    const standing = members.filter((m) => m.state === "standing by");
    const silent = members.filter((m) => m.state === "not answering");
    const other = members.filter((m) => !["leading", "standing by", "not answering"].includes(m.state));
    const me = (m: { name: string; this?: boolean }) => `${m.name}${m.this ? " (this one)" : ""}`;
    if (leaders.length === 1) parts.push(`${me(leaders[0]!)} leads`);
    else if (leaders.length === 0) parts.push(paint(style, "red", "none leads"));
    else parts.push(paint(style, "red", `${leaders.map(me).join(", ")} all say they lead`));
    if (standing.length > 0) parts.push(`${standing.length} standing by (${standing.map(me).join(", ")})`);
    if (silent.length > 0) parts.push(paint(style, "red", `${silent.length} not answering (${silent.map((m) => m.name).join(", ")})`));
    for (const m of other) parts.push(paint(style, "yellow", `${me(m)} ${m.state}`));
    if (cp.floating) parts.push(cp.floating_up ? `floating ${cp.floating} up` : paint(style, "red", `floating ${cp.floating} down`));
    lines.push(`Control planes  ${parts.join(" · ")}`);
  }
  if (s.store.length > 0) {
    const leader = storeLeader(s);
    const parts = [leader ? `${leader.name} leads` : paint(style, "red", "no leader")];
    for (const m of s.store) {
      if (m === leader) continue;
      const healthy = HEALTHY_STORE_STATES.has(m.state);
      const lag = STORE_LEADER_ROLES.has(m.role) ? "" : m.lag < 0 ? ", lag unknown" : `, ${bytes(m.lag)} behind`;
      const text = `${m.name} ${m.role.replace(/_/g, " ")} ${m.state || "state unknown"}${lag}`;
      parts.push(healthy && m.lag >= 0 && m.lag <= STORE_LAG_WARN && !STORE_LEADER_ROLES.has(m.role) ? text : paint(style, healthy && !STORE_LEADER_ROLES.has(m.role) ? "yellow" : "red", text));
    }
    lines.push(`Store           ${parts.join(" · ")}`);
  }
  if (s.store_error) lines.push(paint(style, "red", `Store           ${oneLine(s.store_error, 300)}`));
  return lines;
}

/** What needs a person in the control planes and the store, one sentence each. */
export function haAttention(s: Summary): string[] {
  const out: string[] = [];
  const cp = s.control_planes ?? {};
  const members = cp.members ?? [];
  if (members.length > 0 && !members.some((m) => m.state === "leading")) out.push("no control plane leads: nothing reconciles or places replicas until one takes the lease");
  for (const m of members) if (m.state === "not answering") out.push(`control plane ${m.name} (${m.address}) is not answering`);
  if (cp.floating && !cp.floating_up) out.push(`the floating address ${cp.floating} does not answer as the leader: check keepalived on the head nodes`);
  if (s.store_error) out.push(`cannot read the store's members: ${oneLine(s.store_error, 300)}`);
  if (s.store.length > 0) {
    if (!storeLeader(s)) out.push(`the store has no running leader (${s.store.map((m) => `${m.name} ${m.role} ${m.state || "unknown"}`).join(", ")}): writes wait until Patroni promotes one`);
    for (const m of s.store) {
      if (STORE_LEADER_ROLES.has(m.role)) continue;
      if (!HEALTHY_STORE_STATES.has(m.state)) out.push(`store member ${m.name} is ${m.state || "in an unknown state"}, not replicating`);
      else if (m.lag < 0) out.push(`store member ${m.name}: lag unknown`);
      else if (m.lag > STORE_LAG_WARN) out.push(`store member ${m.name} is ${bytes(m.lag)} behind the leader`);
    }
  }
  return out;
}

/**
 * Mixed versions, one line each for agents and control planes: "agents on 2 versions: 0.2.0
 * (protocol 2) ×3, 0.1.0 (protocol 1) ×1". An upgrade under way shows here until it is done; one
 * left half done is what this line is for.
 */
export function versionAttention(s: Pick<Summary, "agent_versions" | "control_planes">): string[] {
  const out: string[] = [];
  const release = (version: string | undefined, protocol: number | undefined) => `${version ?? "unknown"} (protocol ${protocol ?? 1})`;
  const agents = s.agent_versions ?? [];
  if (agents.length > 1) out.push(`agents on ${agents.length} versions: ${agents.map((a) => `${release(a.version, a.protocol)} ×${a.nodes}`).join(", ")}: finish the upgrade (README, Upgrading)`);
  const members = s.control_planes?.members ?? [];
  const planes = new Map<string, number>();
  for (const m of members) planes.set(release(m.version, m.protocol), (planes.get(release(m.version, m.protocol)) ?? 0) + 1);
  if (planes.size > 1) out.push(`control planes on ${planes.size} versions: ${[...planes].map(([r, n]) => `${r} ×${n}`).join(", ")}: upgrade the standbys first, the leader last`);
  for (const m of members) if (m.barred !== undefined) out.push(`control plane ${m.name} stands by and will not lead: ${oneLine(m.barred, 400)}`);
  return out;
}

/** Stuck drains listed one a line before the rest are counted (all with -o wide). */
const DRAIN_LINES = 5;

/**
 * "drain of gpu-03 cannot finish: llama-70b has nowhere else to go now: …", one line per drain
 * that cannot finish, never-ending ones first; a drain that only takes time is not listed.
 */
export function drainAttention(s: Pick<Summary, "stuck_drains">, wide = false): string[] {
  const stuck = [...(s.stuck_drains ?? [])].sort((a, b) => Number(b.never) - Number(a.never));
  const shown = wide ? stuck : stuck.slice(0, DRAIN_LINES);
  const out = shown.map((d) => `drain of ${d.node} ${d.never ? "can never finish" : "cannot finish"} (${plural(d.remaining, "replica")} left): ${oneLine(d.reason, wide ? Number.POSITIVE_INFINITY : 300)}`);
  if (stuck.length > shown.length) out.push(`… and ${stuck.length - shown.length} more stuck drains (llmgw status -o wide)`);
  return out;
}

/** A head node beyond loopback without --approve-nodes: the join token alone gets a node work. */
export function admissionAttention(s: Pick<Summary, "node_admission">): string[] {
  const a = s.node_admission;
  if (!a?.open) return [];
  return [`nodes join without approval: anyone who holds the join token and reaches ${a.listen} is given replicas, prompts and the catalog's env (serve --approve-nodes)`];
}

/**
 * "GPU discovery fails on gpu-07: its 8 GPUs are kept, counted unhealthy, …: nvidia-smi exited
 * with status 9: …", one line per node whose discovery finds no GPUs and that had some.
 */
/** How the head node words a kept GPU's reason (control/gpu-health.ts). */
const KEPT_REASON = "GPU discovery fails: ";

export function keptGpusAttention(s: Pick<Summary, "gpu_discovery">): string[] {
  return (s.gpu_discovery ?? [])
    .filter((p) => p.last_known)
    .map((p) => `GPU discovery fails on ${p.node}: its ${plural(p.gpus, "GPU")} last reported are counted unhealthy until it answers again (or llmgw nodes delete ${p.node}): ${oneLine(p.error.replace(/: this node reports no GPUs$/, ""), 300)}`);
}

/** Nodes named per line before the rest are counted. */
const NAMED = 5;

/**
 * Under the node totals: nodes whose GPU discovery failed (a ready node with no GPUs looks
 * healthy otherwise) and unhealthy GPUs by reason. Absent fields (an older server) show nothing.
 */
function discoveryLines(s: Summary, style: Style, wide: boolean): string[] {
  const lines: string[] = [];
  // Nodes whose GPUs are kept from before discovery failed are under Attention (keptGpusAttention).
  const problems = (s.gpu_discovery ?? []).filter((p) => !p.last_known);
  for (const [none, what] of [
    [true, "reports no GPUs"],
    [false, "reports incomplete GPU discovery"],
  ] as const) {
    const group = problems.filter((p) => (p.gpus === 0) === none);
    if (group.length === 0) continue;
    const verb = group.length === 1 ? what : what.replace("reports", "report");
    // The first node's own words, then who else; the agent's "this node reports no GPUs" tail is said already.
    const first = group[0]!;
    const words = oneLine(first.error.replace(/: this node reports no GPUs$/, ""), wide ? Number.POSITIVE_INFINITY : 200);
    const others = group.length > 1 ? ` (also ${group.slice(1, NAMED).map((p) => p.node).join(", ")}${group.length > NAMED ? ", …" : ""})` : "";
    lines.push(paint(style, none ? "red" : "yellow", `          ${plural(group.length, "node")} ${verb}: ${first.node}: ${words}${others}`));
  }
  // Kept GPUs' reason is their node's discovery error, said under Attention already.
  const kept = new Set((s.gpu_discovery ?? []).filter((p) => p.last_known).map((p) => p.node));
  for (const u of s.unhealthy_gpus ?? []) {
    if (u.reason.startsWith(KEPT_REASON) && u.nodes.every((n) => kept.has(n))) continue;
    const nodes = `${u.nodes.join(", ")}${u.gpus > u.nodes.length && u.nodes.length >= NAMED ? ", …" : ""}`;
    lines.push(paint(style, "yellow", `          ${plural(u.gpus, "unhealthy GPU")}: ${oneLine(u.reason, wide ? Number.POSITIVE_INFINITY : 160)} (${nodes})`));
  }
  return lines;
}

export const command: Command = {
  name: "status",
  summary: "Show the fleet summary: capacity, fabrics, replicas, models, and what needs attention.",
  usage: "llmgw status [-o table|wide|json] [-w] [--server URL] [--token TOKEN]",
  flags: { ...OUTPUT_FLAG, ...WATCH_FLAGS, ...CLIENT_FLAGS },
  details: `Nodes that need a person (unreachable, cordoned, draining, pending) are named, the first ${NAMED} of each; -o wide names up to 20. Drains that cannot finish (a model with nowhere else to go, now or ever) are listed under Attention with why; one that only takes time is not. The view fits the terminal's width (COLUMNS, else the terminal's, else 80 when piped): long reasons are cut with "…" and sentences wrap; -o wide cuts nothing. -w keeps the screen refreshed.`,
  examples: ["./llmgw status", "llmgw status -w", "llmgw status -o wide", "llmgw status -o json | jq .gpus", "llmgw status --server http://head:8001 --token $TOKEN"],
  async run({ flags }) {
    const format = outputFormat(flags, ["table", "wide", "json"]);
    const client = resolveClient(flags);
    const w = watchSettings(flags, format);
    const style = detectStyle();
    await runWatched(async () => {
      const s = await client.get<Summary>("/api/v1/summary");
      return format === "json" ? `${JSON.stringify(s, null, 2)}\n` : renderStatus(s, style, { wide: format === "wide", width: terminalWidth() });
    }, { ...w, title: "status" });
  },
};

/** "head node behind by 4.2 s: heartbeats slowed to 10 s", only while it is behind. */
export function headLine(s: Pick<Summary, "head">): string | undefined {
  const h = s.head;
  if (!h || h.behind_ms <= 0) return undefined;
  const secs = (ms: number) => `${Number((ms / 1000).toFixed(1))} s`;
  const slowed = h.heartbeat_interval_ms > h.configured_interval_ms ? `: heartbeats slowed to ${secs(h.heartbeat_interval_ms)}` : "";
  return `Head      head node behind by ${secs(h.behind_ms)}${slowed}`;
}
