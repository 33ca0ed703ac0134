// What a heartbeat's arrival itself means, beside its replica reports: a node that registered
// (new hardware, so parked models are tried again), and a node heard from again after it was
// found unreachable. Decided as a plan, as the reports are (reports.ts puts these first in the
// plan it returns), so the heartbeat's news is read once, decided once and written in one
// transaction with its verdicts.

import { plural } from "../../lib/format";
import type { ModelStateRow } from "../types";
import { type Plan, emptyPlan } from "./plan";

/** The news one heartbeat brings, as the intake found it. */
export interface NodeNews {
  /** The node registered with this heartbeat: the address and the GPU count it registered with. */
  registered?: { address: string; gpus: number };
  /** The node had been found unreachable and is heard from again. */
  reachableAgain?: boolean;
  /** Parked models to try again (new hardware arrived), and why. */
  unpark?: { models: readonly string[]; why: string };
}

/** A parked model's state once it is tried again: its failures and parking cleared. */
export const UNPARKED: Partial<Omit<ModelStateRow, "model">> = { parked: false, failures: 0, crashes: 0, reason: null, lastFailureAt: null };

/** The news of one node as a plan: registered, each parked model tried again, reachable again; in that order. */
export function newsPlan(node: string, news: NodeNews, into: Plan = emptyPlan()): Plan {
  const subject = `node/${node}`;
  if (news.registered) into.events.push({ kind: "node.registered", subject, message: `node ${node} registered with ${plural(news.registered.gpus, "GPU")} (${news.registered.address})` });
  if (news.unpark) unparkInto(into, news.unpark.models, news.unpark.why);
  if (news.reachableAgain) into.events.push({ kind: "node.reachable", subject, message: `node ${node} is heartbeating again` });
  return into;
}

/** Parked models tried again, into a plan: their state cleared and an event each. */
export function unparkInto(plan: Plan, models: readonly string[], why: string): Plan {
  for (const m of models) {
    plan.modelState.set(m, { ...plan.modelState.get(m), ...UNPARKED });
    plan.events.push({ kind: "model.unparked", subject: `model/${m}`, message: `model ${m} unparked (${why}); it will be tried again` });
  }
  return plan;
}
