// The admin API's answers: the node, replica and model tables, the fleet summary and the small
// replies of the write routes. zod schemas so the OpenAPI document (api/openapi.ts) describes
// exactly these shapes and tests can check real answers against them; the server builds these
// objects and never parses them. The CLI imports only the inferred types (`import type`), so
// `llmgw status` loads no zod. Field names of the summary are the Go predecessor's.

import { z } from "zod";
import { WeightsInFlightSchema, WeightsNodeViewSchema } from "./weights-admin";
import { ModelSpec, type ModelSpecInput } from "./catalog";

/** "pending": joined under `serve --approve-nodes`, waiting for `llmgw nodes approve`. */
export const NodeStateSchema = z.enum(["ready", "cordoned", "draining", "unreachable", "pending"]);
export type NodeState = z.infer<typeof NodeStateSchema>;
export const AdminStateSchema = z.enum(["none", "cordoned", "draining", "pending"]);
export type AdminState = z.infer<typeof AdminStateSchema>;
export const ReplicaStateSchema = z.enum(["starting", "ready", "draining", "failed"]);
export type ReplicaState = z.infer<typeof ReplicaStateSchema>;
/** What the replica table shows: a starting replica still fetching its weights is `fetching`. */
export const ReplicaViewStateSchema = z.enum(["fetching", "starting", "ready", "draining", "failed"]);

/** A UTC time as the server writes it (`Date.toISOString()`). */
const IsoTime = z.iso.datetime();

export const GpuViewSchema = z.object({
  index: z.number().int(),
  uuid: z.string(),
  name: z.string(),
  class: z.string(),
  memory_mib: z.number().int(),
  healthy: z.boolean(),
  /** UUID of the card a MIG instance belongs to; null for a whole card. */
  parent: z.string().nullable().describe("UUID of the card a MIG instance belongs to; null for a whole card."),
  /** Id of the replica holding it (or holding the memory it shares), or null. */
  in_use_by: z.string().nullable().describe("Id of the replica holding it (or holding the GPU instance memory it shares), or null."),
  /** Why it is unhealthy, as the node reported it; null when healthy or not said. */
  reason: z.string().nullable().describe("Why it is unhealthy, as the node reported it; null when healthy or not said."),
});
export type GpuView = z.infer<typeof GpuViewSchema>;

/** One engine as a node's agent found it: its version, or null and why there is none. */
export const EngineViewSchema = z.object({
  engine: z.string(),
  version: z.string().nullable(),
  error: z.string().nullable(),
});
export type EngineView = z.infer<typeof EngineViewSchema>;

/** How a draining node's drain is going (control/drain.ts): what is left on it and what holds it up. */
export const NodeDrainSchema = z
  .object({
    remaining: z.number().int().describe("Replicas still on the node (failed ones are gone and do not count)."),
    replicas: z
      .array(
        z.object({
          id: z.string(),
          model: z.string(),
          state: ReplicaStateSchema,
          status: z
            .enum(["stopping", "waiting", "blocked", "never"])
            .describe("stopping: it stops now; waiting: its replacement is on its way; blocked: it has nowhere else to go now; never: it never will while this drain stands (waiting will not help)."),
          reason: z.string().nullable(),
        }),
      )
      .describe("The replicas still on the node, each with why it has not moved yet."),
    blocked: z.string().nullable().describe("Why the drain cannot finish (the first replica with nowhere to go, and why); null while it is progressing."),
    never: z.boolean().describe("The drain can never finish as things stand: a model no other node could ever hold, or a parked one. Waiting will not help."),
  })
  .describe("How a draining node's drain is going.");
export type NodeDrain = z.infer<typeof NodeDrainSchema>;

