// The admin API's answers: the node, replica and model tables and the fleet summary. Plain
// types (the server builds them, it never parses them), so the CLI imports them type-only and
// pays nothing at start-up. Field names of the summary are the Go predecessor's.

export type NodeState = "ready" | "cordoned" | "draining" | "unreachable";
export type AdminState = "none" | "cordoned" | "draining";
export type ReplicaState = "starting" | "ready" | "draining" | "failed";

export interface GpuView {
  index: number;
  uuid: string;
  name: string;
  class: string;
  memory_mib: number;
  healthy: boolean;
  parent: string | null;
  /** Id of the replica holding it, or null. */
  in_use_by: string | null;
}

export interface NodeView {
  name: string;
  state: NodeState;
  admin_state: AdminState;
  address: string;
  fabrics: string[];
  labels: Record<string, string>;
  agent_version: string;
  gpus: GpuView[];
  /** Models whose weights this node holds. */
  models: string[];
  /** ISO time of the last heartbeat. */
  last_heartbeat: string;
  gpu_total: number;
  gpu_free: number;
  gpu_unhealthy: number;
}

export interface ShardView {
  node: string;
  gpus: number[];
}

export interface ReplicaView {
  id: string;
  model: string;
  profile: string;
  state: ReplicaState;
  shards: ShardView[];
  endpoint: string | null;
  /** Seconds since the router last sent it a request; negative when unknown. */
  idle_seconds: number;
  failures: number;
  error: string | null;
  created_at: string;
  ready_at: string | null;
}

export interface ModelView {
  name: string;
  aliases: string[];
  desired: number;
  ready: number;
  total: number;
  min: number;
  max: number;
  on_demand: boolean;
  parked: boolean;
  failures: number;
  /** Why it is parked or cannot be placed; null when neither. */
  reason: string | null;
  unplaceable: boolean;
  revision: number;
}

export interface Tables {
  nodes: NodeView[];
  replicas: ReplicaView[];
  models: ModelView[];
}

export interface NodeTotals { total: number; ready: number; cordoned: number; draining: number; unreachable: number }
export interface ClassUse { class: string; total: number; used: number; unhealthy: number }
export interface FabricUse { fabric: string; nodes: number; nodes_with_weights: number; models_present: number; largest_free_block: number }
export interface ReplicaTotals { ready: number; starting: number; draining: number; failed: number }
export interface ModelTotals { total: number; satisfied: number; short: number }
export interface ParkedModel { model: string; failures: number; reason: string }
export interface IdleReplica { id: string; model: string; idle_seconds: number; gpus: number }
/** A replica stopped to make room for an on-demand model (recent ones, in the summary). */
export interface Eviction { at: string; replica: string; model: string; for_model: string; idle_seconds: number }
export interface StoreMember { name: string; host: string; role: string; state: string; lag: number }
export interface ControlPlane { name: string; address: string; state: string; this?: boolean }
export interface ControlPlanes { members?: ControlPlane[]; floating?: string; floating_up?: boolean }

export interface Summary {
  version: string;
  nodes: NodeTotals;
  gpus: ClassUse[];
  fabrics: FabricUse[];
  replicas: ReplicaTotals;
  models: ModelTotals;
  /** Names of models short of replicas that cannot get more; reasons in `unplaceable_reasons`. */
  unplaceable: string[];
  unplaceable_reasons: Record<string, string>;
  parked: ParkedModel[];
  idle_replicas: IdleReplica[];
  /** Replicas stopped in the last hour to make room for on-demand models, newest first. */
  evictions: Eviction[];
  /** Members of a replicated store; empty for the embedded database. */
  store: StoreMember[];
  store_error?: string;
  control_planes: ControlPlanes;
}

export interface EventView {
  id: number;
  at: string;
  kind: string;
  subject: string;
  message: string;
}

/** The admin API's one error shape. `issues` lists every problem with its path, for bad bodies. */
export interface ApiError {
  error: {
    code: string;
    message: string;
    issues?: { path: string; message: string }[];
  };
}
