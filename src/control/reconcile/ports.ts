// Step 7: ports. Each placed replica gets an engine port free on every address it spans, and a
// multi-node one (or a single-node SGLang one with DP attention) also the rendezvous block that
// goes with it; one that cannot is unplaceable for this tick, saying why. Ports are counted by
// address, not node: simulated nodes may share one, and so may nodes behind one NAT.

import { launchOf } from "../launch";
import { fnv1a } from "../../lib/hash";
import { RENDEZVOUS_STRIDE, usesRendezvousBlock } from "../../protocol/engine-ports";
import { bracketHost } from "../../lib/net";
import type { Placed } from "../placement";
import type { ReconcileConfig } from "./config";
import { type ReconcileContext, addressOf } from "./context";
import type { PlanBuilder } from "./plan";

/**
 * Ports a replica's engines may bind from its rendezvous port up (protocol/engine-ports.ts): a
 * multi-node replica's, and a single-node SGLang one's with DP attention. SGLang binds
 * --dist-init-addr's port and port+1 … port+6 on the leader (PortArgs.init_new: port_base =
 * dist_init_port + 1, then port_base … port_base + 5), and with DP attention port_base + 5 +
 * dp_rank; vLLM's and torch's rendezvous take the port itself. 16 leaves room for DP attention
 * up to 10 ranks (the catalog refuses more).
 */
export { RENDEZVOUS_STRIDE };

type PortRange = Pick<ReconcileConfig, "basePort" | "portCount">;

/** Rendezvous blocks per node address. */
export function rendezvousBlocks(cfg: Pick<ReconcileConfig, "portCount">): number {
  return Math.floor(cfg.portCount / RENDEZVOUS_STRIDE);
}

/**
 * The first port of the rendezvous block that goes with engine port `port` (Assignment.shard.
 * leader_port): derived, not stored, so it needs no column. Placement gives a replica that
 * binds one (needsBlock) only an engine port whose block is free on every address it spans;
 * other single-node replicas' engines never use theirs, which is why it is not reserved for them.
 */
export function rendezvousPort(port: number, cfg: PortRange): number {
  const blocks = Math.max(1, rendezvousBlocks(cfg));
  return cfg.basePort + cfg.portCount + RENDEZVOUS_STRIDE * ((((port - cfg.basePort) % blocks) + blocks) % blocks);
}

/** The number of the rendezvous block that goes with engine port `port`. */
export function blockOf(port: number, cfg: PortRange): number {
  return (rendezvousPort(port, cfg) - cfg.basePort - cfg.portCount) / RENDEZVOUS_STRIDE;
}

/** Engine ports and rendezvous blocks (by number) taken, per address. */
export class PortBook {
  private readonly ports = new Map<string, Set<number>>();
  private readonly blocks = new Map<string, Set<number>>();
  constructor(private readonly cfg: PortRange) {}

  /** Marks `port` taken on the address, and its block too when `block` (see needsBlock). */
  take(address: string, port: number, block: boolean): void {
    add(this.ports, address, port);
    if (block) add(this.blocks, address, blockOf(port, this.cfg));
  }

  portsOn(addresses: readonly string[]): (Set<number> | undefined)[] {
    return addresses.map((a) => this.ports.get(a));
  }

  /** Whether every engine port of the range is taken on the address (ports outside it, from an older range, do not count). */
  full(address: string): boolean {
    const set = this.ports.get(address);
    if (!set || set.size < this.cfg.portCount) return false;
    let inRange = 0;
    for (const p of set) if (p >= this.cfg.basePort && p < this.cfg.basePort + this.cfg.portCount) inRange++;
    return inRange >= this.cfg.portCount;
  }

  blocksOn(addresses: readonly string[]): (Set<number> | undefined)[] {
    return addresses.map((a) => this.blocks.get(a));
  }
}

function add(sets: Map<string, Set<number>>, address: string, v: number): void {
  let set = sets.get(address);
  if (!set) sets.set(address, (set = new Set()));
  set.add(v);
}

/**
 * Whether the replica's engines bind its rendezvous block: it spans nodes, or its profile (as
 * the catalog has it now) is SGLang with DP attention. A replica whose model or profile left the
 * catalog is judged by its shards alone: what it was started with is no longer known.
 */
export function needsBlock(ctx: Pick<ReconcileContext, "models">, r: { model: string; profile: string; shards: readonly unknown[] }): boolean {
  if (r.shards.length > 1) return true;
  const p = ctx.models.get(r.model)?.spec.profiles.find((x) => x.name === r.profile);
  return p !== undefined && usesRendezvousBlock(p);
}

/**
 * Ports held by the snapshot's replicas that have not failed. A replica lost with its node may
 * still have an engine on its port (the node is only silent), so its port stays taken in this
 * step even though the replica is gone.
 */
export function portsInUse(ctx: Pick<ReconcileContext, "snapshot" | "nodes" | "models" | "cfg">): PortBook {
  const book = new PortBook(ctx.cfg);
  for (const r of ctx.snapshot.replicas) {
    if (r.port === null || r.state === "failed") continue;
    const block = needsBlock(ctx, r);
    for (const s of r.shards) book.take(addressOf(ctx, s.node), r.port, block);
  }
  return book;
}

/**
 * A port free on every address the replica spans. The search starts at a point derived from the
 * replica's id rather than at the lowest port, so a port that was just given up — whose engine
 * may not have exited yet — is unlikely to be handed out again at once. Blocks given: the
 * replica binds its rendezvous block (needsBlock), which must be free too.
 */