export const NodeViewSchema = z.object({
  name: z.string(),
  state: NodeStateSchema,
  admin_state: AdminStateSchema,
  address: z.string(),
  fabrics: z.array(z.string()),
  labels: z.record(z.string(), z.string()),
  agent_version: z.string(),
  agent_protocol: z.number().int().optional().describe("The protocol its agent speaks (1: an agent from before the number, which does not say); absent from older servers."),
  gpus: z.array(GpuViewSchema),
  /** Models whose weights this node holds. */
  models: z.array(z.string()).describe("Models whose weights this node holds."),
  /** ISO time of the last heartbeat. */
  last_heartbeat: IsoTime.describe("Time of the last heartbeat."),
  gpu_total: z.number().int(),
  gpu_free: z.number().int(),
  gpu_unhealthy: z.number().int(),
  /** Memory of its GPUs in MiB, each GPU instance's once (compute instances share it). */
  gpu_memory_mib: z.number().int().describe("Memory of its GPUs in MiB, each GPU instance's once (compute instances share it)."),
  /** Why GPU discovery failed or is incomplete on this node, as it last reported; null when it went well. */
  discovery_error: z.string().nullable().describe("Why GPU discovery failed or is incomplete on this node, as it last reported; null when it went well."),
  /** Present (true) while discovery fails and finds no GPUs: `gpus` are the node's last known ones, each unhealthy with the error as its reason. */
  gpus_last_known: z
    .literal(true)
    .optional()
    .describe("Present (true) while GPU discovery fails and finds none: `gpus` are the ones the node last reported, kept and counted unhealthy with the discovery error as their reason, until discovery answers again or the node is deleted."),
  /** The engines the node's agent reported, with the version it found or why it found none; empty when it has not said. */
  engines: z
    .array(EngineViewSchema)
    .describe("The engines the node's agent reported, with the version it found (null: none, with why in `error`); empty when the agent has not said (older agents, simulated nodes): unknown, not absent."),
  /** Present only on a draining node: what is left on it and what holds the drain up. */
  drain: NodeDrainSchema.optional(),
});
export type NodeView = z.infer<typeof NodeViewSchema>;

export const ShardViewSchema = z.object({
  node: z.string(),
  gpus: z.array(z.number().int()),
});
export type ShardView = z.infer<typeof ShardViewSchema>;

export const ReplicaViewSchema = z.object({
  id: z.string(),
  model: z.string(),
  profile: z.string(),
  state: ReplicaViewStateSchema,
  shards: z.array(ShardViewSchema),
  endpoint: z.string().nullable(),
  /** Seconds since the router last sent it a request; negative when unknown. */
  idle_seconds: z.number().describe("Seconds since the router last sent it a request; negative when unknown."),
  failures: z.number().int(),
  error: z.string().nullable(),
  created_at: IsoTime,
  ready_at: IsoTime.nullable(),
});
export type ReplicaView = z.infer<typeof ReplicaViewSchema>;

/** A model's rolling restart under way (a catalog change to how its replicas start, or `models restart`). */
export const RolloutViewSchema = z.object({
  replaced: z.number().int().describe("Ready replicas of the current spec, up to `of`."),
  of: z.number().int().describe("Replicas the model wants."),
  starting: z.number().int().describe("Replicas of the current spec starting (one at a time)."),
  old: z.number().int().describe("Replicas of an outdated spec still running and taking requests."),
  draining: z
    .array(z.object({ id: z.string(), inflight: z.number().int().nullable().describe("Requests in flight on it; null: not known (several control planes)."), seconds_left: z.number().int().describe("Seconds until it is stopped anyway (serve --drain-timeout).") }))
    .describe("Old replicas taking no new requests, kept until their requests in flight finish."),
  waiting: z.string().nullable().describe("Why the roll cannot go on now; null when it is under way."),
  text: z.string().describe("All of it in one line, as `llmgw models NAME` prints it."),
});
export type RolloutView = z.infer<typeof RolloutViewSchema>;

