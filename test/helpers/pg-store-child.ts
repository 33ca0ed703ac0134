// A PostgreSQL store (PgStore) in a process of its own, driven one command a line over stdin, for
// tests of what a lost connection does to the process around the store: an exception no caller
// can catch ends this process, as it would end serve, where in the test's own process it would
// end the test runner. Nothing here awaits at the top level: while the entry module's top-level
// await is pending, Bun prints an uncaught exception and goes on, where Node ends the process.
//
//   bun test/helpers/pg-store-child.ts <url> <queryTimeoutMs> [idleInTransactionTimeoutMs]
//
// Each command is answered with one JSON line on stdout:
//   busy       starts three writes that each run in a transaction and take row locks (a plan, a
//              touch of node n1, a group of heartbeats)          → {"started":3}
//   settle     waits for them                                     → {"outcomes":[Outcome, …]}
//   count      countNodes                                         → {"outcome":Outcome,"count":n}
//   stall MS   holds this process's thread for MS ms (a client that stops sending mid-transaction)
//                                                                → {"stalling":MS}, then {"stalled":MS}
//   exit       closes the store and exits 0
// An Outcome is "ok" or {"error": class name, "code", "driverCode", "message"}.

import { PgStore } from "../../src/store/pg";
import type { PlanWrite } from "../../src/control/types";
import { heartbeat } from "./fleet";
import { PG_DEFAULTS } from "./control-settings";

const NOW = 1_800_000_000_000;
const PLAN = { create: [], update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [{ kind: "k", subject: "s", message: "m" }] } as PlanWrite;

type Outcome = "ok" | { error: string; code?: string; driverCode?: string; message: string };

const outcome = (p: Promise<unknown>): Promise<Outcome> =>
  p.then(
    () => "ok" as const,
    (e: unknown) => {
      const err = e as Error & { code?: string; driverCode?: string };
      return { error: err.constructor.name, code: err.code, driverCode: err.driverCode, message: err.message };
    },
  );

const say = (x: unknown) => process.stdout.write(`${JSON.stringify(x)}\n`);

async function main(): Promise<void> {
  const [url, deadline, idle] = process.argv.slice(2);
  if (!url || !deadline) throw new Error("usage: pg-store-child.ts <url> <queryTimeoutMs> [idleInTransactionTimeoutMs]");
  const store = await PgStore.open({ ...PG_DEFAULTS, url, queryTimeoutMs: Number(deadline), idleInTransactionTimeoutMs: idle ? Number(idle) : undefined });
  await store.applyHeartbeat(heartbeat({ name: "n1" }), NOW);
  let busy: Promise<Outcome>[] = [];
  say({ ready: true });
  let buffered = "";
  for await (const chunk of process.stdin) {
    buffered += String(chunk);
    for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
      const [cmd, arg] = buffered.slice(0, nl).trim().split(/\s+/);
      buffered = buffered.slice(nl + 1);
      if (cmd === "busy") {
        busy = [store.applyPlan(PLAN, NOW), store.touchNodes([{ name: "n1", at: NOW + 1 }]), store.applyHeartbeats([heartbeat({ name: "n1" })], NOW)].map(outcome);
        say({ started: busy.length });
      } else if (cmd === "settle") say({ outcomes: await Promise.all(busy) });
      else if (cmd === "count") {
        let n = -1;
        say({ outcome: await outcome(store.countNodes().then((c) => (n = c))), count: n });
      } else if (cmd === "stall") {
        say({ stalling: Number(arg) });
        const until = performance.now() + Number(arg);
        while (performance.now() < until);
        say({ stalled: Number(arg) });
      } else if (cmd === "exit") {
        await store.close();
        process.exit(0);
      } else say({ unknown: cmd });
    }
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`pg-store-child: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(3);
});
