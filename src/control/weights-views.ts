// What the operator is shown of weights, as pure functions of what the head node knows: per
// revision the nodes holding it, fetching it or not (from the weights plan's status and the
// nodes' reports), the catalog models that use it, the Weights line of the summary (what moves
// now), and the transfer events a node's new report calls for against its previous one.

import type { WeightsHeld, WeightsManifest, TransferReport } from "../protocol/weights";
import type { WeightsInFlight, WeightsNodeView, WeightsRowView } from "../protocol/weights-admin";
import type { WeightsStatus } from "./transfers";

const byString = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const revKey = (repo: string, revision: string) => `${repo}@${revision}`;

export interface WeightsViewInput {
  nodes: readonly { name: string; fabrics: readonly string[] }[];
  /** Catalog models with an hf:// source pinned to a commit. */
  models: readonly { name: string; repo: string; revision: string }[];
  /** The latest plan's status (none before the first plan). */
  status: readonly WeightsStatus[];
  /** Each node's last report of what it holds. */
  held: ReadonlyMap<string, readonly WeightsHeld[]>;
  manifest(repo: string, revision: string): WeightsManifest | undefined;
  /** node\0repo@revision of each `weights pull`. */
  seeded: ReadonlySet<string>;
}

/** One node's copy of a revision, from its plan status, else its report, else absent. */
function nodeView(i: WeightsViewInput, node: { name: string; fabrics: readonly string[] }, repo: string, revision: string, st: WeightsStatus | undefined): WeightsNodeView {
  const m = i.manifest(repo, revision);
  const size = m === undefined ? undefined : m.files.reduce((n, f) => n + f.size, 0);
  const held = i.held.get(node.name)?.find((h) => h.repo === repo && h.revision === revision);
  const whole = m !== undefined && held !== undefined && m.files.every((f) => held.files.includes(f.path));
  const base = { node: node.name, fabrics: [...node.fabrics], seeded: i.seeded.has(`${node.name}\u0000${revKey(repo, revision)}`) };
  const percent = (bytes: number) => (size === undefined || size === 0 ? null : Math.min(100, Math.floor((bytes * 100) / size)));
  if (st !== undefined && !(st.state === "partial" && whole)) {
    const bytes = st.bytes_present + (st.fetching?.bytes_done ?? 0);
    return { ...base, state: st.state, percent: st.state === "present" ? 100 : percent(bytes), bytes_present: st.bytes_present, rate: st.fetching?.rate ?? null, from: st.fetching?.from ?? [], estimate_seconds: st.estimate_seconds, reason: st.reason };
  }
  if (held !== undefined) {
    // Without the file list (a revision no model names now, not listed since the start) what the node holds counts as present.
    const present = whole || m === undefined;
    return { ...base, state: present ? "present" : "partial", percent: present ? 100 : percent(held.bytes), bytes_present: held.bytes, rate: null, from: [], estimate_seconds: null, reason: null };
  }
  return { ...base, state: "absent", percent: size === undefined ? null : 0, bytes_present: 0, rate: null, from: [], estimate_seconds: null, reason: null };
}

/** Every revision a model names, the plan knows or a node holds; per revision every node. */
export function weightsRows(i: WeightsViewInput): WeightsRowView[] {
  const revs = new Map<string, { repo: string; revision: string }>();
  const add = (repo: string, revision: string) => revs.set(revKey(repo, revision), { repo, revision });
  for (const m of i.models) add(m.repo, m.revision);
  for (const s of i.status) add(s.repo, s.revision);
  for (const hs of i.held.values()) for (const h of hs) add(h.repo, h.revision);
  const nodes = [...i.nodes].sort((a, b) => byString(a.name, b.name));
  const rows: WeightsRowView[] = [];
  for (const [k, { repo, revision }] of revs) {
    const views = nodes.map((n) => nodeView(i, n, repo, revision, i.status.find((s) => s.node === n.name && s.repo === repo && s.revision === revision)));
    const m = i.manifest(repo, revision);
    let lastUsed: number | null = null;
    for (const hs of i.held.values()) for (const h of hs) if (revKey(h.repo, h.revision) === k && h.last_used !== null) lastUsed = Math.max(lastUsed ?? 0, h.last_used);
    const fabrics = new Set<string>();
    for (const v of views) if (v.state === "present") for (const f of v.fabrics) fabrics.add(f);
    rows.push({
      models: i.models.filter((x) => x.repo === repo && x.revision === revision).map((x) => x.name).sort(byString),
      repo,
      revision,
      size: m === undefined ? null : m.files.reduce((n, f) => n + f.size, 0),
      fabrics: [...fabrics].sort(byString),
      last_used: lastUsed === null ? null : new Date(lastUsed).toISOString(),
      nodes: views,
    });
  }
  return rows.sort((a, b) => byString(a.models[0] ?? "\uffff", b.models[0] ?? "\uffff") || byString(a.repo, b.repo) || byString(a.revision, b.revision));
}

