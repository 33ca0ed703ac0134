// The node-trust verbs: `llmgw nodes delete|approve|allow-address NAME …` (dispatched from
// `llmgw nodes`) and `llmgw join-token rotate`. Each is one admin API call, printed as one line.

import { UsageError, type FlagSpecs, type FlagValues } from "../config/flags";
import type { JoinTokenRotated, NodeAddressResult, NodeApproved, NodeDeleted } from "../protocol/admin";
import { parseDuration } from "../protocol/duration";
import type { NodeView, ReplicaView } from "../protocol/views";
import { CLIENT_FLAGS, CliError, outputFlag, resolveClient } from "./client";
import type { Command } from "./command";
import { STALL_AFTER, waitForDrain } from "./wait";

/** How long `nodes delete --force` waits for the drain before deleting anyway, unless --timeout says. */
const DELETE_DRAIN_TIMEOUT = "5m";

export const NODE_VERBS = ["delete", "approve", "allow-address"] as const;

export const NODE_TRUST_FLAGS: FlagSpecs = {
  force: { kind: "boolean", help: "delete: also while replicas run on the node: drain it first (up to --timeout), then delete" },
  timeout: { kind: "string", value: "DURATION", help: `delete --force: how long to wait for the drain before deleting anyway (default ${DELETE_DRAIN_TIMEOUT})` },
  clear: { kind: "boolean", help: "allow-address: withdraw the node's allowance" },
};

export const NODES_DETAILS =
  "Administering who may be a node:\n" +
  "  llmgw nodes delete NAME [--force]        forget a node and its credential (refused while it runs replicas, unless --force, which drains first)\n" +
  "  llmgw nodes approve NAME                 admit a node waiting as pending (serve --approve-nodes)\n" +
  "  llmgw nodes allow-address NAME ADDRESS   let a node report this data-plane address although its heartbeats come from another (NAT, a separate data network, or a host name, which is otherwise refused); the name need not have joined yet\n" +
  "  llmgw nodes allow-address NAME --clear   withdraw it\n" +
  "A deleted node joins again only with the join token after its agent's <state-dir>/node.credential is removed.";

/** The answer's message, or with -o json the whole answer. */
function say(flags: FlagValues, r: { message: string }): void {
  process.stdout.write(flags.output === "json" ? `${JSON.stringify(r, null, 2)}\n` : `${r.message}\n`);
}

export async function runNodeVerb(verb: (typeof NODE_VERBS)[number], args: string[], flags: FlagValues): Promise<void> {
  const client = resolveClient(flags);
  const name = args[0];
  if (!name) throw new UsageError(`nodes ${verb} takes a node name`);
  const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
  if (verb === "approve") {
    if (args.length !== 1) throw new UsageError("nodes approve takes exactly one node name");
    const r = await client.send<NodeApproved>("POST", `${path}/approve`);
    say(flags, r);
    return;
  }
  if (verb === "allow-address") {
    if (flags.clear) {
      if (args.length !== 1) throw new UsageError("nodes allow-address NAME --clear takes no address");
      const r = await client.send<NodeAddressResult>("DELETE", `${path}/address`);
      say(flags, r);
      return;
    }
    if (args.length !== 2) throw new UsageError("nodes allow-address takes a node name and an address (or --clear)");
    const r = await client.send<NodeAddressResult>("PUT", `${path}/address`, { address: args[1] });
    say(flags, r);
    return;
  }
  if (args.length !== 1) throw new UsageError("nodes delete takes exactly one node name");
  if (flags.force) {
    const timeout = parseDuration((flags.timeout as string | undefined) ?? DELETE_DRAIN_TIMEOUT);
    if (timeout === undefined) throw new UsageError(`--timeout must be a duration like 10m, not "${flags.timeout}"`);
    const node = await client.get<NodeView>(path);
    const on = (await client.get<ReplicaView[]>("/api/v1/replicas")).filter((r) => r.shards.some((s) => s.node === name) && r.state !== "failed");
    // Drain first, so replicas move before they stop; an unreachable node cannot be waited for.
    if (on.length > 0 && node.state !== "unreachable") {
      const d = await client.send<{ message: string }>("POST", `${path}/drain`);
      if (flags.output !== "json") process.stdout.write(`${d.message}\n`);
      try {
        await waitForDrain(client, name, { timeoutMs: timeout, stallMs: parseDuration(STALL_AFTER)! });
      } catch (e) {
        if (!(e instanceof CliError)) throw e;
        process.stdout.write(`node/${name} not drained (${e.message}): deleting anyway, what is left on it stops\n`);
      }
    }
  }
  const r = await client.send<NodeDeleted>("DELETE", `${path}${flags.force ? "?force=1" : ""}`);
  say(flags, r);
}

export const joinTokenCommand: Command = {
  name: "join-token",
  summary: "Replace the join token (llmgw join-token rotate).",
  usage: "llmgw join-token rotate [--server URL] [--token TOKEN]",
  flags: { ...outputFlag(["table", "json"]), ...CLIENT_FLAGS },
  details:
    "rotate: a new join token is written where the old one was (join.token in the server's data dir, 0600); the old one stops admitting new nodes at once (with several control planes on one store, on every one of them). Nodes that have joined keep working with their own credentials. The new token is not printed: it is read from the file (see `llmgw join-command`).",
  examples: ["llmgw join-token rotate"],
  async run({ flags, positionals }) {
    if (positionals[0] !== "rotate" || positionals.length !== 1) throw new UsageError("join-token takes one verb: rotate");
    const r = await resolveClient(flags).send<JoinTokenRotated>("POST", "/api/v1/join-token/rotate");
    say(flags, r);
  },
};
