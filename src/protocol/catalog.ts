// The model catalog: what a model is, as written in `catalog.yaml`, sent to
// `PUT /api/v1/models/{name}` and stored. One schema for every way in.

import { z } from "zod";
import { Duration, Name, Printable } from "./common";
import { EngineEnv } from "./engine-env";
import { nearest } from "../lib/text";
import { rendezvousProblem } from "./engine-ports";
import { SourceField } from "./weights";

export const ENGINES = ["vllm", "sglang", "llama.cpp", "fake"] as const;
export const Engine = z.enum(ENGINES);
export type Engine = z.infer<typeof Engine>;

export const CATALOG_LIMITS = { models: 2000, profiles: 16, aliases: 32, args: 256 } as const;

export const Profile = z.strictObject({
  name: Name,
  engine: Engine,
  gpu_class: Printable(128).min(1),
  /** GPUs per shard; a shard lives on one node. */
  gpus: z.number().int().min(1).max(64).default(1),
  /** Shards, each on its own whole node, all in one fabric. */
  nodes: z.number().int().min(1).max(64).default(1),
  /** Router tier: lower is preferred; the router spills to the next tier when saturated. */
  priority: z.number().int().min(0).max(1000).default(0),
  /**
   * Requests a replica of this profile is sent at once: when every replica of the model is at
   * it, the router holds requests and admits them fairly as slots free (src/router/fair-queue.ts).
   * Absent: no bound, and the engine queues whatever it is sent.
   */
  max_inflight: z
    .number({ error: "must be a whole number of requests, 1 to 100000" })
    .int("must be a whole number of requests, 1 to 100000")
    .min(1, "must be at least 1 (leave it out for no bound)")
    .max(100_000, "may be at most 100000")
    .optional(),
  args: z.array(z.string().max(4096)).max(CATALOG_LIMITS.args).default([]),
  /** The engine's environment on top of the agent's own; the variables in engine-env.ts are refused. */
  env: EngineEnv.default({}),
  /**
   * How long a replica of this profile has to become healthy, from the agent's launch; the head
   * node waits this plus a margin (see ReconcileConfig.startMarginMs). Absent: the server's
   * `--start-timeout`, whose default is sized for a 70B cold start.
   */
  start_timeout: Duration.refine((ms) => ms >= 1000, "must be at least 1s").optional(),
});
export type Profile = z.infer<typeof Profile>;

/**
 * A MIG class: the agent names a GPU instance "<card class>/<profile>" (e.g. "A100-80GB/3g.40gb")
 * and a compute instance "<card class>/<n>c.<profile>"; whole cards never carry a "/".
 */
export function isMigClass(gpuClass: string): boolean {
  return gpuClass.includes("/");
}

const ModelFields = z.strictObject({
  name: Name,
  aliases: z.array(Name).max(CATALOG_LIMITS.aliases).default([]),
  /** Absent: min 1, or min 0 for an on-demand model (it starts when asked for). */
  replicas: z
    .strictObject({
      min: z.number().int().min(0).max(1000).optional(),
      max: z.number().int().min(0).max(1000).optional(),
    })
    .optional(),
  /** true: no replica until asked for, and back to none after idle_timeout. */
  on_demand: z.boolean().default(false),
  idle_timeout: Duration.prefault("30m"),
  pool: Printable(64).min(1).default("default"),
  weight: z.number().positive().max(1000).default(1),
  placement: z.enum(["binpack", "spread"]).default("binpack"),
  /**
   * Where the weights come from: hf://ORG/NAME (fetched from the Hub by the head node's plan, and
   * copied between nodes of a fabric) or file:///PATH (placed on some node by an operator).
   * Without it, weights are wherever an operator put them under each agent's models directory.
   */
  source: SourceField.optional(),
  /**
   * The Hugging Face commit every replica loads (the snapshot of that name in the hub cache
   * layout); without it the head node picks the newest revision all of a replica's nodes have.
   * With an hf:// source it may name a branch or tag (main when absent): the head node resolves
   * it to its commit when the catalog is applied, and that commit is what is kept.
   */
  revision: z
    .string({ error: "must be a 40-character commit hash, as a string (quote it in YAML)" })
    .min(1)
    .max(256)
    .optional(),
  /** In-flight requests per replica the load-based scaler aims for (router issue). */
  target_inflight: z.number().int().min(1).max(100000).optional(),
  profiles: z.array(Profile).min(1, "a model needs at least one profile").max(CATALOG_LIMITS.profiles),
});

/** A model's minimum when its file gives none: an on-demand model waits to be asked for. */
const defaultMin = (m: { on_demand: boolean }) => (m.on_demand ? 0 : 1);

/** A commit hash: what a snapshot folder is named by. */
const COMMIT = /^[0-9a-f]{40}$/;
/** A branch or tag name as git allows it, roughly: no spaces, controls, "..", or leading "-". */
const REF = /^(?!-)(?!.*\.\.)[A-Za-z0-9._\/-]{1,256}$/;

