// Every route of the admin listener (admin API, agent API, /healthz) with the zod schemas it
// parses and answers, and the OpenAPI 3.1 document built from them. Handlers parse with the
// schemas held here, and a test compares this table with the routes Hono actually registered,
// so the document cannot fall behind the code.

import { z } from "zod";
import {
  AllowAddressBody,
  CreateKeyBody,
  CreateTeamBody,
  ApplyQuery,
  DeleteNodeQuery,
  DeleteTeamQuery,
  UsageQuery,
  EventsQuery,
  JoinTokenRotatedSchema,
  LogsQuery,
  NodeAddressListSchema,
  NodeAddressSchema,
  NodeAddressResultSchema,
  NodeApprovedSchema,
  NodeDeletedSchema,
  ReplicasQuery,
  UpdateKeyBody,
  UpdateTeamBody,
} from "../protocol/admin";
import { CatalogFile, ModelSpec } from "../protocol/catalog";
import { Duration, Labels, Name, SegmentName } from "../protocol/common";
import { Assignment, AssignmentsQuery, GpuReport, HeartbeatRequest, HeartbeatResponse, ReplicaReport } from "../protocol/heartbeat";
import * as V from "../protocol/views";
import { ReplicaDriftSchema } from "../protocol/ledger-check";
import * as W from "../protocol/weights-admin";

type Method = "get" | "post" | "put" | "patch" | "delete";
type ErrorStatus = 400 | 401 | 403 | 404 | 409 | 413 | 415 | 429 | 503;

interface Success {
  status: 200 | 201;
  description: string;
  /** A zod schema named in INPUTS or OUTPUTS, or an array of one. */
  schema?: z.ZodType;
  /** For answers that are not JSON described by zod (a download, this document). */
  contentType?: string;
  jsonSchema?: Record<string, unknown>;
  headers?: Record<string, { description: string; schema: Record<string, unknown> }>;
}

export interface RouteDoc {
  method: Method;
  /** OpenAPI style: `{name}` for a parameter. */
  path: string;
  summary: string;
  description?: string;
  tags: string[];
  /** Which bearer token the route takes; none for /healthz; "agent" is a node credential or, for a first heartbeat, the join token. */
  auth: "admin" | "agent" | "credential" | "none";
  /** Path parameters: their schema and what they name. */
  params?: Record<string, { schema: z.ZodType; description: string }>;
  /** The query schema the handler parses; each property becomes a query parameter. */
  query?: z.ZodObject;
  /** Descriptions of the query parameters (the protocol schemas carry them as comments). */
  queryDocs?: Record<string, string>;
  /** The body schema the handler parses (documented as its input: before defaults). */
  body?: z.ZodType;
  /** Body fields the URL supplies, so the body may leave them out; documented as `component`. */
  bodyFromUrl?: { fields: string[]; component: string; description: string };
  ok: Success[];
  errors: ErrorStatus[];
}

const NODE_NAME = { schema: SegmentName, description: "The node's name, as its agent reports it." };
const MODEL_NAME = {
  schema: z.string().min(1),
  description: "The model's name or one of its aliases. Names may contain `/`: send it as is or escaped as %2F.",
};
const KEY_NAME = { schema: z.string().min(1), description: "The key's name." };
const TEAM_NAME = { schema: z.string().min(1), description: "The team's name." };
const WRITE_ERRORS: ErrorStatus[] = [400, 401, 409, 413, 415, 503];

