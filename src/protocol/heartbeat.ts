// The agent ↔ control-plane contract: what a node agent reports in each heartbeat and what
// the control plane answers (the replicas the node should run). Both sides parse with these
// schemas, so a change here is a protocol change.

import { z } from "zod";
import { sha256hex } from "../lib/digest";
import { CATALOG_LIMITS, Engine, Profile } from "./catalog";
import { Labels, Name, NodeAddress, Printable, PrintableMultiline, SegmentName } from "./common";
import { EngineEnv } from "./engine-env";
import { DiskReport, FetchOrder, LocalWeights, TransferReport, WEIGHTS_LIMITS, WeightsHeld, WeightsManifest } from "./weights";
import { WeightsRemoval, WeightsRemoved } from "./weights-admin";

/** Limits that keep one heartbeat from costing the head node more than a fleet's worth. */
export const HEARTBEAT_LIMITS = { gpus: 256, models: 4096, replicas: 1024, fabrics: 16 } as const;

/** Longest `reason` a GPU report carries, and longest node-wide discovery error. */
export const REASON_MAX = 256;
export const DISCOVERY_ERROR_MAX = 1024;

/**
 * Longest engine error texts a heartbeat may carry: why a replica failed, and why an
 * engine's version is unknown. These are what agents send and the head node accepts (a longer
 * one fails the whole heartbeat, so they never shrink); events show at most
 * ENGINE_ERROR_MAX (lib/format.ts) of them, flattened to one line.
 */
export const REPLICA_ERROR_MAX = 8192;
export const ENGINE_PROBE_ERROR_MAX = 512;

/**
 * One schedulable device. A card in MIG mode is reported as its GPU instances, each with
 * `parent` set to the card's uuid and a class of its own (e.g. "A100-80GB/3g.40gb"), never as
 * the card itself. A GPU instance split into compute instances is one memory domain: its
 * largest compute instance stands for it (class of the GPU instance, e.g. "H200-141GB/3g.71gb"),
 * and each other compute instance is reported with its own class ("H200-141GB/1c.3g.71gb") and
 * `parent` set to that device's uuid, because it shares that device's memory: placement never
 * puts a replica beside one that holds the GPU instance, and totals count the memory once.
 * A card in MIG mode with no instances is reported as the card itself, unhealthy, with a reason.
 * `index` is the agent's number for the device on this node, unique per node; shards name GPUs
 * by it.
 */
export const GpuReport = z.object({
  index: z.number().int().min(0).max(65535),
  uuid: Printable(128).min(1),
  name: Printable(256),
  class: Printable(128).min(1),
  memory_mib: z.number().int().min(0).max(16 * 1024 * 1024),
  healthy: z.boolean(),
  parent: Printable(128).min(1).nullable().default(null),
  /** Why the device is unhealthy (or cannot be scheduled), quoting nvidia-smi where it can. */
  reason: PrintableMultiline(REASON_MAX).nullable().optional(),
  /**
   * nvidia-smi's own index of the physical card (a MIG instance carries its card's), which is
   * what CUDA_VISIBLE_DEVICES means by a number under CUDA_DEVICE_ORDER=PCI_BUS_ID; absent when
   * unknown (simulated GPUs, older agents).
   */
  smi_index: z.number().int().min(0).max(65535).nullable().optional(),
  /** The card's PCI bus id as nvidia-smi prints it (e.g. 00000000:18:00.0); absent when unknown. */
  pci_bus_id: Printable(32).nullable().optional(),
});
export type GpuReport = z.infer<typeof GpuReport>;

/**
 * One inference engine as this node can run it: the version the agent found (`vllm --version`,
 * SGLang's `__version__`, `llama-server --version`), or null with the reason it found none.
 */
export const EngineReport = z.object({
  engine: Engine,
  version: Printable(64).min(1).nullable(),
  /** Why no version is known (not installed, the command failed), null when one is. */
  error: PrintableMultiline(ENGINE_PROBE_ERROR_MAX).nullable().default(null),
});
export type EngineReport = z.infer<typeof EngineReport>;

/** A Hugging Face commit hash: what a catalog `revision` and a snapshot folder are named by. */
export const Revision = z.string().regex(/^[0-9a-f]{40}$/, "must be a 40-character lowercase hex commit hash");

/** "fetching": placed on a node without its weights, which it fetches before the engine starts. */
export const ReplicaRunState = z.enum(["fetching", "starting", "ready", "failed", "stopped"]);
export type ReplicaRunState = z.infer<typeof ReplicaRunState>;

