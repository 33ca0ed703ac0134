// What the router's cold-start hold is told and set with. The catalog names where a model's
// replica is starting (CatalogEntry.starting), so a request held for its cold start can say so:
// the oldest starting replica's leader node and since when; nothing for a model whose replicas
// are all ready, failed or not yet placed. And the serve flags of the hold reach the router.

import { describe, expect, test } from "bun:test";
import { catalog } from "../../src/control/projections";
import { ToRouter } from "../../src/protocol/router-link";
import { T0, model, snapshot } from "../helpers/fleet";
import { RECONCILE_DEFAULTS } from "../helpers/control-settings";

describe("CatalogEntry.starting", () => {
  const fleet = (replicas: Parameters<typeof snapshot>[0]["replicas"]) => {
    const s = snapshot({ nodes: [{ name: "h100-1", gpus: ["H100-80GB"] }, { name: "h100-2", gpus: ["H100-80GB"] }], models: [model({ name: "m", on_demand: true }), model({ name: "other" })], replicas });
    return s;
  };

  test("a starting replica's node and since when; the oldest of several; the leader of a multi-node one", () => {
    const s = fleet([
      { id: "r2", model: "m", state: "starting", shards: [{ node: "h100-2", gpus: [0] }, { node: "h100-1", gpus: [0] }] },
      { id: "r1", model: "m", state: "starting", shards: [{ node: "h100-1", gpus: [0] }] },
    ]);
    s.replicas[0]!.createdAt = T0 - 5_000;
    s.replicas[1]!.createdAt = T0 - 1_000;
    const m = catalog(s, RECONCILE_DEFAULTS).find((e) => e.name === "m")!;
    expect(m.starting).toEqual({ node: "h100-2", since: T0 - 5_000 });
    expect(catalog(s, RECONCILE_DEFAULTS).find((e) => e.name === "other")!.starting).toBeUndefined();
  });

  test("ready, failed or draining replicas are not starting", () => {
    for (const state of ["ready", "failed", "draining"] as const) {
      const s = fleet([{ id: "r1", model: "m", state, shards: [{ node: "h100-1", gpus: [0] }] }]);
      expect(catalog(s, RECONCILE_DEFAULTS).find((e) => e.name === "m")!.starting).toBeUndefined();
    }
  });

  test("the router thread's message keeps the field (zod would strip a field it does not know)", () => {
    const s = fleet([{ id: "r1", model: "m", state: "starting", shards: [{ node: "h100-1", gpus: [0] }] }]);
    const entries = catalog(s, RECONCILE_DEFAULTS);
    const parsed = ToRouter.parse(JSON.parse(JSON.stringify({ type: "catalog", keys: entries.map((e) => e.name), changed: entries })));
    expect(parsed.type === "catalog" && parsed.changed.find((e) => e.name === "m")!.starting).toEqual({ node: "h100-1", since: T0 });
    expect(ToRouter.safeParse({ type: "catalog", keys: ["m"], changed: [{ name: "m", aliases: [], on_demand: true, pool: "default", created: 1, starting: { node: 3 } }] }).success).toBe(false);
  });
});

describe("serve flags of the cold-start hold", () => {
  test("--cold-start-progress-interval and --max-held-per-model reach the router's settings; defaults 5s and 64", async () => {
    const { ServeConfig, loadConfig } = await import("../../src/config");
    const { routerSettings } = await import("../../src/app/router-settings");
    const none = routerSettings(await loadConfig(ServeConfig, { flags: {}, env: {} }));
    expect([none.coldStartProgressMs, none.maxHeldPerModel]).toEqual([5_000, 64]);
    const set = routerSettings(await loadConfig(ServeConfig, { flags: { "cold-start-progress-interval": "2s" }, env: { LLMGW_MAX_HELD_PER_MODEL: "3" } }));
    expect([set.coldStartProgressMs, set.maxHeldPerModel]).toEqual([2_000, 3]);
  });

  test("bad values are refused, naming the key", async () => {
    const { ServeConfig, loadConfig } = await import("../../src/config");
    const err = (await loadConfig(ServeConfig, { flags: { "cold-start-progress-interval": "50ms", "max-held-per-model": "0" }, env: {} }).catch((e: unknown) => e)) as Error;
    expect(err.message).toContain("cold_start_progress_interval (from flag --cold-start-progress-interval): must be at least 100ms");
    expect(err.message).toContain("max_held_per_model (from flag --max-held-per-model)");
  });
});