/** The admin listener's routes, keyed by operationId. */
export const ROUTES = {
  health: {
    method: "get",
    path: "/healthz",
    summary: "Liveness and version; needs no token",
    tags: ["meta"],
    auth: "none",
    ok: [{ status: 200, description: "The server is up.", schema: V.HealthSchema }],
    errors: [],
  },
  openApi: {
    method: "get",
    path: "/api/v1/openapi.json",
    summary: "This document",
    tags: ["meta"],
    auth: "admin",
    ok: [{ status: 200, description: "The OpenAPI 3.1 document of this listener.", contentType: "application/json", jsonSchema: { type: "object" } }],
    errors: [401],
  },
  summary: {
    method: "get",
    path: "/api/v1/summary",
    summary: "Fleet summary: capacity, fabrics, replicas, models, what needs attention",
    tags: ["fleet"],
    auth: "admin",
    ok: [{ status: 200, description: "Derived from the same state as the tables.", schema: V.SummarySchema }],
    errors: [401],
  },
  listNodes: {
    method: "get",
    path: "/api/v1/nodes",
    summary: "The node table",
    tags: ["nodes"],
    auth: "admin",
    ok: [{ status: 200, description: "Every node, by name.", schema: z.array(V.NodeViewSchema) }],
    errors: [401],
  },
  getNode: {
    method: "get",
    path: "/api/v1/nodes/{name}",
    summary: "One node with its GPUs",
    tags: ["nodes"],
    auth: "admin",
    params: { name: NODE_NAME },
    ok: [{ status: 200, description: "The node.", schema: V.NodeViewSchema }],
    errors: [401, 404],
  },
  deleteNode: {
    method: "delete",
    path: "/api/v1/nodes/{name}",
    summary: "Forget a node and its credential; it joins again only with the join token",
    description: "Refused (409) while replicas run on the node, unless force=1, which stops them so they are placed elsewhere. The agent must then remove its credential file to join again.",
    tags: ["nodes"],
    auth: "admin",
    params: { name: NODE_NAME },
    query: DeleteNodeQuery,
    queryDocs: { force: "Delete even while replicas run on the node (1 or true)." },
    ok: [{ status: 200, description: "Deleted; `stopped` lists the replicas that were still on it.", schema: NodeDeletedSchema }],
    errors: [400, 401, 404, 409, 503],
  },
  approveNode: {
    method: "post",
    path: "/api/v1/nodes/{name}/approve",
    summary: "Admit a node waiting as pending (serve --approve-nodes)",
    tags: ["nodes"],
    auth: "admin",
    params: { name: NODE_NAME },
    ok: [{ status: 200, description: "Approved, or it was not pending (`changed: false`).", schema: NodeApprovedSchema }],
    errors: [401, 404, 503],
  },
  listNodeAddresses: {
    method: "get",
    path: "/api/v1/node-addresses",
    summary: "Data-plane addresses nodes may report besides their heartbeats' source",
    tags: ["nodes"],
    auth: "admin",
    ok: [{ status: 200, description: "Every allowance, by node name.", schema: NodeAddressListSchema }],
    errors: [401],
  },
  allowNodeAddress: {
    method: "put",
    path: "/api/v1/nodes/{name}/address",
    summary: "Allow a node to report this data-plane address although its heartbeats come from another",
    description: "The name need not have joined yet. A host name is accepted here only: a node reporting a host name is refused unless it is the one allowed.",
    tags: ["nodes"],
    auth: "admin",
    params: { name: NODE_NAME },
    body: AllowAddressBody,
    ok: [{ status: 200, description: "Allowed (`changed: false` when it already was).", schema: NodeAddressResultSchema }],
    errors: [400, 401, 404, 413, 415, 503],
  },
  disallowNodeAddress: {
    method: "delete",
    path: "/api/v1/nodes/{name}/address",
    summary: "Withdraw a node's address allowance",
    tags: ["nodes"],
    auth: "admin",
    params: { name: NODE_NAME },
    ok: [{ status: 200, description: "Withdrawn (`changed: false` when there was none).", schema: NodeAddressResultSchema }],
    errors: [401, 404, 503],
  },
  rotateJoinToken: {
    method: "post",
    path: "/api/v1/join-token/rotate",
    summary: "Replace the join token: the old one stops admitting new nodes at once",
    description: "The new token is written where the old one was (join.token in the data dir, 0600) and is not in the answer. Joined nodes keep working with their credentials.",
    tags: ["nodes"],
    auth: "admin",
    ok: [{ status: 200, description: "Rotated; `path` is where the new token is.", schema: JoinTokenRotatedSchema }],
    errors: [401, 409, 503],
  },
  cordonNode: nodeAction("cordon", "Stop placing replicas on a node"),
  uncordonNode: nodeAction("uncordon", "Allow placement on a node again"),
  drainNode: nodeAction("drain", "Move a node's replicas away and leave it cordoned"),
  listReplicas: {
    method: "get",
    path: "/api/v1/replicas",
    summary: "The replica table, optionally of one model",
    tags: ["replicas"],
    auth: "admin",
    query: ReplicasQuery,
    queryDocs: { model: "Only this model's replicas (name or alias)." },
    ok: [{ status: 200, description: "Replicas with placement and idle time.", schema: z.array(V.ReplicaViewSchema) }],
    errors: [400, 401],
  },
  listModels: {
    method: "get",
    path: "/api/v1/models",
    summary: "The catalog's models and whether they have what they want",
    tags: ["models"],
    auth: "admin",
    ok: [{ status: 200, description: "Every model, by name.", schema: z.array(V.ModelViewSchema) }],
    errors: [401],
  },
  getModel: {
    method: "get",
    path: "/api/v1/models/{name}",
    summary: "One model: its table row and its stored spec",
    tags: ["models"],
    auth: "admin",
    params: { name: MODEL_NAME },
    ok: [{ status: 200, description: "`spec` is in the form PUT accepts, so GET → PUT round-trips.", schema: V.ModelDetailSchema }],
    errors: [401, 404],
  },
  putModel: {
    method: "put",
    path: "/api/v1/models/{name}",
    summary: "Create or replace one model",
    tags: ["models"],
    auth: "admin",
    params: { name: { schema: Name, description: "The model's name (not an alias). Names may contain `/`." } },
    body: ModelSpec,
    bodyFromUrl: {
      fields: ["name"],
      component: "ModelSpecPut",
      description: "A ModelSpec whose `name` may be left out: it defaults to the URL's, and must match it when given.",
    },
    ok: [
      { status: 200, description: "Replaced (`configured`) or identical (`unchanged`).", schema: V.ModelPutResultSchema },
      { status: 201, description: "Created.", schema: V.ModelPutResultSchema },
    ],
    errors: WRITE_ERRORS,
  },
  deleteModel: {
    method: "delete",
    path: "/api/v1/models/{name}",
    summary: "Remove a model from the catalog; its replicas stop",
    tags: ["models"],
    auth: "admin",
    params: { name: MODEL_NAME },
    ok: [{ status: 200, description: "Deleted.", schema: V.ModelDeletedSchema }],
    errors: [401, 404, 503],
  },
  unparkModel: {
    method: "post",
    path: "/api/v1/models/{name}/unpark",
    summary: "Clear a parked model so it is tried again",
    tags: ["models"],
    auth: "admin",
    params: { name: MODEL_NAME },
    ok: [{ status: 200, description: "Unparked, or it was not parked (`changed: false`).", schema: V.UnparkResultSchema }],
    errors: [401, 404, 503],
  },
  restartModel: {
    method: "post",
    path: "/api/v1/models/{name}/restart",
    summary: "Replace a model's replicas one at a time (a rolling restart)",
    tags: ["models"],
    auth: "admin",
    description:
      "As a catalog change to how replicas start would: a new replica is placed and becomes ready before an old one stops; an old one gets no new requests and stops once its requests in flight finish or the server's drain timeout passes. For after an engine upgrade on the nodes. The roll's progress is in the model's `rollout` (GET /api/v1/models/{name}).",
    params: { name: MODEL_NAME },
    ok: [{ status: 200, description: "The replicas running now are marked to be replaced.", schema: V.RestartResultSchema }],
    errors: [401, 404, 503],
  },
  apply: {
    method: "post",
    path: "/api/v1/apply",
    summary: "Create or replace every model of a catalog file, all or none",
    tags: ["models"],
    auth: "admin",
    description:
      "With dry_run=1 (or true) the file is validated the same way (400 and 409 alike), nothing is written and no event is logged; the answer (ApplyDryRun) says per model what apply would do, where the next reconcile would start its new replicas (node and GPUs), and why not when it would not (never on this fleet, or not now).",
    query: ApplyQuery,
    queryDocs: { dry_run: "Change nothing: say what would change and where each new replica would go (1 or true)." },
    body: CatalogFile,
    ok: [
      {
        status: 200,
        description: "One result per model, in the file's order: ApplyResult, or ApplyDryRun (with `dry_run: true`, placements and reasons) for dry_run=1.",
        schema: V.ApplyAnswerSchema,
      },
    ],
    errors: WRITE_ERRORS,
  },
  explainModel: {
    method: "get",
    path: "/api/v1/models/{name}/explain",
    summary: "Why a model has (or has not) the replicas it wants, and what would make it fit",
    description:
      "Per profile in priority order: how many nodes each rule ruled out (class, GPU count, state, engine, unhealthy cards, GPUs in use, fabric), the nodes that fit, whether it fits now, not now or never, and suggestions (evicting named idle replicas, uncordoning or approving a node, waiting for one). Changes nothing.",
    tags: ["models"],
    auth: "admin",
    params: { name: MODEL_NAME },
    ok: [{ status: 200, description: "The explanation.", schema: V.ExplanationSchema }],
    errors: [401, 404],
  },
  listKeys: {
    method: "get",
    path: "/api/v1/keys",
    summary: "Client API keys (never the keys themselves)",
    tags: ["keys"],
    auth: "admin",
    ok: [{ status: 200, description: "Every key, by name.", schema: z.array(V.ApiKeyViewSchema) }],
    errors: [401],
  },
  createKey: {
    method: "post",
    path: "/api/v1/keys",
    summary: "Create a client API key for the router",
    tags: ["keys"],
    auth: "admin",
    body: CreateKeyBody,
    ok: [{ status: 201, description: "Created; the only answer that shows the key.", schema: V.CreatedApiKeySchema }],
    // 404: the team it names does not exist.
    errors: [...WRITE_ERRORS, 404],
  },
  revokeKey: {
    method: "delete",
    path: "/api/v1/keys/{name}",
    summary: "Revoke a client API key",
    tags: ["keys"],
    auth: "admin",
    params: { name: KEY_NAME },
    ok: [{ status: 200, description: "Revoked.", schema: V.ApiKeyRevokedSchema }],
    errors: [401, 404, 503],
  },
  updateKey: {
    method: "patch",
    path: "/api/v1/keys/{name}",
    summary: "Change a client API key's pool, team, models, expiry, priority or limits",
    description: "Fields left out stay as they are; null clears one (a limit given null: no limit).",
    tags: ["keys"],
    auth: "admin",
    params: { name: KEY_NAME },
    body: UpdateKeyBody,
    ok: [{ status: 200, description: "The key as it now stands.", schema: V.ApiKeyUpdatedSchema }],
    errors: [400, 401, 404, 413, 415, 503],
  },
  listTeams: {
    method: "get",
    path: "/api/v1/teams",
    summary: "Teams: limits their keys share",
    tags: ["keys"],
    auth: "admin",
    ok: [{ status: 200, description: "Every team, by name, with its keys.", schema: z.array(V.TeamViewSchema) }],
    errors: [401],
  },
  createTeam: {
    method: "post",
    path: "/api/v1/teams",
    summary: "Create a team",
    tags: ["keys"],
    auth: "admin",
    body: CreateTeamBody,
    ok: [{ status: 201, description: "Created.", schema: V.TeamWrittenSchema }],
    errors: WRITE_ERRORS,
  },
  getTeam: {
    method: "get",
    path: "/api/v1/teams/{name}",
    summary: "One team with its keys",
    tags: ["keys"],
    auth: "admin",
    params: { name: TEAM_NAME },
    ok: [{ status: 200, description: "The team.", schema: V.TeamViewSchema }],
    errors: [401, 404],
  },
  updateTeam: {
    method: "patch",
    path: "/api/v1/teams/{name}",
    summary: "Change a team's priority or limits",
    description: "Fields left out stay as they are; null clears one. Every router holds the team's keys to the new limits.",
    tags: ["keys"],
    auth: "admin",
    params: { name: TEAM_NAME },
    body: UpdateTeamBody,
    ok: [{ status: 200, description: "The team as it now stands.", schema: V.TeamWrittenSchema }],
    errors: [400, 401, 404, 413, 415, 503],
  },
  deleteTeam: {
    method: "delete",
    path: "/api/v1/teams/{name}",
    summary: "Delete a team",
    description: "Refused (409, naming them) while keys belong to the team, unless force=1, which revokes them with it.",
    tags: ["keys"],
    auth: "admin",
    params: { name: TEAM_NAME },
    query: DeleteTeamQuery,
    queryDocs: { force: "1 to delete it even with keys, revoking them." },
    ok: [{ status: 200, description: "Deleted; `revoked` names the keys revoked with it.", schema: V.TeamDeletedSchema }],
    errors: [400, 401, 404, 409, 503],
  },
  usage: {
    method: "get",
    path: "/api/v1/usage",
    summary: "The usage ledger: what each team, key and model used, per hour",
    description:
      "Rows per team, key (by name; both \"\" for requests without a key), model and hour, from the engines' own usage. With `by`, added up per team, key, model or pool (the other fields \"\", hour 0), largest first. Written once a control-plane tick: the last few seconds may not show yet. gpu_seconds is not metered yet (0).",
    tags: ["keys"],
    auth: "admin",
    query: UsageQuery,
    queryDocs: { since: "How far back, a duration (default 24h): rows of the hours that overlap it.", by: "Add the rows up per team, key, model or pool." },
    ok: [{ status: 200, description: "The rows, by hour then team, key and model; grouped, largest first.", schema: z.array(V.UsageRowViewSchema) }],
    errors: [400, 401, 503],
  },
  usageCheck: {
    method: "get",
    path: "/api/v1/usage/check",
    summary: "The usage ledger checked against the engines' own token counters, per replica",
    description:
      "Per replica this control plane's router sends requests to: the growth of its engine's own prompt and generation token counters (vLLM, SGLang, llama-server /metrics) since a baseline, beside the tokens the ledger counted for the requests that ended on it, and the difference (drift = engine − ledger). Compared only at moments the replica had nothing in flight; an engine restart takes a new baseline. A replica whose engine exports no such counters is `no_counters`: unknown, not 0. The same drift is the router's llmgw_ledger_drift_tokens.",
    tags: ["keys"],
    auth: "admin",
    ok: [{ status: 200, description: "One entry per replica, by id.", schema: z.array(ReplicaDriftSchema) }],
    errors: [401, 503],
  },
  replicaLogs: {
    method: "get",
    path: "/api/v1/replicas/{id}/logs",
    summary: "A replica's engine log, fetched from its node's agent",
    description:
      "Plain text. With follow=1 the response stays open and carries new lines as the engine writes them. With previous=1, the log of the replica's past run: the one before the current run, or the last run of a replica whose engine exited or that was stopped (its agent keeps it up to an hour), also for a replica no longer in the control plane.",
    tags: ["fleet"],
    auth: "admin",
    params: { id: { schema: z.string().min(1), description: "The replica's id." } },
    query: LogsQuery,
    queryDocs: { tail: "Lines from the end of the log to start with.", follow: "1 to keep streaming new lines.", previous: "1 for the past run's log (not with follow)." },
    ok: [{ status: 200, description: "The log, as text.", contentType: "text/plain", jsonSchema: { type: "string" } }],
    errors: [400, 401, 404, 503],
  },
  backup: {
    method: "get",
    path: "/api/v1/backup",
    summary: "A consistent copy of the database, taken while the server runs",
    tags: ["meta"],
    auth: "admin",
    ok: [
      {
        status: 200,
        description: "The SQLite database file, as an attachment.",
        contentType: "application/vnd.sqlite3",
        headers: { "Content-Disposition": { description: 'attachment; filename="llmgw.db"', schema: { type: "string" } } },
      },
    ],
    errors: [401, 503],
  },
  weights: {
    method: "get",
    path: "/api/v1/weights",
    summary: "The weights fetched from the Hub: per revision, every node's copy (present, fetching with how far, absent)",
    description: "Revisions a catalog model names, the transfer plan knows or a node holds. 404 when the server has no Hub (nothing is fetched).",
    tags: ["fleet"],
    auth: "admin",
    ok: [{ status: 200, description: "The revisions, by model, repository and revision.", schema: z.array(W.WeightsRowViewSchema) }],
    errors: [401, 404],
  },
  pullWeights: {
    method: "post",
    path: "/api/v1/weights/pull",
    summary: "Fetch a model's weights onto a fabric's nodes or the nodes named, ahead of need",
    description: "The nodes fetch the model's pinned revision as for a replica (from the Hub once per fabric, then from peers). Kept in the store until every node named holds the revision: a restarted head node, or the control plane leading after it, carries it on.",
    tags: ["fleet"],
    auth: "admin",
    body: W.WeightsPullBody,
    ok: [{ status: 200, description: "The nodes that will fetch it.", schema: W.WeightsPullResultSchema }],
    errors: [400, 401, 404, 413, 415],
  },
  removeWeights: {
    method: "post",
    path: "/api/v1/weights/remove",
    summary: "Remove a model's weights (or a repository's, ORG/NAME[@COMMIT]) from one node",
    description: "Refused (409) while a replica on the node uses them, naming it, and for weights llmgw did not fetch. The node removes them at its next heartbeat; the event log says when (weights.removed) or why not (weights.remove_refused).",
    tags: ["fleet"],
    auth: "admin",
    body: W.WeightsRemoveBody,
    ok: [{ status: 200, description: "The node was asked to remove them.", schema: W.WeightsRemoveResultSchema }],
    errors: [400, 401, 404, 409, 413, 415],
  },
  events: {
    method: "get",
    path: "/api/v1/events",
    summary: "What the control plane did and why, oldest first",
    tags: ["fleet"],
    auth: "admin",
    query: EventsQuery,
    queryDocs: {
      after: "Only events after this id (for following).",
      limit: "At most this many events.",
      subject: 'Only events about this subject, e.g. "node/gpu-01" or "model/llama".',
    },
    ok: [{ status: 200, description: "Events, oldest first.", schema: z.array(V.EventViewSchema) }],
    errors: [400, 401],
  },
  heartbeat: {
    method: "post",
    path: "/agent/v1/heartbeat",
    summary: "A node agent reports its inventory and replicas; the answer is what it should run",
    description:
      "A new node's first heartbeat carries the join token and is answered with the node's own credential (`credential`, this once); every later request of that node carries the credential. A name that has joined is refused the join token (409). The reported address must be the heartbeat's source address unless allowed for the node (PUT /api/v1/nodes/{name}/address), else 403. 429 with Retry-After beyond the per-node rate (serve --heartbeat-rate).",
    tags: ["agent"],
    auth: "agent",
    body: HeartbeatRequest,
    ok: [{ status: 200, description: "The complete set of replicas the node should run.", schema: HeartbeatResponse }],
    errors: [400, 401, 403, 409, 413, 429, 503],
  },
  assignments: {
    method: "get",
    path: "/agent/v1/assignments",
    summary: "Long poll: answers when the node's assignments change, or after wait_ms",
    description: "With the node's credential only, and only for that node (403 otherwise).",
    tags: ["agent"],
    auth: "credential",
    query: AssignmentsQuery,
    queryDocs: {
      node: "The asking node.",
      generation: "The generation the agent has; the answer comes as soon as the server's differs.",
      wait_ms: "How long to wait for a change before answering anyway.",
    },
    ok: [{ status: 200, description: "What the node should run now.", schema: HeartbeatResponse }],
    errors: [400, 401, 403, 429],
  },
} satisfies Record<string, RouteDoc>;

