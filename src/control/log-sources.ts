// Where the operator's reads that go past the control plane's own state are found: a replica's
// engine log (its leader node's log listener, with the token and certificate to reach it), and
// a consistent copy of the database (`llmgw backup`).

import { bracketHost } from "../lib/net";
import type { Scheduler } from "../lib/scheduler";
import type { Logger } from "pino";
import { logsToken } from "../protocol/heartbeat";
import { NotFoundError } from "./errors";
import type { NodeMemory } from "./node-memory";
import { placedNode, placedReplaces } from "./reconcile/ports";
import type { BackupPort, EventsPort, NodeRegistry } from "./store-port";

export interface LogSource {
  url: string;
  node: string;
  token: string;
  cert?: string;
  /** The failed replica this one replaced (its last run is the run before this one's). */
  predecessor?: string;
}

export class LogSources {
  constructor(private readonly o: { store: Pick<EventsPort, "listEvents"> & Pick<NodeRegistry, "credentialHashOf">; memory: Pick<NodeMemory, "snapshot" | "logsPort" | "logsCert"> }) {}

  /**
   * Where a replica's engine log can be read: its leader node's log listener. With `previous`,
   * a replica no longer in the control plane is looked for too: its node is the one it was
   * placed on (the replica.placed event), whose agent keeps its last log a while; and
   * `predecessor` names the failed replica this one replaced, whose last run is the run before
   * this one's when its own node has no earlier run of it.
   */
  async logSource(id: string, previous = false): Promise<LogSource> {
    const { store, memory } = this.o;
    const snap = await memory.snapshot();
    const r = snap.replicas.find((x) => x.id === id);
    const placed = previous || !r ? (await store.listEvents({ subject: `replica/${id}`, kind: "replica.placed", limit: 1 }))[0] : undefined;
    let node = r?.shards[0]!.node;
    if (!node) {
      const placedOn = placed ? placedNode(placed) : undefined;
      if (!placedOn) throw new NotFoundError(`replica "${id}" not found (not in the control plane, and no event says where it ran)`);
      if (!previous) throw new NotFoundError(`replica "${id}" is no longer running (it ran on ${placedOn}): \`llmgw logs ${id} --previous\` shows its last run`);
      node = placedOn;
    }
    const address = snap.nodes.find((n) => n.name === node)?.address;
    const port = memory.logsPort(node);
    const digest = await store.credentialHashOf(node);
    if (!address || port === undefined || !digest) throw new NotFoundError(`the agent on ${node} does not serve engine logs (started with --logs-listen off, or not heartbeating)`);
    const cert = memory.logsCert(node);
    const predecessor = placed ? placedReplaces(placed) : undefined;
    return {
      url: `${cert ? "https" : "http"}://${bracketHost(address)}:${port}/logs/${encodeURIComponent(id)}`,
      node,
      token: logsToken(digest),
      ...(cert ? { cert } : {}),
      ...(predecessor ? { predecessor } : {}),
    };
  }
}

export class Backups {
  constructor(private readonly o: { store: BackupPort; dataDir: string; scheduler: Pick<Scheduler, "now">; log: Logger }) {}

  /** A consistent copy of the database in a temporary file beside it; the caller deletes it. */
  async backup(): Promise<string> {
    const path = `${this.o.dataDir}/backup-${process.pid}-${this.o.scheduler.now()}.db`;
    await this.o.store.backupTo(path);
    this.o.log.info({ path }, "database backed up");
    return path;
  }
}