/** What the agent knows about one replica process it runs (or ran). */
export const ReplicaReport = z.object({
  id: Printable(128).min(1),
  state: ReplicaRunState,
  port: z.number().int().min(0).max(65535).nullable().default(null),
  /**
   * Why it failed: how the engine ended and the line of its output that says why (the rest is its
   * log, `llmgw logs --previous`). Older agents also sent the last lines. Neutralised rather than refused (see
   * PrintableMultiline): the agent should send it clean, but an engine's escape codes must not
   * cost the node its heartbeat.
   */
  error: PrintableMultiline(REPLICA_ERROR_MAX).nullable().default(null),
  /** While fetching: the revision's bytes present and in all, the rate (bytes/s), and where they come from ("hub" or nodes). */
  fetch: z
    .object({ done: z.number().int().nonnegative(), total: z.number().int().nonnegative(), rate: z.number().nonnegative(), from: Printable(256), error: PrintableMultiline(512).optional() })
    .optional(),
});
export type ReplicaReport = z.infer<typeof ReplicaReport>;

/** A node credential: what the head node issues (and a joining agent may propose) — `llmgw_node_` and 32 random bytes, base64url. */
export const NodeCredential = z.string().regex(/^llmgw_node_[A-Za-z0-9_-]{43}$/, "must be llmgw_node_ followed by 43 base64url characters (32 random bytes)");

/** A new node credential: 32 random bytes. */
export function newNodeCredential(): string {
  const bytes = new Uint8Array(32);
  crypto.getRandomValues(bytes);
  return `llmgw_node_${Buffer.from(bytes).toString("base64url")}`;
}

export const HeartbeatRequest = z
  .object({
    node: SegmentName,
    address: Printable(255).min(1),
    agent_version: Printable(64).default("unknown"),
    /**
     * The protocol the agent speaks (protocol/version.ts); absent from agents before the number
     * existed, which speak 1. A control plane refuses one outside its accepted range (skew.ts).
     */
    protocol: z.number().int().min(0).max(65_535).optional(),
    labels: Labels.default({}),
    fabrics: z.array(Name).max(HEARTBEAT_LIMITS.fabrics).default([]),
    gpus: z.array(GpuReport).max(HEARTBEAT_LIMITS.gpus).default([]),
    /** Models whose weights are present on this node. */
    models: z.array(Name).max(HEARTBEAT_LIMITS.models).default([]),
    replicas: z.array(ReplicaReport).max(HEARTBEAT_LIMITS.replicas).default([]),
    /** Port of the agent's engine-log listener (`llmgw logs`), or null when it has none. */
    logs_port: z.number().int().min(1).max(65535).nullable().default(null),
    /** The engines this node can run, with their versions; absent from older agents (unknown, not none). */
    engines: z.array(EngineReport).max(8).optional(),
    /**
     * Hugging Face snapshot revisions present per model (models in the hub cache layout only),
     * newest first; the head node picks one revision for all shards of a replica from these.
     */
    model_revisions: z.record(Name, z.array(Revision).max(64)).optional(),
    /**
     * Why GPU discovery failed or is incomplete (nvidia-smi missing, the driver not answering),
     * absent when it went well: a node reporting no GPUs says why.
     */
    discovery_error: PrintableMultiline(DISCOVERY_ERROR_MAX).nullable().optional(),
    /**
     * The log listener's own self-signed certificate (PEM) when it serves HTTPS, which it does
     * when the head node's agent API does: the head node trusts exactly this certificate.
     */
    logs_tls_cert: z.string().min(1).max(16_384).regex(/^-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\r\n-]+-----END CERTIFICATE-----\s*$/, "must be one PEM certificate").nullish(),
    /**
     * With the join token only: the credential the joining node chose for itself (random, kept
     * in its state dir before the first try). The head node keeps its SHA-256 as the node's
     * credential, so a join whose answer was lost (a timeout, a store failover after the
     * commit) can be sent again and is answered as the same join, not refused as a node that
     * has already joined. Absent from older agents: the head node then chooses one.
     */
    join_credential: NodeCredential.optional(),
    /** Revisions fetched from a source (or partly), per file verified; absent from older agents. */
    weights_held: z.array(WeightsHeld).max(WEIGHTS_LIMITS.revisions).optional(),
    /** Transfers running now. */
    transfers: z.array(TransferReport).max(WEIGHTS_LIMITS.transfers).optional(),
    disk: DiskReport.optional(),
    /** What became of the removals the head node asked for (`remove` in its answer), until it stops asking. */
    weights_removed: z.array(WeightsRemoved).max(WEIGHTS_LIMITS.revisions).optional(),
    /** The weights found at the file:///PATH sources the head node named (`local_sources`), each with its files' sizes and sha256. */
    local_weights: z.array(LocalWeights).max(WEIGHTS_LIMITS.revisions).optional(),
  })
  .superRefine((hb, ctx) => {
    const seenIndex = new Map<number, number>();
    const seenUuid = new Map<string, number>();
    hb.gpus.forEach((g, i) => {
      const prevIdx = seenIndex.get(g.index);
      if (prevIdx !== undefined)
        ctx.addIssue({ code: "custom", path: ["gpus", i, "index"], message: `duplicate GPU index ${g.index} (also gpus[${prevIdx}])` });
      else seenIndex.set(g.index, i);
      const prevUuid = seenUuid.get(g.uuid);
      if (prevUuid !== undefined)
        ctx.addIssue({ code: "custom", path: ["gpus", i, "uuid"], message: `duplicate GPU uuid (also gpus[${prevUuid}])` });
      else seenUuid.set(g.uuid, i);
    });
  });