export function freePort(sets: readonly (Set<number> | undefined)[], blocks: readonly (Set<number> | undefined)[] | undefined, cfg: PortRange, id: string): number | undefined {
  if (blocks && rendezvousBlocks(cfg) === 0) return undefined;
  const start = fnv1a(id) % cfg.portCount;
  for (let k = 0; k < cfg.portCount; k++) {
    const p = cfg.basePort + ((start + k) % cfg.portCount);
    if (!sets.every((s) => !s?.has(p))) continue;
    if (blocks) {
      const b = blockOf(p, cfg);
      if (!blocks.every((s) => !s?.has(b))) continue;
    }
    return p;
  }
  return undefined;
}

/**
 * Nodes whose address has no engine port left, with why: placement leaves them out (their
 * GPUs count as taken), so a replica goes to a node that can give it a port, or is not placed.
 */
export function portFullNodes(ctx: Pick<ReconcileContext, "snapshot" | "nodes" | "cfg">, book: PortBook): Map<string, string> {
  const out = new Map<string, string>();
  for (const n of ctx.snapshot.nodes) {
    const a = addressOf(ctx, n.name);
    if (book.full(a)) out.set(n.name, noPortReason([a], false, ctx.cfg));
  }
  return out;
}

/** A model's reason, with the nodes placement left out for want of ports when there are any. */
export function withPortNote(reason: string, full: ReadonlyMap<string, string>): string {
  if (full.size === 0) return reason;
  const [node, why] = [...full][0]!;
  const more = full.size > 1 ? ` (and ${full.size - 1} more node${full.size > 2 ? "s" : ""})` : "";
  return `${reason}; ${node}${more} takes no new replica: ${why}`;
}

/** Why no port could be found on the addresses: the range and that it is full, never a port outside it. */
export function noPortReason(addresses: readonly string[], anyPort: boolean, cfg: PortRange): string {
  const engines = `${cfg.basePort}…${cfg.basePort + cfg.portCount - 1}`;
  return anyPort
    ? `no free rendezvous port block on ${addresses.join(", ")} (all ${rendezvousBlocks(cfg)} blocks of ${RENDEZVOUS_STRIDE} ports in ${cfg.basePort + cfg.portCount}…${cfg.basePort + 2 * cfg.portCount - 1} are held by multi-node and SGLang DP-attention replicas; a larger --engine-port-range makes more)`
    : `no free engine port on ${addresses.join(", ")}: all ${cfg.portCount} of ${engines} are in use (--engine-base-port and --engine-port-range; a larger range allows more replicas per address)`;
}

/** Creates the placed replicas that get a port, in order; the others' models become unplaceable with the reason. */
export function assignPorts(ctx: ReconcileContext, b: PlanBuilder, placed: readonly Placed[], unplaceable: Map<string, string>, book: PortBook, newId: () => string): void {
  const { cfg } = ctx;
  const lastFailed = newestFailed(ctx.snapshot.replicas);
  for (const p of placed) {
    const leader = p.shards[0]!.node;
    const addresses = [...new Set(p.shards.map((s) => addressOf(ctx, s.node)))];
    const id = newId();
    const block = needsBlock(ctx, p);
    const portSets = book.portsOn(addresses);
    const port = freePort(portSets, block ? book.blocksOn(addresses) : undefined, cfg, id);
    if (port === undefined) {
      unplaceable.set(p.model, noPortReason(addresses, block && freePort(portSets, undefined, cfg, id) !== undefined, cfg));
      continue;
    }
    for (const a of addresses) book.take(a, port, block);
    const launch = launchOfModel(ctx, p.model, p.profile);
    b.plan.create.push({ id, model: p.model, profile: p.profile, shards: p.shards, port, endpoint: `http://${bracketHost(addressOf(ctx, leader))}:${port}`, ...(launch !== undefined ? { launch } : {}) });
    const where = p.shards.map((s) => `${s.node}:${s.gpus.join(",")}`).join(" ");
    b.event({ kind: "replica.placed", subject: `replica/${id}`, message: `placed replica ${id} of ${p.model} on ${where} (profile ${p.profile})`, data: placedData(leader, lastFailed.get(p.model)) });
  }
}

/** Per model, its failed replica updated last: the one a replica placed now takes over from. */
function newestFailed(replicas: ReconcileContext["snapshot"]["replicas"]): Map<string, { id: string; updatedAt: number }> {
  const out = new Map<string, { id: string; updatedAt: number }>();
  for (const r of replicas) {
    if (r.state !== "failed") continue;
    const seen = out.get(r.model);
    if (!seen || r.updatedAt > seen.updatedAt) out.set(r.model, { id: r.id, updatedAt: r.updatedAt });
  }
  return out;
}

/** A replica.placed event's data: its leader node, and the failed replica it replaces (`llmgw logs NEW --previous` shows that one's run). */
export function placedData(node: string, replaces: { id: string } | undefined): { node: string; replaces?: string } {
  return replaces ? { node, replaces: replaces.id } : { node };
}

/** The failed replica a replica.placed event says the new one replaces. */
export function placedReplaces(e: { data?: unknown }): string | undefined {
  const d = e.data as { replaces?: unknown } | null | undefined;
  return d && typeof d.replaces === "string" && d.replaces !== "" ? d.replaces : undefined;
}

/**
 * The (leader) node a replica.placed event names: its data's node, or for an event written
 * before events carried it, the first node in its message ("… on gpu-03:0,1 …").
 */
export function placedNode(e: { message: string; data?: unknown }): string | undefined {
  const d = e.data as { node?: unknown } | null | undefined;
  if (d && typeof d.node === "string" && d.node !== "") return d.node;
  return / on ([^\s:]+):/.exec(e.message)?.[1];
}

/** The launch fingerprint a new replica of the model on this profile is placed with. */
function launchOfModel(ctx: Pick<ReconcileContext, "models">, model: string, profile: string): string | undefined {
  const m = ctx.models.get(model);
  return m ? launchOf(m.spec, profile) : undefined;
}
