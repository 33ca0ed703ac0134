// The operator's node operations: approve a pending node, cordon, drain and uncordon, allow a
// node an address besides the one it speaks from, and delete a node (its credential with it),
// each reconciled at once. Only approving takes a node out of pending.

import type { Logger } from "pino";
import { plural } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import type { AdminState } from "../protocol/views";
import { ConflictError, NotFoundError } from "./errors";
import type { EventLog } from "./event-log";
import type { NodeMemory } from "./node-memory";
import type { Projector } from "./projector";
import type { NodeRegistry } from "./store-port";
import type { NewEvent } from "./types";
import type { Waker } from "./wake";
import type { WriteLock } from "./write-lock";

export interface NodeAdminOptions {
  store: NodeRegistry;
  memory: Pick<NodeMemory, "snapshot" | "forget">;
  projector: Pick<Projector, "forget" | "refreshAssignments">;
  events: Pick<EventLog, "event">;
  lock: WriteLock;
  wake: Waker;
  scheduler: Pick<Scheduler, "now">;
  log: Logger;
  /** What the weights plan and `weights pull|rm` keep of a node (absent without a Hub). */
  weights?: { forget(node: string): void };
}

export class NodeAdmin {
  constructor(private readonly o: NodeAdminOptions) {}

  /** Admits a pending node (serve --approve-nodes); false when it was not pending. */
  approveNode(name: string): Promise<{ changed: boolean }> {
    return this.o.lock.exclusive(async () => {
      const t = await this.o.store.nodeTrust(name);
      if (!t.exists) throw new NotFoundError(`node "${name}" not found`);
      if (t.adminState !== "pending") return { changed: false };
      await this.o.store.setAdminState(name, "none");
      await this.o.events.event("node.approved", `node/${name}`, `node ${name} approved: replicas may be placed on it`);
      this.o.log.info({ node: name }, "node approved");
      this.o.wake.wake(true);
      return { changed: true };
    });
  }

  /**
   * Forgets a node and its credential, so only the join token (and a fresh start of its agent)
   * brings it back. Refused while replicas run on it unless forced; forced, what is still on it
   * is stopped here and placed elsewhere by the next reconcile.
   */
  deleteNode(name: string, force: boolean): Promise<{ stopped: string[] }> {
    return this.o.lock.exclusive(async () => {
      const { memory, projector } = this.o;
      const snap = await memory.snapshot();
      if (!snap.nodes.some((n) => n.name === name)) throw new NotFoundError(`node "${name}" not found`);
      const on = snap.replicas.filter((r) => r.shards.some((s) => s.node === name));
      const running = on.filter((r) => r.state !== "failed");
      if (running.length > 0 && !force) {
        const ids = running.map((r) => r.id);
        throw new ConflictError(
          `node ${name} runs ${plural(running.length, "replica")} (${ids.slice(0, 5).join(", ")}${ids.length > 5 ? ", …" : ""}): drain it first (llmgw drain ${name} --wait), or delete with --force, which drains and then deletes`,
          ["force"],
        );
      }
      const events: NewEvent[] = on.map((r) => ({ kind: "replica.removed", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} removed: its node ${name} was deleted` }));
      events.push({ kind: "node.deleted", subject: `node/${name}`, message: `node ${name} deleted; its credential no longer works, and it joins again only with the join token` });
      if (!(await this.o.store.deleteNode(name, on.map((r) => r.id), events, this.o.scheduler.now()))) throw new NotFoundError(`node "${name}" not found`);
      // What is kept in memory about it goes; its long polls are answered now.
      memory.forget(name);
      projector.forget(name);
      this.o.weights?.forget(name);
      this.o.log.warn({ node: name, replicas: on.map((r) => r.id) }, "node deleted");
      projector.refreshAssignments(await memory.snapshot());
      this.o.wake.wake(true);
      return { stopped: on.map((r) => r.id) };
    });
  }

  /** Lets a node report `address` although its heartbeats come from elsewhere; null withdraws it. */
  async allowNodeAddress(name: string, address: string | null): Promise<{ changed: boolean }> {
    const { previous } = await this.o.store.setAllowedAddress(name, address, this.o.scheduler.now());
    const changed = (previous ?? null) !== address;
    if (changed)
      await this.o.events.event(
        "node.address_allowed",
        `node/${name}`,
        address === null ? `node ${name} may again report only the address its heartbeats come from` : `node ${name} may report address ${address} besides the one its heartbeats come from`,
      );
    return { changed };
  }

  allowedAddresses(): Promise<{ node: string; address: string }[]> {
    return this.o.store.listAllowedAddresses();
  }

  /** Cordons, drains or uncordons a node. Only approving takes a node out of pending: a cordon or uncordon must not admit it by the way. */
  setNodeAdminState(name: string, state: AdminState): Promise<{ changed: boolean }> {
    return this.o.lock.exclusive(async () => {
      const { exists, adminState } = await this.o.store.nodeTrust(name);
      if (!exists) throw new NotFoundError(`node "${name}" not found`);
      if (adminState === "pending" && state !== "pending") throw new ConflictError(`node "${name}" is pending approval: approve it first (llmgw nodes approve ${name})`, ["node"]);
      const { previous } = await this.o.store.setAdminState(name, state);
      if (previous === undefined) throw new NotFoundError(`node "${name}" not found`);
      const verb = state === "none" ? "uncordoned" : state;
      if (previous !== state) {
        await this.o.events.event(`node.${verb}`, `node/${name}`, `node ${name} ${verb}`);
        this.o.log.info({ node: name, from: previous, to: state }, `node ${verb}`);
        this.o.wake.wake(true);
      }
      return { changed: previous !== state };
    });
  }
}