function nodeAction<A extends "cordon" | "uncordon" | "drain">(action: A, summary: string) {
  return {
    method: "post",
    path: `/api/v1/nodes/{name}/${action}`,
    summary,
    tags: ["nodes"],
    auth: "admin",
    params: { name: NODE_NAME },
    ok: [{ status: 200, description: "Done, or it already was (`changed: false`).", schema: V.NodeActionResultSchema }],
    errors: [401, 404, 503],
  } satisfies RouteDoc;
}

// ---- components -----------------------------------------------------------------------

/** Request schemas, documented as what clients send (before defaults and transforms). */
const INPUTS: [z.ZodType, string, string?][] = [
  [ModelSpec, "ModelSpec", "A model of the catalog. Also: replicas.max ≥ replicas.min; profile names are unique; a llama.cpp profile has nodes = 1; a profile of a MIG class (one with a `/`) has gpus = 1, since one CUDA process can use only one MIG device; aliases are distinct and not the model's own name."],
  [CatalogFile, "CatalogFile", "A whole catalog. Names and aliases share one namespace: no name or alias may be used by two models."],
  [CreateKeyBody, "CreateKeyBody", "A client API key. Limits are positive whole numbers (budget_gpu_hours a positive number); expires is a duration from now (30d, 12h) or an RFC 3339 time; a key names at most 256 models."],
  [UpdateKeyBody, "UpdateKeyBody", "What changes: a field left out stays, null clears it."],
  [CreateTeamBody, "CreateTeamBody", "A team: limits its keys share (each key is held to its own and its team's)."],
  [UpdateTeamBody, "UpdateTeamBody", "What changes: a field left out stays, null clears it."],
  [AllowAddressBody, "AllowAddressBody"],
  [W.WeightsPullBody, "WeightsPullBody"],
  [W.WeightsRemoveBody, "WeightsRemoveBody"],
  [HeartbeatRequest, "HeartbeatRequest", "GPU indices and uuids are unique within a heartbeat."],
  [GpuReport, "GpuReport"],
  [ReplicaReport, "ReplicaReport"],
];

