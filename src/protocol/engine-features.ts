// What an engine's version decides about where a replica can run, known to both sides: the agent
// chooses its command lines by these bounds (agent/engines.ts), and the head node keeps a profile
// off the nodes whose reported version cannot serve it, and says so before anything about
// capacity (placement, capacity, explain). A version older than a bound can never serve such a
// profile, however long one waits: only an upgrade, or another profile, changes that.

import { compareVersions } from "../lib/versions";
import type { Engine } from "./catalog";

/** Engine names as people write them. */
export const ENGINE_NAMES = { vllm: "vLLM", sglang: "SGLang", "llama.cpp": "llama.cpp", fake: "the fake engine" } as const satisfies Record<Engine, string>;

/**
 * First release that serves one replica across nodes the way llmgw starts it, per engine that
 * has such a bound (PEP 440). vLLM: multi-node without Ray, --nnodes/--node-rank/--master-addr/
 * --master-port and --headless, came with vLLM PR #23691 ("[V1] Support MP Executor for multi
 * node distributed inference", late 2025) and were documented for the mp backend in #30509 (Dec
 * 2025); 0.10.x and 0.11.x reject them at argument parsing. 0.12.0 is the first release taken to
 * have them (the conservative reading: an older one needs a Ray cluster, which llmgw does not
 * set up). SGLang has served --nnodes in every release llmgw supports; llama.cpp never does (the
 * catalog refuses such a profile).
 */
export const MULTI_NODE_SINCE: Readonly<Partial<Record<Engine, string>>> = { vllm: "0.12.0" };

/** What a version lacks for a profile: the feature, and the release from which on engines have it. */
export interface VersionLack {
  feature: string;
  since: string;
}

/**
 * What `version` of `engine` lacks to serve a profile of this shape, or undefined when it lacks
 * nothing. An unknown version (not reported, not installed) or one that cannot be read lacks
 * nothing here: not knowing is never a reason to keep a replica off a node (the agent refuses,
 * with its reason, what it cannot start).
 */
export function versionLack(engine: string, version: string | null | undefined, shape: { nodes: number }): VersionLack | undefined {
  if (version === null || version === undefined || shape.nodes <= 1) return undefined;
  const since = MULTI_NODE_SINCE[engine as Engine];
  if (since === undefined) return undefined;
  const c = compareVersions(version, since);
  if (c === null || c >= 0) return undefined;
  return { feature: "multi-node serving", since };
}

/** Nodes named per version in versionLackText; the rest are counted. */
const NAMED = 5;

/**
 * "vLLM 0.10.2 on node-a, node-b has no multi-node serving (needs 0.12 or newer)": the nodes
 * grouped by version, oldest first. `nodes` all lack `lack` for `engine`.
 */
export function versionLackText(engine: string, nodes: readonly { node: string; version: string }[], lack: VersionLack): string {
  const byVersion = new Map<string, string[]>();
  for (const n of nodes) {
    let l = byVersion.get(n.version);
    if (!l) byVersion.set(n.version, (l = []));
    l.push(n.node);
  }
  const name = ENGINE_NAMES[engine as Engine] ?? engine;
  const groups = [...byVersion].sort(([a], [b]) => compareVersions(a, b) ?? (a < b ? -1 : 1));
  const parts = groups.map(([version, names]) => {
    const sorted = [...names].sort();
    const more = sorted.length - NAMED;
    return `${name} ${version} on ${sorted.slice(0, NAMED).join(", ")}${more > 0 ? `, and ${more} more` : ""}`;
  });
  return `${parts.join(" and ")} ${parts.length === 1 ? "has" : "have"} ${lackPhrase(lack)}`;
}

/** "no multi-node serving (needs 0.12 or newer)". */
export function lackPhrase(lack: VersionLack): string {
  return `no ${lack.feature} (needs ${shortVersion(lack.since)} or newer)`;
}

/** "0.12.0" → "0.12": the release line, as people say it. */
function shortVersion(v: string): string {
  return v.replace(/(\.\d+)\.0$/, "$1");
}