export const ModelViewSchema = z.object({
  name: z.string(),
  aliases: z.array(z.string()),
  desired: z.number().int(),
  ready: z.number().int(),
  total: z.number().int(),
  min: z.number().int(),
  max: z.number().int(),
  on_demand: z.boolean(),
  parked: z.boolean(),
  /** Failed starts in a row. */
  failures: z.number().int().describe("Failed starts in a row."),
  /** Replicas that crashed soon after becoming ready, in a row (a crash loop; `serve --crash-window`). */
  crashes: z.number().int().describe("Replicas that crashed soon after becoming ready, in a row (a crash loop; `serve --crash-window`)."),
  /** Why it is parked or cannot be placed; null when neither. */
  reason: z.string().nullable().describe("Why it is parked or cannot be placed; null when neither."),
  unplaceable: z.boolean(),
  /**
   * No node or fabric of this fleet could ever host it, even with every node ready and every card
   * free: waiting will not help (its reason begins "can never fit"). False for what is only busy
   * now (its reason begins "not now").
   */
  never_fits: z.boolean().describe("No node or fabric of this fleet could ever host it, even all free: waiting will not help."),
  revision: z.number().int(),
  /** Present while its replicas are being replaced one at a time. */
  rollout: RolloutViewSchema.optional().describe("Present while its replicas are being replaced one at a time (a catalog change to how they start, or `models restart`)."),
});
export type ModelView = z.infer<typeof ModelViewSchema>;

export interface Tables {
  nodes: NodeView[];
  replicas: ReplicaView[];
  models: ModelView[];
}

export const NodeTotalsSchema = z.object({ total: z.number().int(), ready: z.number().int(), cordoned: z.number().int(), draining: z.number().int(), unreachable: z.number().int(),
  /** Nodes waiting for `llmgw nodes approve` (serve --approve-nodes); present only when there are some. */
  pending: z.number().int().optional(),
});
export type NodeTotals = z.infer<typeof NodeTotalsSchema>;
export const ClassUseSchema = z.object({ class: z.string(), total: z.number().int(), used: z.number().int(), unhealthy: z.number().int() });
export type ClassUse = z.infer<typeof ClassUseSchema>;
export const FabricUseSchema = z.object({
  fabric: z.string(),
  nodes: z.number().int(),
  nodes_with_weights: z.number().int(),
  models_present: z.number().int(),
  largest_free_block: z.number().int(),
});
export type FabricUse = z.infer<typeof FabricUseSchema>;
export const ReplicaTotalsSchema = z.object({ ready: z.number().int(), starting: z.number().int(), draining: z.number().int(), failed: z.number().int() });
export type ReplicaTotals = z.infer<typeof ReplicaTotalsSchema>;
export const ModelTotalsSchema = z.object({ total: z.number().int(), satisfied: z.number().int(), short: z.number().int() });
export type ModelTotals = z.infer<typeof ModelTotalsSchema>;
/** `failures`: the failed starts, or the crashes soon after ready, in a row that parked it (the reason says which). */
export const ParkedModelSchema = z.object({
  model: z.string(),
  failures: z.number().int().describe("The failed starts, or the crashes soon after becoming ready, in a row that parked it (the reason says which)."),
  reason: z.string(),
});
export type ParkedModel = z.infer<typeof ParkedModelSchema>;
export const IdleReplicaSchema = z.object({ id: z.string(), model: z.string(), idle_seconds: z.number(), gpus: z.number().int() });
export type IdleReplica = z.infer<typeof IdleReplicaSchema>;
/** A replica stopped to make room for an on-demand model (recent ones, in the summary). */
export const EvictionSchema = z
  .object({ at: IsoTime, replica: z.string(), model: z.string(), for_model: z.string(), idle_seconds: z.number() })
  .describe("A replica stopped to make room for an on-demand model.");
export type Eviction = z.infer<typeof EvictionSchema>;
export const StoreMemberSchema = z.object({ name: z.string(), host: z.string(), role: z.string(), state: z.string(), lag: z.number() });
export type StoreMember = z.infer<typeof StoreMemberSchema>;
export const ControlPlaneSchema = z.object({
  name: z.string(),
  address: z.string(),
  state: z.string(),
  this: z.boolean().optional(),
  version: z.string().optional().describe("Its release; absent from a release before control planes said it."),
  protocol: z.number().int().optional().describe("The protocol it speaks (absent: a release before the number, protocol 1)."),
  barred: z.string().optional().describe("On the answering control plane only: why it stands by whatever the lease says (the store's schema is newer than it knows)."),
});
export type ControlPlane = z.infer<typeof ControlPlaneSchema>;
export const ControlPlanesSchema = z.object({ members: z.array(ControlPlaneSchema).optional(), floating: z.string().optional(), floating_up: z.boolean().optional() });
export type ControlPlanes = z.infer<typeof ControlPlanesSchema>;