/** Answer schemas, documented as the server sends them. */
const OUTPUTS: [z.ZodType, string][] = [
  [ReplicaDriftSchema, "ReplicaDrift"],
  [V.HealthSchema, "Health"],
  [V.SummarySchema, "Summary"],
  [V.NodeTotalsSchema, "NodeTotals"],
  [V.ClassUseSchema, "ClassUse"],
  [V.FabricUseSchema, "FabricUse"],
  [V.ReplicaTotalsSchema, "ReplicaTotals"],
  [V.ModelTotalsSchema, "ModelTotals"],
  [V.ParkedModelSchema, "ParkedModel"],
  [V.IdleReplicaSchema, "IdleReplica"],
  [V.EvictionSchema, "Eviction"],
  [V.StoreMemberSchema, "StoreMember"],
  [V.ControlPlanesSchema, "ControlPlanes"],
  [V.ControlPlaneSchema, "ControlPlane"],
  [V.NodeViewSchema, "NodeView"],
  [V.GpuViewSchema, "GpuView"],
  [V.ReplicaViewSchema, "ReplicaView"],
  [V.ShardViewSchema, "ShardView"],
  [V.ModelViewSchema, "ModelView"],
  [V.ModelDetailSchema, "ModelDetail"],
  [V.ModelPutResultSchema, "ModelPutResult"],
  [V.ModelDeletedSchema, "ModelDeleted"],
  [V.UnparkResultSchema, "UnparkResult"],
  [V.RestartResultSchema, "RestartResult"],
  [V.ApplyResultSchema, "ApplyResult"],
  [V.ApplyDryRunSchema, "ApplyDryRun"],
  [V.ApplyAnswerSchema, "ApplyAnswer"],
  [V.ExplanationSchema, "Explanation"],
  [V.ProfileExplanationSchema, "ProfileExplanation"],
  [V.OutcomeCountSchema, "OutcomeCount"],
  [V.SuggestionSchema, "Suggestion"],
  [V.NodeActionResultSchema, "NodeActionResult"],
  [NodeDeletedSchema, "NodeDeleted"],
  [NodeAddressSchema, "NodeAddress"],
  [NodeApprovedSchema, "NodeApproved"],
  [NodeAddressResultSchema, "NodeAddressResult"],
  [JoinTokenRotatedSchema, "JoinTokenRotated"],
  [V.ApiKeyViewSchema, "ApiKeyView"],
  [V.CreatedApiKeySchema, "CreatedApiKey"],
  [V.ApiKeyRevokedSchema, "ApiKeyRevoked"],
  [V.ApiKeyUpdatedSchema, "ApiKeyUpdated"],
  [V.LimitUseSchema, "LimitUse"],
  [V.TeamViewSchema, "TeamView"],
  [V.TeamWrittenSchema, "TeamWritten"],
  [V.TeamDeletedSchema, "TeamDeleted"],
  [V.UsageRowViewSchema, "UsageRow"],
  [V.EventViewSchema, "EventView"],
  [W.WeightsRowViewSchema, "WeightsRow"],
  [W.WeightsNodeViewSchema, "WeightsNode"],
  [W.WeightsPullResultSchema, "WeightsPullResult"],
  [W.WeightsRemoveResultSchema, "WeightsRemoveResult"],
  [HeartbeatResponse, "HeartbeatResponse"],
  [Assignment, "Assignment"],
  [V.ApiErrorSchema, "ApiError"],
];