export type HeartbeatRequest = z.infer<typeof HeartbeatRequest>;

/** One shard of a replica that this node should run. */
export const Assignment = z.object({
  /** Replica id; several nodes share it for a multi-node replica. */
  id: z.string().min(1).max(128),
  model: Name,
  /** Names the engine should answer to (the model's name first, then its aliases). */
  served_names: z.array(z.string()).min(1),
  profile: z.string(),
  engine: Engine,
  /** Port the engine listens on; chosen by the control plane so the endpoint URL is known. */
  port: z.number().int().min(1).max(65535),
  /** Indices of this node's GPUs the shard runs on. */
  gpus: z.array(z.number().int().min(0)),
  /** UUIDs of those GPUs, for CUDA_VISIBLE_DEVICES (MIG instances need their UUIDs). */
  gpu_uuids: z.array(z.string()),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), z.string()).default({}),
  /**
   * The replica's engine key, chosen by the head node: the agent passes it to the engine's own
   * `--api-key` flag and the router presents it, so the engine answers only the router.
   */
  engine_key: z.string().min(16).max(256).nullable().default(null),
  /**
   * The weights' Hugging Face revision every shard of this replica must load: the catalog's
   * `revision`, else the newest one present on every node of the replica; null when the weights
   * are not in the hub cache layout (a plain folder or a .gguf file).
   */
  revision: Revision.nullable().default(null),
  /**
   * The catalog's `source` (hf://ORG/NAME): the weights are that repository's snapshot of
   * `revision` in the Hub cache layout, fetched before the engine starts (the answer's `weights`
   * lists its files). Absent: weights are where an operator put them, as before.
   */
  source: z.string().max(512).optional(),
  /** How long the engine has to become healthy (the profile's start_timeout), null for the agent's default. */
  start_timeout_ms: z.number().int().positive().nullable().default(null),
  /** Position within a multi-node replica; rank 0 is the leader and serves HTTP. */
  shard: z.object({
    rank: z.number().int().min(0),
    size: z.number().int().min(1),
    leader_address: z.string(),
    /** Port the leader uses for the engines' own rendezvous (torch distributed / NCCL init). */
    leader_port: z.number().int().min(1).max(65535),
  }),
});
export type Assignment = z.infer<typeof Assignment>;

/**
 * The strings of an assignment that reach an engine's command line or environment, under the
 * rules the head node applies where they come from: the catalog's names, aliases, args and env
 * (catalog.ts), a node's address as allowed (common.ts), the GPUs' uuids as reported. The wire
 * schema above stays lenient on them, so one bad assignment fails that replica, with the reason,
 * rather than the whole answer; the agent checks these before it starts anything. A name
 * starting with "-" would be read by the engine as a flag.
 */
export const LaunchInputs = z.object({
  model: Name,
  served_names: z.array(Name).min(1).max(1 + CATALOG_LIMITS.aliases),
  profile: Name,
  args: Profile.shape.args,
  env: EngineEnv,
  // Joined with "," into CUDA_VISIBLE_DEVICES: one uuid must not name two devices.
  gpu_uuids: z.array(GpuReport.shape.uuid.refine((u) => !u.includes(","), "must not contain ','")).max(HEARTBEAT_LIMITS.gpus),
  revision: Revision.nullable(),
  shard: z.object({ leader_address: z.union([z.literal(""), NodeAddress]) }),
});

