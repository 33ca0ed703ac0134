// What a node's GPU health means over time, decided on the head node from a heartbeat and what
// is stored: a node whose discovery fails outright (a driver that stops answering) keeps the GPUs
// it last reported, unhealthy, so the cluster looks broken rather than smaller; and a card turning
// unhealthy or healthy again, or discovery starting or stopping to fail, is one event each.
// Pure: the intake (intake.ts) reads the stored GPUs and the last report, and writes what this returns.

import { oneLine, plural } from "../lib/format";
import { type GpuReport, type HeartbeatRequest, REASON_MAX } from "../protocol/heartbeat";
import type { GpuRow, NewEvent } from "./types";

/** The agent's own tail for a node that found no GPUs: beside kept GPUs it would say the opposite. */
const NO_GPUS_TAIL = /:\s*this node reports no GPUs\s*$/;

/** What a kept GPU gives as its reason: the discovery error, within a GPU reason's bound. */
export function keptReason(discoveryError: string): string {
  return oneLine(`GPU discovery fails: ${discoveryError.replace(NO_GPUS_TAIL, "")}`, REASON_MAX);
}

/**
 * The heartbeat as the head node takes it: one whose discovery failed with no GPUs at all, from a
 * node that has GPUs stored, reports those GPUs instead, each unhealthy with the discovery error
 * as its reason (`kept`). Any other heartbeat is taken as sent: GPUs it lists are what the node
 * has, and a deleted node's GPUs were deleted with it.
 */
export function keepLastKnownGpus(hb: HeartbeatRequest, stored: readonly GpuRow[]): { hb: HeartbeatRequest; kept: boolean } {
  if (!hb.discovery_error || hb.gpus.length > 0 || stored.length === 0) return { hb, kept: false };
  const reason = keptReason(hb.discovery_error);
  const gpus = [...stored]
    .sort((a, b) => a.index - b.index)
    .map((g): GpuReport => ({ index: g.index, uuid: g.uuid, name: g.name, class: g.class, memory_mib: g.memoryMib, healthy: false, parent: g.parent, reason }));
  return { hb: { ...hb, gpus }, kept: true };
}

/** What is stored of a node before a heartbeat: its GPUs, and its discovery error (undefined: not known, so no change can be told). */
export interface HealthBefore {
  gpus: readonly Pick<GpuRow, "index" | "uuid" | "healthy">[];
  discoveryError: string | null | undefined;
}

/**
 * The events a heartbeat causes against what was stored: discovery starting or stopping to fail,
 * and each card (the same index and uuid before and after) whose health turned. A card that
 * appears or goes is not a health change; a reason that changes while the card stays unhealthy
 * is not one either. A new node has nothing before it, so only its discovery failing is news.
 */
export function healthEvents(node: string, before: HealthBefore, hb: HeartbeatRequest, kept: boolean): NewEvent[] {
  const subject = `node/${node}`;
  const events: NewEvent[] = [];
  const error = hb.discovery_error || null;
  if (before.discoveryError !== undefined && (before.discoveryError === null) !== (error === null)) {
    if (error !== null) {
      const held = kept ? `; its ${plural(hb.gpus.length, "GPU")} last reported are kept, counted unhealthy, until it answers again or the node is deleted` : "";
      events.push({ kind: "discovery.failed", subject, message: `GPU discovery fails on node ${node}: ${oneLine(error.replace(NO_GPUS_TAIL, ""), 300)}${held}`, data: { node, error } });
    } else events.push({ kind: "discovery.recovered", subject, message: `GPU discovery on node ${node} works again: ${plural(hb.gpus.length, "GPU")} reported`, data: { node, gpus: hb.gpus.length } });
  }
  const was = new Map(before.gpus.map((g) => [g.index, g]));
  for (const g of [...hb.gpus].sort((a, b) => a.index - b.index)) {
    const prior = was.get(g.index);
    if (!prior || prior.uuid !== g.uuid || prior.healthy === g.healthy) continue;
    const card = `GPU ${g.index} (${g.uuid}) of node ${node}`;
    if (g.healthy) events.push({ kind: "gpu.healthy", subject, message: `${card} is healthy again`, data: { node, index: g.index, uuid: g.uuid } });
    else {
      const reason = g.reason ?? null;
      events.push({ kind: "gpu.unhealthy", subject, message: `${card} is unhealthy: ${reason ? oneLine(reason, REASON_MAX) : "no reason given"}`, data: { node, index: g.index, uuid: g.uuid, reason } });
    }
  }
  return events;
}

/** What is stored of each node before a group of heartbeats: its GPUs, and its discovery error where known. */
export function storedHealth(nodes: readonly string[], gpus: readonly GpuRow[], discoveryOf: (node: string) => string | null | undefined): Map<string, HealthBefore> {
  const out = new Map<string, { gpus: GpuRow[]; discoveryError: string | null | undefined }>();
  for (const n of nodes) out.set(n, { gpus: [], discoveryError: discoveryOf(n) });
  for (const g of gpus) out.get(g.node)?.gpus.push(g);
  return out;
}

/**
 * The events of one heartbeat of a group that the store took, in order: compared with what was
 * stored before it (a new node: nothing), which then becomes what it says, so a node's second
 * heartbeat in one group is compared with its first.
 */
export function nextHealth(health: Map<string, HealthBefore>, hb: HeartbeatRequest, kept: boolean, created: boolean): NewEvent[] {
  const before = created ? { gpus: [], discoveryError: null } : health.get(hb.node);
  health.set(hb.node, { gpus: hb.gpus.map((g) => ({ index: g.index, uuid: g.uuid, healthy: g.healthy })), discoveryError: hb.discovery_error || null });
  return before ? healthEvents(hb.node, before, hb, kept) : [];
}