const REF = (name: string) => `#/components/schemas/${name}`;

/**
 * Refinements zod cannot export, written as JSON Schema so the document says them too. Keyed
 * by the protocol's own schema objects, so a refinement moved elsewhere drops out, not wrong.
 */
const REFINED = new Map<unknown, Record<string, unknown>>([
  [Name, { not: { pattern: "(^|/)\\.{0,2}(/|$)" }, description: "Letters, digits and . _ : / -; no empty, '.' or '..' path segments." }],
  [SegmentName, { not: { pattern: "/|^\\.{1,2}$" }, description: "Letters, digits and . _ : -; no '/'." }],
  [Labels, { maxProperties: 64 }],
  [Duration, { minimum: 0, description: 'A duration such as "250ms", "15s", "30m" or "1h30m", or a number of seconds.' }],
]);

type Json = Record<string, unknown>;

function generate(entries: [z.ZodType, string, string?][], io: "input" | "output"): Record<string, Json> {
  const registry = z.registry<{ id: string }>();
  for (const [schema, id] of entries) registry.add(schema, { id });
  const { schemas } = z.toJSONSchema(registry, {
    target: "draft-2020-12",
    io,
    uri: REF,
    override: ({ zodSchema, jsonSchema }) => {
      const extra = REFINED.get(zodSchema);
      if (extra) Object.assign(jsonSchema, extra);
    },
    // The model detail's spec is a ModelSpec as a client would send it: point at that schema.
    unrepresentable: ({ zodSchema }) => (zodSchema === V.ModelSpecWireSchema ? { $ref: REF("ModelSpec") } : "throw"),
  });
  const out: Record<string, Json> = {};
  for (const [id, s] of Object.entries(schemas)) out[id] = tidy(s as Json) as Json;
  for (const [, id, description] of entries) if (description) out[id]!.description = description;
  return out;
}