/** Unhealthy GPUs grouped by the reason their nodes gave. */
export const UnhealthyGpusSchema = z.object({ reason: z.string(), gpus: z.number().int(), nodes: z.array(z.string()).describe("The first few nodes, by name.") });
export type UnhealthyGpus = z.infer<typeof UnhealthyGpusSchema>;
/** A node whose GPU discovery failed or is incomplete. */
export const DiscoveryProblemSchema = z.object({
  node: z.string(),
  gpus: z.number().int(),
  error: z.string(),
  last_known: z.literal(true).optional().describe("Present (true) when discovery finds no GPUs and `gpus` counts the node's last known ones, kept unhealthy."),
});
export type DiscoveryProblem = z.infer<typeof DiscoveryProblemSchema>;

/** How the router listens: `open` is a listener beyond loopback that asks no client for an API key. */
export const RouterExposureSchema = z.object({
  listen: z.string().describe("host:port the router listens on."),
  api_key_required: z.boolean(),
  open: z.boolean().describe("true when the router listens beyond loopback and requires no API key: anyone who reaches it can use every model."),
});
export type RouterExposure = z.infer<typeof RouterExposureSchema>;

/** How new nodes are admitted: `open` is an admin listener beyond loopback that gives a new node work without approval. */
export const NodeAdmissionSchema = z.object({
  listen: z.string().describe("host:port the admin and agent API listens on."),
  approve_nodes: z.boolean().describe("true under `serve --approve-nodes`: a new node waits as pending until `llmgw nodes approve`."),
  open: z
    .boolean()
    .describe("true when the agent API listens beyond loopback and a new node is given replicas without approval: anyone holding the join token who reaches it receives prompts and the catalog's env (HF_TOKEN and the like)."),
});
export type NodeAdmission = z.infer<typeof NodeAdmissionSchema>;

/** How far behind the head node is and what it does about it (control/load.ts). */
export const HeadLoadSchema = z.object({
  behind_ms: z.number().int().nonnegative().describe("The worst lateness of the recent past (event-loop lag, a stall, heartbeat queue wait, tick time); 0 when calm."),
  heartbeat_interval_ms: z.number().int().positive().describe("The heartbeat interval agents are told now."),
  configured_interval_ms: z.number().int().positive().describe("The interval configured (`serve --heartbeat-interval`); agents are told more while the head node is behind."),
  shedding: z.array(z.enum(["summary", "metrics", "unchanged_heartbeats"])).describe("Work shed, in this order, before anything that changes state."),
});
export type HeadLoad = z.infer<typeof HeadLoadSchema>;

