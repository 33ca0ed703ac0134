// A reconcile context from a few lines of fleet, for the step tests: the snapshot builders of
// test/helpers/fleet, the default configuration, the time T0 unless told otherwise.

import { type ReconcileConfig } from "../../../src/control/reconcile/config";
import { type ReconcileContext, type ReconcileInput, contextOf } from "../../../src/control/reconcile/context";
import { PlanBuilder } from "../../../src/control/reconcile/plan";
import { T0, snapshot } from "../../helpers/fleet";
import { RECONCILE_DEFAULTS } from "../../helpers/control-settings";

export type FleetOpts = Parameters<typeof snapshot>[0];

export function ctxOf(fleet: FleetOpts, extra: Partial<Omit<ReconcileInput, "config">> & { config?: Partial<ReconcileConfig> } = {}): ReconcileContext {
  const { config, ...rest } = extra;
  return contextOf({ snapshot: snapshot(fleet), now: T0, lastUsed: new Map(), newId: () => "new", ...rest, config: { ...RECONCILE_DEFAULTS, ...config } });
}

export function builder(): PlanBuilder {
  return new PlanBuilder();
}

export const H = "H100-80GB";
export { T0 };