/** What is wrong with an assignment's launch inputs, as "<field> <value>: <problem>", or undefined. */
export function launchInputProblem(a: Assignment): string | undefined {
  const r = LaunchInputs.safeParse(a);
  if (r.success) return undefined;
  const issue = r.error.issues[0]!;
  const at = issue.path.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`)).join("");
  let v: unknown = a;
  for (const p of issue.path) v = v !== null && typeof v === "object" ? (v as Record<PropertyKey, unknown>)[p as PropertyKey] : undefined;
  // An env value or an argument may be a secret (HF_TOKEN, --hf-token): named, never quoted.
  const shown = typeof v === "string" && issue.path[0] !== "env" && issue.path[0] !== "args" ? ` ${JSON.stringify(v.length > 80 ? `${v.slice(0, 80)}…` : v)}` : "";
  return `${at}${shown}: ${issue.message}`;
}

/**
 * The highest leader epoch an answer may carry: what the stores' lease row holds (a signed 32-bit
 * column). Each lease acquisition raises the epoch by one, so no cluster gets there (one takeover
 * a second for 68 years); anything above it is a forgery or a bug, refused before an agent keeps it.
 */
export const EPOCH_MAX = 2 ** 31 - 1;

export const HeartbeatResponse = z.object({
  /** Everything this node should be running now; anything else it runs should stop. */
  assignments: z.array(Assignment),
  /** How often the agent should heartbeat. */
  heartbeat_interval_ms: z.number().int().positive(),
  /** Bumps whenever the assignment set for the node changes; the long poll waits on it. */
  generation: z.number().int().min(0),
  /**
   * Where this server's generations started (its boot): another value means another count (the
   * server restarted, or another control plane answers), not a change of the set. Absent from
   * older servers. The agent holds back an empty set that comes with a new count (agent.ts).
   */
  generation_base: z.number().int().min(0).optional(),
  /**
   * The node's own credential, in the answer to the heartbeat that joined it with the join
   * token and never again: the agent keeps it (0600) and sends it instead of the join token
   * from then on. The head node keeps only its SHA-256.
   */
  credential: z.string().min(43).max(256).optional(),
  /**
   * The leader epoch these assignments come from (several control planes on one store; 0 or
   * absent for a single head node). An agent remembers the highest it has seen and refuses
   * assignments from an older one: a leader that lost its lease cannot undo its successor's work.
   */
  epoch: z.number().int().min(0).max(EPOCH_MAX).optional(),
  /** The revisions this node should hold (for its replicas, or seeded ahead of need), each with its files. */
  weights: z.array(WeightsManifest).max(WEIGHTS_LIMITS.revisions).optional(),
  /** The transfers it should run now (the head node's plan); one no longer listed is stopped, its bytes kept to resume. */
  fetches: z.array(FetchOrder).max(WEIGHTS_LIMITS.orders).optional(),
  /** Revisions to remove from the node's disk (`llmgw weights rm`); the agent removes only what llmgw fetched. */
  remove: z.array(WeightsRemoval).max(WEIGHTS_LIMITS.revisions).optional(),
  /** The catalog's file:///PATH sources: the agent looks for each on its disk and reports what it finds (`local_weights`). */
  local_sources: z.array(z.string().max(4096)).max(WEIGHTS_LIMITS.revisions).optional(),
});
export type HeartbeatResponse = z.infer<typeof HeartbeatResponse>;

/** How long the assignments long poll holds when the agent gives no wait_ms; agents ask for this too. */
export const ASSIGNMENTS_WAIT_MS = 25_000;

/**
 * `GET /agent/v1/assignments?node=…&generation=…&wait_ms=…`: the long poll. Answers with a
 * HeartbeatResponse as soon as the node's assignment generation differs from the one given
 * (a restarted server starts again from 0, so "differs", not "greater"), or after wait_ms.
 */
export const AssignmentsQuery = z.object({
  node: SegmentName,
  generation: z.coerce.number().int().min(0).default(0),
  wait_ms: z.coerce.number().int().min(0).max(60_000).default(ASSIGNMENTS_WAIT_MS),
});
export type AssignmentsQuery = z.infer<typeof AssignmentsQuery>;

/** SHA-256 (hex) of a node credential: all the head node stores of it. */
export function credentialDigest(credential: string): string {
  return sha256hex(credential);
}

/**
 * The bearer token the head node presents to a node's log listener: derived from the digest of
 * that node's credential (which both sides have), so neither the credential nor the join token
 * travels towards a node, and one node's token opens no other node's logs.
 */
export function logsToken(credentialSha256: string): string {
  return sha256hex(`llmgw-logs\u0000${credentialSha256}`);
}