export const SummarySchema = z.object({
  version: z.string(),
  nodes: NodeTotalsSchema,
  /**
   * The first nodes (by name, at most 20) in each state that needs a person: unreachable,
   * cordoned, draining, pending. The counts in `nodes` say how many there are in all.
   */
  node_names: z
    .object({ unreachable: z.array(z.string()), cordoned: z.array(z.string()), draining: z.array(z.string()), pending: z.array(z.string()) })
    .optional()
    .describe("The first nodes (by name, at most 20) in each state that needs a person; the counts in `nodes` say how many in all."),
  gpus: z.array(ClassUseSchema),
  fabrics: z.array(FabricUseSchema),
  replicas: ReplicaTotalsSchema,
  models: ModelTotalsSchema,
  /** Names of models short of replicas that cannot get more; reasons in `unplaceable_reasons`. */
  unplaceable: z.array(z.string()).describe("Names of models short of replicas that cannot get more; reasons in `unplaceable_reasons`."),
  unplaceable_reasons: z.record(z.string(), z.string()),
  parked: z.array(ParkedModelSchema),
  idle_replicas: z.array(IdleReplicaSchema),
  /** Replicas stopped in the last hour to make room for on-demand models, newest first. */
  evictions: z.array(EvictionSchema).describe("Replicas stopped in the last hour to make room for on-demand models, newest first."),
  /** Members of a replicated store; empty for the embedded database. */
  store: z.array(StoreMemberSchema).describe("Members of a replicated store; empty for the embedded database."),
  store_error: z.string().optional(),
  control_planes: ControlPlanesSchema,
  /** Unhealthy GPUs by reason, most first. */
  unhealthy_gpus: z.array(UnhealthyGpusSchema).optional().describe("Unhealthy GPUs by reason, most first."),
  /** Nodes whose GPU discovery failed or is incomplete, by name. */
  gpu_discovery: z.array(DiscoveryProblemSchema).optional().describe("Nodes whose GPU discovery failed or is incomplete, by name."),
  /** Drains that cannot finish (blocked now, or never), by node: what needs a person. A drain that only takes time is not listed. */
  stuck_drains: z
    .array(z.object({ node: z.string(), remaining: z.number().int(), never: z.boolean(), reason: z.string() }))
    .optional()
    .describe("Drains that cannot finish (blocked now, or never while the drain stands), by node, with why. A drain that only takes time is not listed."),
  /** The router's listener as this head node runs it: whether anyone who reaches it may use it. */
  router: RouterExposureSchema.optional(),
  /** How this head node admits new nodes: whether holding the join token is enough to get work. */
  node_admission: NodeAdmissionSchema.optional(),
  /** What weights move now across the fleet (absent when nothing moves). */
  weights: WeightsInFlightSchema.optional().describe("What weights move now across the fleet: files, bytes, aggregate rate, the slowest node's estimate; absent when nothing moves."),
  /** Nodes per agent release and protocol, most first: more than one entry is an upgrade under way (or left half done). */
  agent_versions: z
    .array(z.object({ version: z.string(), protocol: z.number().int(), nodes: z.number().int() }))
    .optional()
    .describe("Nodes per agent release and protocol, most first; more than one entry is an upgrade under way or left half done."),
  /** How far behind the head node is; always present from a head node that measures it. */
  head: HeadLoadSchema.optional().describe("How far behind the head node is; always present from a head node that measures it."),
});
export type Summary = z.infer<typeof SummarySchema>;

export const EventViewSchema = z.object({
  id: z.number().int(),
  at: IsoTime,
  kind: z.string(),
  subject: z.string(),
  message: z.string(),
});
export type EventView = z.infer<typeof EventViewSchema>;

// ---- replies of the write routes ------------------------------------------------------
// Every one carries `message`, the sentence the CLI prints.

/** `POST /nodes/{name}/cordon|uncordon|drain`. */
export const NodeActionResultSchema = z.object({
  node: z.string(),
  action: z.enum(["cordon", "uncordon", "drain"]),
  /** false when the node was already in that state. */
  changed: z.boolean().describe("false when the node was already in that state."),
  message: z.string(),
});
export type NodeActionResult = z.infer<typeof NodeActionResultSchema>;

/**
 * The stored spec as a client would write it: every default filled in, durations in words, so
 * GET → PUT round-trips. Its document schema is the ModelSpec request body's (see openapi.ts);
 * here it checks that it is one.
 */
export const ModelSpecWireSchema = z.custom<ModelSpecInput>((v) => ModelSpec.safeParse(v).success, "not a valid model spec");

/** `GET /models/{name}`: the table row and the spec behind it. */
export const ModelDetailSchema = ModelViewSchema.extend({
  spec: ModelSpecWireSchema,
  /** With an hf:// source: each node's copy of the pinned revision (absent without a Hub or a source). */
  weights: z.array(WeightsNodeViewSchema).optional().describe("With an hf:// source: each node's copy of the pinned revision: present, fetching (percent, rate, source) or absent."),
});
export type ModelDetail = z.infer<typeof ModelDetailSchema>;

export const PutResultSchema = z.enum(["created", "configured", "unchanged"]);

/** `PUT /models/{name}`: the model as now stored, and what the write did. */
export const ModelPutResultSchema = ModelDetailSchema.extend({ result: PutResultSchema, message: z.string() });
export type ModelPutResult = z.infer<typeof ModelPutResultSchema>;

/** `DELETE /models/{name}`. */
export const ModelDeletedSchema = z.object({ name: z.string(), result: z.literal("deleted"), message: z.string() });
export type ModelDeleted = z.infer<typeof ModelDeletedSchema>;

/** `POST /models/{name}/unpark`. */
export const UnparkResultSchema = z.object({
  name: z.string(),
  /** false when the model was not parked. */
  changed: z.boolean().describe("false when the model was not parked."),
  message: z.string(),
});
export type UnparkResult = z.infer<typeof UnparkResultSchema>;

