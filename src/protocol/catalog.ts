// The model catalog: what a model is, as written in `catalog.yaml`, sent to
// `PUT /api/v1/models/{name}` and stored. One schema for every way in.

import { z } from "zod";
import { Duration, Name, Printable, safeRecord } from "./common";

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
  args: z.array(z.string().max(4096)).max(CATALOG_LIMITS.args).default([]),
  env: safeRecord(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name"), z.string().max(4096)).default({}),
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
   * The Hugging Face commit every replica loads (the snapshot of that name in the hub cache
   * layout); without it the head node picks the newest revision all of a replica's nodes have.
   */
  revision: z
    .string({ error: "must be a 40-character commit hash, as a string (quote it in YAML)" })
    .regex(/^[0-9a-f]{40}$/, "must be the full 40-character lowercase commit hash (a branch, tag or short hash does not name one snapshot)")
    .optional(),
  /** In-flight requests per replica the load-based scaler aims for (router issue). */
  target_inflight: z.number().int().min(1).max(100000).optional(),
  profiles: z.array(Profile).min(1, "a model needs at least one profile").max(CATALOG_LIMITS.profiles),
});

/** A model's minimum when its file gives none: an on-demand model waits to be asked for. */
const defaultMin = (m: { on_demand: boolean }) => (m.on_demand ? 0 : 1);

export const ModelSpec = ModelFields.superRefine((m, ctx) => {
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
    // Names and aliases share one namespace: a request names a model by either.
    const owner = new Map<string, string>();
    c.models.forEach((m, i) => {
      const names = [m.name, ...m.aliases];
      names.forEach((n, j) => {
        const prev = owner.get(n);
        if (prev !== undefined && prev !== m.name)
          ctx.addIssue({
            code: "custom",
            path: ["models", i, j === 0 ? "name" : "aliases"],
            message: `"${n}" is already used by model "${prev}"`,
          });
        else if (prev === m.name && j === 0)
          ctx.addIssue({ code: "custom", path: ["models", i, "name"], message: `model "${n}" appears twice` });
        else owner.set(n, m.name);
      });
    });
  });
export type CatalogFile = z.infer<typeof CatalogFile>;