/** Drops what a reader of the document does not need: per-schema $schema/$id, JS's safe-integer bounds, zod's date-time regex (format says it). */
function tidy(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(tidy);
  if (v === null || typeof v !== "object") return v;
  const o: Json = {};
  for (const [k, x] of Object.entries(v)) {
    if (k === "$schema" || k === "$id") continue;
    if ((k === "minimum" || k === "maximum") && Math.abs(x as number) === Number.MAX_SAFE_INTEGER) continue;
    if (k === "pattern" && (v as Json).format === "date-time") continue;
    o[k] = tidy(x);
  }
  return o;
}

function schemaRef(schema: z.ZodType, names: Map<z.ZodType, string>, where: string): Json {
  const name = names.get(schema);
  if (name) return { $ref: REF(name) };
  if (schema instanceof z.ZodArray) return { type: "array", items: schemaRef(schema.element as z.ZodType, names, where) };
  throw new Error(`openapi: ${where} uses a schema that is not a named component`);
}

/** A schema of one property on its own (a parameter), as a client writes it. */
function paramSchema(schema: z.ZodType): Json {
  return tidy(z.toJSONSchema(schema, { target: "draft-2020-12", io: "input", override: ({ zodSchema, jsonSchema }) => Object.assign(jsonSchema, REFINED.get(zodSchema) ?? {}) })) as Json;
}

