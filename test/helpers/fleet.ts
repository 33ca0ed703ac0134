// Builders for store snapshots and heartbeats, so tests state a fleet in a few lines.

import type { ModelSpecInput } from "../../src/protocol/catalog";
import { ModelSpec } from "../../src/protocol/catalog";
import type { GpuReport, HeartbeatRequest } from "../../src/protocol/heartbeat";
import { launchOf } from "../../src/control/launch";
import { type GpuRow, type ModelStateRow, type NodeRow, type ReplicaRow, type Snapshot, emptyModelState } from "../../src/control/types";

export const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);

export interface NodeDef {
  name: string;
  fabrics?: string[];
  admin?: NodeRow["adminState"];
  lastHeartbeat?: number;
  /** e.g. ["H100-80GB", "H100-80GB"]; a class with "/" is a MIG instance (parent set). */
  gpus?: string[];
  unhealthy?: number[];
  models?: string[];
}

export function gpuReports(node: string, classes: string[], unhealthy: number[] = []): GpuReport[] {
  return classes.map((cls, i) => ({
    index: i,
    uuid: cls.includes("/") ? `MIG-${node}-${i}` : `GPU-${node}-${i}`,
    name: cls,
    class: cls,
    memory_mib: 81559,
    healthy: !unhealthy.includes(i),
    parent: cls.includes("/") ? `GPU-${node}-card` : null,
  }));
}

export function heartbeat(d: NodeDef): HeartbeatRequest {
  return {
    node: d.name,
    address: `10.0.0.${(hash(d.name) % 250) + 1}`,
    agent_version: "0.1.0",
    labels: {},
    fabrics: d.fabrics ?? [],
    gpus: gpuReports(d.name, d.gpus ?? [], d.unhealthy),
    models: d.models ?? [],
    replicas: [],
    logs_port: null,
  };
}

function hash(s: string): number {
  let h = 0;
  for (const c of s) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return h;
}

export function model(m: Partial<ModelSpecInput> & { name: string }): ReturnType<typeof ModelSpec.parse> {
  return ModelSpec.parse({ profiles: [{ name: "default", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }], ...m });
}

export interface ReplicaDef {
  id: string;
  model: string;
  state?: ReplicaRow["state"];
  shards: { node: string; gpus: number[] }[];
  failures?: number;
}

export function snapshot(opts: {
  nodes?: NodeDef[];
  models?: ReturnType<typeof model>[];
  replicas?: ReplicaDef[];
  modelState?: (Partial<ModelStateRow> & { model: string })[];
  now?: number;
}): Snapshot {
  const now = opts.now ?? T0;
  const nodes: NodeRow[] = [];
  const gpus: GpuRow[] = [];
  const weights: { node: string; model: string }[] = [];
  for (const d of opts.nodes ?? []) {
    nodes.push({
      name: d.name,
      address: "10.0.0.1",
      labels: {},
      fabrics: d.fabrics ?? [],
      adminState: d.admin ?? "none",
      lastHeartbeat: d.lastHeartbeat ?? now,
      agentVersion: "0.1.0",
      registeredAt: now,
    });
    for (const g of gpuReports(d.name, d.gpus ?? [], d.unhealthy))
      gpus.push({ node: d.name, index: g.index, uuid: g.uuid, name: g.name, class: g.class, memoryMib: g.memory_mib, healthy: g.healthy, parent: g.parent });
    for (const m of d.models ?? []) weights.push({ node: d.name, model: m });
  }
  return {
    nodes,
    gpus,
    weights,
    models: (opts.models ?? []).map((spec) => ({ name: spec.name, spec, revision: 1, createdAt: now, updatedAt: now })),
    replicas: (opts.replicas ?? []).map((r) => ({
      id: r.id,
      model: r.model,
      profile: "default",
      state: r.state ?? "ready",
      shards: r.shards,
      port: 8100,
      endpoint: "http://10.0.0.1:8100",
      failures: r.failures ?? 0,
      error: null,
      createdAt: now,
      updatedAt: now,
      readyAt: r.state === "ready" || r.state === undefined ? now : null,
      // Launched with their model's spec as it stands: nothing to roll (reconcile/rollout.ts).
      launch: launchOfModel(opts.models ?? [], r.model),
      drainUntil: null,
    })),
    modelState: (opts.modelState ?? []).map((s) => ({ ...emptyModelState(s.model), ...s })),
  };
}

function launchOfModel(models: readonly ReturnType<typeof model>[], name: string): string | null {
  const m = models.find((x) => x.name === name);
  return m ? (launchOf(m, "default") ?? null) : null;
}