export const ModelSpec = ModelFields.superRefine((m, ctx) => {
  if (m.revision !== undefined) {
    const hub = m.source?.startsWith("hf://") === true;
    if (!hub && !COMMIT.test(m.revision))
      ctx.addIssue({ code: "custom", path: ["revision"], message: "must be the full 40-character lowercase commit hash (a branch, tag or short hash does not name one snapshot; with an hf:// source it may)" });
    else if (hub && !REF.test(m.revision)) ctx.addIssue({ code: "custom", path: ["revision"], message: "must be a commit hash, a branch or a tag name (letters, digits and . _ / -)" });
  }
  const max = m.replicas?.max;
  const min = m.replicas?.min ?? defaultMin(m);
  if (max !== undefined && max < min) ctx.addIssue({ code: "custom", path: ["replicas", "max"], message: `max (${max}) is below min (${min})` });
  const seen = new Set<string>();
  m.profiles.forEach((p, i) => {
    if (seen.has(p.name)) ctx.addIssue({ code: "custom", path: ["profiles", i, "name"], message: `duplicate profile name "${p.name}"` });
    seen.add(p.name);
    // NVIDIA's MIG user guide: a CUDA process sees at most one MIG device, whatever
    // CUDA_VISIBLE_DEVICES lists, so tensor parallelism over MIG instances cannot start.
    if (isMigClass(p.gpu_class) && p.gpus > 1)
      ctx.addIssue({ code: "custom", path: ["profiles", i, "gpus"], message: "one CUDA process can use only one MIG device (NVIDIA MIG user guide): gpus must be 1 for a MIG class" });
    if (p.engine === "llama.cpp" && p.nodes > 1)
      ctx.addIssue({ code: "custom", path: ["profiles", i, "nodes"], message: "llama.cpp cannot run one replica across several nodes" });
    const ports = rendezvousProblem(p);
    if (ports !== undefined) ctx.addIssue({ code: "custom", path: ["profiles", i, "args"], message: ports });
  });
  m.aliases.forEach((a, i) => {
    if (a === m.name) ctx.addIssue({ code: "custom", path: ["aliases", i], message: `alias "${a}" is the model's own name` });
  });
  if (new Set(m.aliases).size !== m.aliases.length)
    ctx.addIssue({ code: "custom", path: ["aliases"], message: "aliases repeat" });
}).transform((m) => {
  const { name, aliases, replicas: given, ...rest } = m;
  const min = given?.min ?? defaultMin(m);
  // max defaults to min (or 1 for an on-demand model with min 0), so "max" always means something.
  // Rebuilt in the declared field order, given or not, so a spec reads (and stores) the same either way.
  return { name, aliases, replicas: { min, max: given?.max ?? Math.max(min, 1) }, ...rest };
});
export type ModelSpec = z.infer<typeof ModelSpec>;
/** What a caller may send: defaults not yet applied. */
export type ModelSpecInput = z.input<typeof ModelSpec>;

export const CatalogFile = z
  .strictObject({ models: z.array(ModelSpec).max(CATALOG_LIMITS.models) })
  .superRefine((c, ctx) => {
    for (const i of nameCollisions(c.models)) ctx.addIssue({ code: "custom", path: i.path, message: i.message });
  });
export type CatalogFile = z.infer<typeof CatalogFile>;

/** A problem in a catalog body: its path (as zod gives it) and what is wrong. */
export type CatalogIssue = { path: (string | number)[]; message: string };

/**
 * Names and aliases share one namespace across a file: a request names a model by either. Each
 * entry is a model's name (absent when it has no valid one) and its aliases; the issues name the
 * second user of a name.
 */