/** `POST /models/{name}/restart`. */
export const RestartResultSchema = z.object({
  name: z.string(),
  replicas: z.number().int().describe("Replicas marked to be replaced, one at a time (0: none running, nothing to do)."),
  message: z.string(),
});
export type RestartResult = z.infer<typeof RestartResultSchema>;

/** `POST /apply`: one entry per model of the file, in its order. */
export const ApplyResultSchema = z.object({
  results: z.array(z.object({ name: z.string(), result: PutResultSchema, revision: z.number().int(), message: z.string() })),
});
export type ApplyResult = z.infer<typeof ApplyResultSchema>;

/** A key's or a team's limits as listed: null is no limit. */
const LimitViewFields = {
  rpm: z.number().int().nullable().describe("Requests per minute; null: no limit."),
  tpm: z.number().int().nullable().describe("Tokens (prompt and completion) per minute; null: no limit."),
  max_concurrent: z.number().int().nullable().describe("Requests in flight at once; null: no limit."),
  budget_tokens: z.number().int().nullable().describe("Tokens per budget period; null: no budget."),
  budget_gpu_hours: z.number().nullable().describe("GPU-hours per budget period; null: no budget."),
  budget_period: z.enum(["day", "week", "month"]).nullable().describe("The budget's period; null: month."),
  priority: z.enum(["interactive", "batch"]).nullable().describe("The admission tier; null: the team's, else interactive."),
};

/**
 * How much of each limit is in use now, as the routers' admission counts it. Absent until the
 * routers report it; each field absent when not counted.
 */
export const LimitUseSchema = z.object({
  rpm: z.number().optional(),
  tpm: z.number().optional(),
  concurrent: z.number().optional(),
  budget_tokens: z.number().optional(),
  budget_gpu_hours: z.number().optional(),
});
export type LimitUse = z.infer<typeof LimitUseSchema>;

/** A client API key as listed: never the key itself. */
export const ApiKeyViewSchema = z.object({
  name: z.string(),
  /** The one pool the key's requests see; null for every pool. */
  pool: z.string().nullable().describe("The one pool the key's requests see; null for every pool."),
  team: z.string().nullable().describe("The team the key belongs to (held to its limits too); null: none."),
  models: z.array(z.string()).nullable().describe("The models (names or aliases) the key may use; null: every model of its pool."),
  expires_at: IsoTime.nullable().describe("When the key stops working; null: never."),
  ...LimitViewFields,
  use: LimitUseSchema.optional().describe("Each limit's current use, when the routers report it."),
  created_at: IsoTime,
  updated_at: IsoTime.nullable(),
});
export type ApiKeyView = z.infer<typeof ApiKeyViewSchema>;

/** `PATCH /keys/{name}`: the key as it now stands. */
export const ApiKeyUpdatedSchema = ApiKeyViewSchema.extend({ message: z.string() });
export type ApiKeyUpdated = z.infer<typeof ApiKeyUpdatedSchema>;

/** A team: limits its keys share. */
export const TeamViewSchema = z.object({
  name: z.string(),
  ...LimitViewFields,
  keys: z.array(z.string()).describe("The team's keys, by name."),
  use: LimitUseSchema.optional().describe("Each limit's current use, when the routers report it."),
  created_at: IsoTime,
  updated_at: IsoTime,
});
export type TeamView = z.infer<typeof TeamViewSchema>;

/** `POST /teams`, `PATCH /teams/{name}`: the team as it now stands. */
export const TeamWrittenSchema = TeamViewSchema.extend({ message: z.string() });
export type TeamWritten = z.infer<typeof TeamWrittenSchema>;

/** `DELETE /teams/{name}`: the keys revoked with it (forced). */
export const TeamDeletedSchema = z.object({ name: z.string(), revoked: z.array(z.string()), message: z.string() });
export type TeamDeleted = z.infer<typeof TeamDeletedSchema>;