/** The summary's Weights line from the plan's status: null when nothing moves. */
export function weightsInFlight(status: readonly WeightsStatus[]): WeightsInFlight | null {
  let files = 0;
  let done = 0;
  let total = 0;
  let rate = 0;
  let slowest: { seconds: number | null; node: string; repo: string; revision: string } | undefined;
  for (const s of status) {
    if (s.fetching === null) continue;
    files += s.fetching.files;
    done += s.fetching.bytes_done;
    total += s.fetching.bytes_total;
    rate += s.fetching.rate;
    const slower = slowest === undefined || (slowest.seconds !== null && (s.estimate_seconds === null || s.estimate_seconds > slowest.seconds));
    if (slower) slowest = { seconds: s.estimate_seconds, node: s.node, repo: s.repo, revision: s.revision };
  }
  if (files === 0) return null;
  return { files, bytes_done: done, bytes_total: total, rate, slowest_seconds: slowest?.seconds ?? null, slowest: slowest === undefined ? null : { node: slowest.node, repo: slowest.repo, revision: slowest.revision } };
}

export interface TransferEvent {
  kind: "weights.fetching" | "weights.fetched" | "weights.failed";
  repo: string;
  revision: string;
  message: string;
}

interface Report {
  held: readonly WeightsHeld[];
  transfers: readonly TransferReport[];
}

/**
 * The events a node's new report calls for, per revision (not per file): its first transfer
 * (fetching, from where), the revision whole where it was not (fetched), and a transfer's
 * failure that the previous report did not show (failed, with the file and the reason).
 */
export function transferEvents(node: string, before: Report | undefined, after: Report, manifest: (repo: string, revision: string) => WeightsManifest | undefined): TransferEvent[] {
  const out: TransferEvent[] = [];
  const short = (repo: string, revision: string) => `${repo}@${revision.slice(0, 12)}`;
  const moving = (r: Report | undefined, k: string) => r?.transfers.some((t) => revKey(t.repo, t.revision) === k) === true;
  const whole = (r: Report | undefined, repo: string, revision: string) => {
    const m = manifest(repo, revision);
    const h = r?.held.find((x) => x.repo === repo && x.revision === revision);
    return m !== undefined && h !== undefined && m.files.every((f) => h.files.includes(f.path));
  };
  const revs = new Map<string, { repo: string; revision: string }>();
  for (const t of after.transfers) revs.set(revKey(t.repo, t.revision), t);
  for (const h of after.held) revs.set(revKey(h.repo, h.revision), h);
  for (const [k, { repo, revision }] of revs) {
    const was = whole(before, repo, revision);
    const heldAfter = after.held.find((h) => revKey(h.repo, h.revision) === k);
    const nowWhole = whole(after, repo, revision);
    const touched = (r: Report | undefined) => moving(r, k) || r?.held.some((h) => revKey(h.repo, h.revision) === k) === true;
    // llmgw's doing: files moving, a part of the revision, or the whole of one it fetched (an operator's folder is neither).
    const ours = moving(after, k) || (heldAfter !== undefined && (!nowWhole || heldAfter.fetched));
    if (before !== undefined && !was && ours && !touched(before)) {
      const from = [...new Set(after.transfers.filter((t) => revKey(t.repo, t.revision) === k).map((t) => t.from))].sort(byString);
      // A copy may start and end between two heartbeats: then only its end is seen, and where it came from is not.
      out.push({ kind: "weights.fetching", repo, revision, message: `${node} fetching ${short(repo, revision)}${from.length > 0 ? ` from ${from.join(", ")}` : ""}` });
    }
    if (before !== undefined && !was && nowWhole && (touched(before) || ours)) {
      out.push({ kind: "weights.fetched", repo, revision, message: `${node} holds ${short(repo, revision)} whole (${heldAfter?.bytes ?? 0} bytes, verified)` });
    }
    for (const t of after.transfers) {
      if (revKey(t.repo, t.revision) !== k || t.error === null) continue;
      const prev = before?.transfers.find((p) => p.repo === t.repo && p.revision === t.revision && p.path === t.path);
      if (prev?.error === t.error) continue;
      out.push({ kind: "weights.failed", repo, revision, message: `${node} failed to fetch ${t.path} of ${short(repo, revision)} from ${t.from}: ${t.error}` });
    }
  }
  return out;
}