export function nameCollisions(models: readonly { name?: string | undefined; aliases: readonly string[] }[]): CatalogIssue[] {
  const issues: CatalogIssue[] = [];
  const owner = new Map<string, string>();
  models.forEach((m, i) => {
    if (m.name === undefined) return;
    [m.name, ...m.aliases].forEach((n, j) => {
      const prev = owner.get(n);
      const path = j === 0 ? ["models", i, "name"] : ["models", i, "aliases", j - 1];
      if (prev !== undefined && prev !== m.name) issues.push({ path, message: `"${n}" is already used by model "${prev}"` });
      else if (prev === m.name && j === 0) issues.push({ path, message: `model "${n}" appears twice` });
      else owner.set(n, m.name!);
    });
  });
  return issues;
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/** The top of a file alone: the models are judged one by one after it. */
const Envelope = z.strictObject({ models: z.array(z.unknown()).max(CATALOG_LIMITS.models) });

/**
 * A catalog file judged whole, every problem found in one pass: the file's own keys, each
 * model's schema and cross-field rules (even when another model is wrong), and the names and
 * aliases two models share. `specs` holds the models that are valid on their own (by index),
 * for checks against the stored catalog; `file` is set only when there is no issue at all.
 */
export function checkCatalogFile(body: unknown): { file?: CatalogFile; specs: (ModelSpec | undefined)[]; issues: CatalogIssue[] } {
  const top = Envelope.safeParse(body);
  const issues: CatalogIssue[] = top.success ? [] : zodIssues(top.error.issues, CatalogFile, body);
  const models = isRecord(body) && Array.isArray(body.models) && body.models.length <= CATALOG_LIMITS.models ? (body.models as unknown[]) : undefined;
  if (!models) return { specs: [], issues };
  const specs = models.map((m, i) => {
    const r = ModelSpec.safeParse(m);
    if (r.success) return r.data;
    issues.push(...zodIssues(r.error.issues, ModelSpec, m).map((x) => ({ path: ["models", i, ...x.path], message: x.message })));
    return undefined;
  });
  const names = models.map((m) => {
    if (!isRecord(m)) return { aliases: [] };
    const valid = (v: unknown): v is string => Name.safeParse(v).success;
    return { name: valid(m.name) ? m.name : undefined, aliases: Array.isArray(m.aliases) ? m.aliases.filter(valid) : [] };
  });
  issues.push(...nameCollisions(names));
  if (issues.length > 0) return { specs, issues: inFileOrder(issues) };
  return { file: CatalogFile.parse(body), specs, issues: [] };
}

/** Issues grouped by model, in the file's order; the file's own first. Sorting is stable. */
export function inFileOrder<T extends { path: readonly (string | number)[] }>(issues: T[]): T[] {
  const at = (i: T) => (i.path[0] === "models" && typeof i.path[1] === "number" ? i.path[1] : -1);
  return [...issues].sort((a, b) => at(a) - at(b));
}

/**
 * Zod's issues as catalog issues: an unknown key becomes one issue per key, at the key's own
 * path, naming the nearest key the schema knows there ("did you mean idle_timeout?").
 */
export function zodIssues(issues: readonly z.core.$ZodIssue[], schema: z.ZodType, input?: unknown): CatalogIssue[] {
  return issues.flatMap((i) => {
    const path = i.path.map((p) => (typeof p === "number" ? p : String(p)));
    if (i.code === "invalid_value") {
      // A misspelt choice (engine: vlm) gets the nearest one too.
      const given = valueAt(input, path);
      const choices = i.values.filter((v): v is string => typeof v === "string");
      const near = typeof given === "string" && choices.length === i.values.length ? nearest(given, choices) : undefined;
      return [{ path, message: near ? `${i.message}; did you mean ${near}?` : i.message }];
    }
    if (i.code !== "unrecognized_keys") return [{ path, message: i.message }];
    const known = knownKeys(schema, path);
    return i.keys.map((k) => {
      const near = nearest(k, known);
      const message = near ? `unknown key; did you mean ${near}?` : `unknown key (expected one of: ${known.join(", ")})`;
      return { path: [...path, k], message };
    });
  });
}

function valueAt(v: unknown, path: readonly (string | number)[]): unknown {
  let cur = v;
  for (const seg of path) {
    if (cur === null || typeof cur !== "object" || !Object.hasOwn(cur, seg)) return undefined;
    cur = (cur as Record<string | number, unknown>)[seg];
  }
  return cur;
}

type Def = { type?: string; shape?: Record<string, unknown>; element?: unknown; in?: unknown; innerType?: unknown; valueType?: unknown };

/** The keys the object schema at `path` of `schema` knows, in declared order (none when there is no object there). */
export function knownKeys(schema: z.ZodType, path: readonly (string | number)[]): string[] {
  let s: unknown = schema;
  let rest = [...path];
  for (let guard = 0; guard < 64; guard++) {
    const def = (s as { def?: Def } | undefined)?.def;
    if (!def) return [];
    if (def.type === "pipe") s = def.in;
    else if (def.type === "optional" || def.type === "default" || def.type === "prefault" || def.type === "nullable") s = def.innerType;
    else if (rest.length === 0) return def.type === "object" && def.shape ? Object.keys(def.shape) : [];
    else if (def.type === "object" && def.shape) [s, rest] = [def.shape[String(rest[0])], rest.slice(1)];
    else if (def.type === "array") [s, rest] = [def.element, rest.slice(1)];
    else if (def.type === "record") [s, rest] = [def.valueType, rest.slice(1)];
    else return [];
  }
  return [];
}

/**
 * A path as a person reads it in a catalog file: a model by its name when it has a valid one
 * that no other model in the body shares (`models[llama-3.1-8b].profiles[0].gpu_class`), by
 * its index otherwise (`models[3].name`); a key that is not a plain word is quoted
 * (`env["bad name"]`). `(body)` for the whole. `models` is the body's list, when it has one.
 */
export function catalogPath(path: readonly (string | number)[], models?: unknown): string {
  if (path.length === 0) return "(body)";
  const list = Array.isArray(models) ? models : [];
  const nameOf = (i: number): string | undefined => {
    const m: unknown = list[i];
    const n = isRecord(m) ? m.name : undefined;
    if (typeof n !== "string" || !Name.safeParse(n).success) return undefined;
    return list.filter((o) => isRecord(o) && o.name === n).length === 1 ? n : undefined;
  };
  let out = "";
  path.forEach((seg, k) => {
    if (typeof seg === "number") out += `[${k === 1 && path[0] === "models" ? (nameOf(seg) ?? seg) : seg}]`;
    else if (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(seg)) out += k === 0 ? seg : `.${seg}`;
    else out += `[${JSON.stringify(seg)}]`;
  });
  return out;
}