/** `POST /keys`: the only answer that ever carries the key. */
export const CreatedApiKeySchema = ApiKeyViewSchema.extend({
  /** The key itself; shown this once, stored only as a hash. */
  key: z.string().describe("The key itself; shown this once, stored only as a hash."),
  message: z.string(),
});
export type CreatedApiKey = z.infer<typeof CreatedApiKeySchema>;

/** `DELETE /keys/{name}`. */
export const ApiKeyRevokedSchema = z.object({ name: z.string(), message: z.string() });
export type ApiKeyRevoked = z.infer<typeof ApiKeyRevokedSchema>;

/**
 * `GET /healthz`: open, for load balancers and install scripts. `GET /healthz?leader=1` answers
 * 503 (status "standing by") from a control plane that does not lead: keepalived's check.
 */
export const HealthSchema = z.object({
  status: z.enum(["ok", "standing by"]),
  version: z.string(),
  /** This control plane leads (always, for a single head node). */
  leading: z.boolean(),
  /** The leader epoch it leads under (several control planes; 0 for a single head node). */
  epoch: z.number().int().min(0),
  /** This control plane's name (`serve --name`). */
  name: z.string().optional(),
  /** Why it stands by whatever the lease says (the store's schema is newer than this release knows); absent when it may lead. */
  barred: z.string().optional(),
});
export type Health = z.infer<typeof HealthSchema>;

/** The admin API's one error shape. `issues` lists every problem with its path, for bad bodies. */
export const ApiErrorSchema = z
  .object({
    error: z.object({
      /** Machine-readable: invalid_request, invalid_json, unauthorized, not_found, conflict, … */
      code: z.string().describe("Machine-readable: invalid_request, invalid_json, unauthorized, not_found, conflict, body_too_large, unsupported_media_type, store_full, store_busy, store_unavailable, internal."),
      message: z.string(),
      issues: z
        .array(
          z.object({
            /**
             * Dotted path into the body or query ("gpus.0.class"), or "(body)" for the whole; a catalog
             * body (PUT a model, apply) names a model by its name and an index in brackets
             * ("models[llama-3.1-8b].profiles[0].gpus", "profiles[0].gpus"; by index when the name is not valid).
             */
            path: z
              .string()
              .describe(
                'Dotted path into the body or query ("gpus.0.class"), or "(body)" for the whole; a catalog body (PUT a model, apply) names a model by its name and an index in brackets ("models[llama-3.1-8b].profiles[0].gpus", "profiles[0].gpus"; by index when the name is not valid).',
              ),
            message: z.string(),
          }),
        )
        .optional(),
    }),
  })
  .describe("The admin API's one error shape. `issues` lists every problem with its path, for bad bodies.");
export type ApiError = z.infer<typeof ApiErrorSchema>;

// ---- placement explained (`GET /models/{name}/explain`, `POST /apply?dry_run=true`)

/** Why a node was ruled out for a profile, or that it fits; in the order the rules are applied. */
export const NodeOutcomeSchema = z.enum(["class", "gpus", "unreachable", "pending", "cordoned", "draining", "engine", "unhealthy", "disk", "exhausted", "fabric", "fits"]);
export type NodeOutcome = z.infer<typeof NodeOutcomeSchema>;

/** The nodes one rule ruled out (or that fit), with the first few named. */
export const OutcomeCountSchema = z.object({
  outcome: NodeOutcomeSchema,
  count: z.number().int(),
  /** The first few nodes by name, each with what it has: `8/8 H100-80GB used by r-1 (llama)`. */
  nodes: z.array(z.object({ name: z.string(), detail: z.string() })).describe("The first few nodes, by name, each with what it has."),
});
export type OutcomeCount = z.infer<typeof OutcomeCountSchema>;

export const VerdictSchema = z.enum(["fits", "not_now", "never"]);
export type Verdict = z.infer<typeof VerdictSchema>;