const ERRORS: Record<ErrorStatus, { name: string; description: string }> = {
  400: { name: "BadRequest", description: "The body or query is invalid; `issues` names every problem with its path." },
  401: { name: "Unauthorized", description: "Missing or wrong bearer token." },
  403: { name: "Forbidden", description: "The token is valid but may not do this (another node's data, an address not allowed, the node limit)." },
  404: { name: "NotFound", description: "No such node, model, key or team." },
  409: { name: "Conflict", description: "The request conflicts with what is stored (a name already in use); `issues` says where." },
  413: { name: "PayloadTooLarge", description: "The body exceeds the server's limit." },
  415: { name: "UnsupportedMediaType", description: "The body is not application/json." },
  429: { name: "TooManyRequests", description: "This node exceeds its request rate; retry after the Retry-After seconds." },
  503: { name: "StoreUnavailable", description: "The database cannot be written (disk full, locked, unwritable); nothing was changed. Retry after the Retry-After seconds." },
};

let cached: { version: string; doc: Json } | undefined;

/** The OpenAPI 3.1 document of the admin listener. */
export function openApiDocument(version: string): Json {
  if (cached?.version === version) return cached.doc;
  const names = new Map<z.ZodType, string>();
  for (const [s, id] of [...INPUTS, ...OUTPUTS]) names.set(s, id);
  const schemas: Record<string, Json> = { ...generate(INPUTS, "input"), ...generate(OUTPUTS, "output") };

  const paths: Record<string, Record<string, Json>> = {};
  for (const [operationId, r] of Object.entries(ROUTES) as [string, RouteDoc][]) {
    const parameters: Json[] = [];
    for (const [name, p] of Object.entries(r.params ?? {}))
      parameters.push({ name, in: "path", required: true, description: p.description, schema: paramSchema(p.schema) });
    if (r.query) {
      const q = paramSchema(r.query) as { properties: Record<string, Json>; required?: string[] };
      for (const [name, schema] of Object.entries(q.properties)) {
        const description = r.queryDocs?.[name];
        parameters.push({ name, in: "query", required: q.required?.includes(name) ?? false, ...(description ? { description } : {}), schema });
      }
    }

    let requestBody: Json | undefined;
    if (r.body) {
      let ref = schemaRef(r.body, names, `${operationId}'s body`);
      if (r.bodyFromUrl) {
        const base = schemas[names.get(r.body)!]!;
        const required = (base.required as string[] | undefined)?.filter((f) => !r.bodyFromUrl!.fields.includes(f));
        schemas[r.bodyFromUrl.component] = { ...base, required, description: r.bodyFromUrl.description };
        ref = { $ref: REF(r.bodyFromUrl.component) };
      }
      requestBody = { required: true, content: { "application/json": { schema: ref } } };
    }

    const responses: Record<string, Json> = {};
    for (const ok of r.ok) {
      const type = ok.contentType ?? "application/json";
      const media = ok.schema ? { schema: schemaRef(ok.schema, names, `${operationId}'s answer`) } : ok.jsonSchema ? { schema: ok.jsonSchema } : {};
      responses[String(ok.status)] = { description: ok.description, ...(ok.headers ? { headers: ok.headers } : {}), content: { [type]: media } };
    }
    for (const status of r.errors) responses[String(status)] = { $ref: `#/components/responses/${ERRORS[status].name}` };
    responses["500"] = { $ref: "#/components/responses/Internal" };

    (paths[r.path] ??= {})[r.method] = {
      operationId,
      summary: r.summary,
      ...(r.description ? { description: r.description } : {}),
      tags: r.tags,
      security:
        r.auth === "none" ? [] : r.auth === "admin" ? [{ adminToken: [] }] : r.auth === "credential" ? [{ nodeCredential: [] }] : [{ nodeCredential: [] }, { joinToken: [] }],
      ...(parameters.length ? { parameters } : {}),
      ...(requestBody ? { requestBody } : {}),
      responses,
    };
  }

  const errorContent = { "application/json": { schema: { $ref: REF("ApiError") } } };
  const responses: Record<string, Json> = {
    Internal: { description: "Something unexpected failed; the server log has the details.", content: errorContent },
  };
  for (const { name, description } of Object.values(ERRORS))
    responses[name] = {
      description,
      ...(name === "TooManyRequests" ? { headers: { "Retry-After": { description: "Seconds to wait before retrying.", schema: { type: "integer" } } } } : {}),
      ...(name === "StoreUnavailable" ? { headers: { "Retry-After": { description: "Seconds to wait before retrying.", schema: { type: "integer" } } } } : {}),
      ...(name === "Unauthorized" ? { headers: { "WWW-Authenticate": { schema: { type: "string" } } } } : {}),
      content: errorContent,
    };

  const doc: Json = {
    openapi: "3.1.0",
    info: {
      title: "llmgw admin API",
      version,
      description:
        "The head node's admin listener: the admin API under /api/v1 (admin token), the node agents' API under /agent/v1 (each node's credential; the join token for a first heartbeat) and /healthz. Errors share one shape, ApiError. The OpenAI-compatible router is a separate listener and not described here.",
    },
    jsonSchemaDialect: "https://spec.openapis.org/oas/3.1/dialect/base",
    tags: [
      { name: "fleet", description: "The summary and the event log." },
      { name: "nodes", description: "GPU nodes and their administration." },
      { name: "replicas", description: "Running model replicas." },
      { name: "models", description: "The model catalog." },
      { name: "keys", description: "Client API keys for the router, and the teams whose limits they share." },
      { name: "agent", description: "Node agents: heartbeats and assignments." },
      { name: "meta", description: "Health, this document, backups." },
    ],
    security: [{ adminToken: [] }],
    paths,
    components: {
      schemas,
      responses,
      securitySchemes: {
        adminToken: { type: "http", scheme: "bearer", description: "The admin token (admin.token in the server's data dir)." },
        joinToken: { type: "http", scheme: "bearer", description: "The agent join token (join.token in the server's data dir): admits a new node with its first heartbeat, nothing else." },
        nodeCredential: { type: "http", scheme: "bearer", description: "A node's own credential, handed to it in the answer to its first heartbeat; it speaks only for that node." },
      },
    },
  };
  cached = { version, doc };
  return doc;
}