export const ProfileExplanationSchema = z.object({
  name: z.string(),
  engine: z.string(),
  gpu_class: z.string(),
  gpus: z.number().int(),
  nodes: z.number().int(),
  priority: z.number().int(),
  /** fits: a replica of it would be placed now; not_now: the fleet has room for it, but not free now; never: not even all free. */
  verdict: VerdictSchema.describe("fits: a replica would be placed now; not_now: the fleet could host it but not now; never: not even with every node ready and free."),
  /** One line, Nomad-style: `2 nodes filtered by class; 1 exhausted: 8/8 H100-80GB used; 1 not ready: cordoned`. */
  line: z.string(),
  /** Placement's own reason (or the never reason) when it does not fit now; null when it does. */
  reason: z.string().nullable(),
  /** Where a replica of this profile would go now; null when nowhere. */
  would_place: z.array(ShardViewSchema).nullable(),
  outcomes: z.array(OutcomeCountSchema),
  /** Nodes holding the model's weights (placement prefers them; the others download first). */
  weights_on: z.array(z.string()),
});
export type ProfileExplanation = z.infer<typeof ProfileExplanationSchema>;

export const SuggestionSchema = z.object({
  kind: z.enum(["evict", "uncordon", "approve", "wait", "unpark", "change", "none"]),
  message: z.string(),
  /** The replicas to evict, for `evict`. */
  replicas: z.array(z.string()).optional(),
  /** The nodes concerned, for `uncordon`, `approve` and `wait`. */
  nodes: z.array(z.string()).optional(),
});
export type Suggestion = z.infer<typeof SuggestionSchema>;

/** `GET /models/{name}/explain`: per profile in priority order, which nodes were ruled out and why, and what would make it fit. */
export const ExplanationSchema = z.object({
  model: z.string(),
  /** running: it has what it wants; fits: what it lacks would be placed now; not_now; never; parked. */
  status: z.enum(["running", "fits", "not_now", "never", "parked"]),
  /** One sentence for the whole model. */
  summary: z.string(),
  desired: z.number().int(),
  ready: z.number().int(),
  on_demand: z.boolean(),
  replicas: z.array(z.object({ id: z.string(), profile: z.string(), state: ReplicaStateSchema, shards: z.array(ShardViewSchema) })),
  profiles: z.array(ProfileExplanationSchema),
  suggestions: z.array(SuggestionSchema),
});
export type Explanation = z.infer<typeof ExplanationSchema>;

/** `POST /apply?dry_run=true`: what apply would do, and where each new replica would go, with nothing changed. */
export const ApplyDryRunSchema = z.object({
  dry_run: z.literal(true),
  results: z.array(
    z.object({
      name: z.string(),
      result: PutResultSchema,
      revision: z.number().int(),
      message: z.string(),
      /** Replicas the next reconcile would start for it, and where. */
      placements: z.array(z.object({ profile: z.string(), shards: z.array(ShardViewSchema) })),
      /** Why it would get fewer replicas than it wants (never, or not now); null when it would not. */
      reason: z.string().nullable(),
      verdict: z.enum(["running", "fits", "not_now", "never", "parked"]),
      /** The model's explanation in one sentence, on the new catalog. */
      summary: z.string(),
    }),
  ),
});
export type ApplyDryRun = z.infer<typeof ApplyDryRunSchema>;

/** `POST /apply`'s answer: the dry run's when asked for (`dry_run: true`), else what was applied. */
export const ApplyAnswerSchema = z.union([ApplyDryRunSchema, ApplyResultSchema]);

/**
 * `GET /usage`: one row of the usage ledger (per team, key, model and hour; grouped, the fields
 * not grouped by are "" and hour is 0). Tokens are the engines' own usage; a stream cut short
 * counts what it streamed. gpu_seconds is not metered yet (always 0).
 */
export const UsageRowViewSchema = z.object({
  team: z.string(),
  key: z.string(),
  model: z.string(),
  /** Set when grouped by pool. */
  pool: z.string().optional(),
  hour: z.number().describe("Start of the hour, ms since the epoch (0 when grouped)."),
  requests: z.number(),
  prompt_tokens: z.number(),
  completion_tokens: z.number(),
  cached_tokens: z.number(),
  errors: z.number().describe("All failed requests: errors_4xx + errors_5xx + refused."),
  errors_4xx: z.number(),
  errors_5xx: z.number(),
  refused: z.number().describe("Refused by the key's or its team's limits."),
  aborted: z.number().describe("Streams cut by the client or the engine before their end."),
  gpu_seconds: z.number(),
});
export type UsageRowView = z.infer<typeof UsageRowViewSchema>;
