// The router's own thread (a Worker inside `llmgw serve`): it builds the Router from the plain
// data the head node passes in workerData and talks to the control plane only through the
// messages of protocol/router-link.ts, so a heartbeat flood, a large apply or a slow store on
// the main thread never delays a request. See router-thread.ts for the other side.

import { getPriority, setPriority } from "node:os";
import { parentPort, workerData } from "node:worker_threads";
import { realScheduler } from "../lib/scheduler";
import { type LogOutput, createLogger } from "../log";
import { type FromRouter, ToRouter } from "../protocol/router-link";
import type { CatalogEntry, EndpointInfo, ModelTraffic } from "../protocol/routing";
import { Router, type RouterOptions } from "../router/router";
import { shedLogger } from "./router-shed";
import { ListReceived, ListSent } from "./list-delta";

/** What the head node hands the router thread: everything but the scheduler, the log and the demand sink. */
export type RouterWorkerData = Omit<RouterOptions, "scheduler" | "log" | "demand" | "listener"> & {
  logLevel: string;
  logOutput: LogOutput;
  listener: Omit<NonNullable<RouterOptions["listener"]>, "onShed">;
};

function main(): void {
  const port = parentPort;
  if (!port) throw new Error("router-worker.ts runs only as a Worker");
  const data = workerData as RouterWorkerData;
  const log = createLogger({ level: data.logLevel, role: "serve", format: data.logOutput }).child({ component: "router", thread: "router" });
  const send = (m: FromRouter) => port.postMessage(m);
  const shed = shedLogger(log, realScheduler);
  const { logLevel: _level, logOutput: _output, listener, ...options } = data;
  const router = new Router({
    ...options,
    scheduler: realScheduler,
    log,
    demand: { requestModel: (model) => send({ type: "demand", model }) },
    listener: { ...listener, onShed: (cap, address) => shed("router", cap, address) },
  });
  raisePriority(log);
  // The tables come as changes, the traffic figures go as changes (list-delta.ts).
  const endpointsIn = new ListReceived<EndpointInfo>((e) => e.id);
  const catalogIn = new ListReceived<CatalogEntry>((m) => m.name);
  const trafficOut = new ListSent<ModelTraffic>((t) => t.model);
  // Cannot happen while both sides run this code: said loudly if it does, since what is left out is not routed to.
  const outOfStep = (what: string, missing: number) => {
    if (missing > 0) log.error({ missing }, `router thread: ${missing} ${what} named without ever being sent whole; left out until they change`);
  };
  try {
    send({ type: "started", port: router.start().port });
  } catch (e) {
    send({ type: "failed", error: (e as Error).message });
    return;
  }
  port.on("message", (raw: unknown) => {
    const parsed = ToRouter.safeParse(raw);
    if (!parsed.success) {
      log.error({ issues: parsed.error.issues.slice(0, 3) }, "router thread: dropped a malformed message from the control plane");
      return;
    }
    const m = parsed.data;
    switch (m.type) {
      case "endpoints":
        router.setEndpoints(endpointsIn.take(m));
        return outOfStep("endpoints", endpointsIn.missing);
      case "catalog":
        router.setCatalog(catalogIn.take(m));
        return outOfStep("catalog entries", catalogIn.missing);
      case "api_keys":
        return router.setApiKeys(m.keys);
      case "budget_spent":
        return router.setBudgetSpent(m);
      case "limit_shares":
        return router.setLimitShares(m);
      case "fleet_metrics":
        return router.setFleetMetrics(m.text);
      case "usage_request":
        // Models with nothing in flight are left out: a missing model reads as 0, and the
        // message (cloned and validated on the control plane's thread every tick) stays as small
        // as the traffic, not as the catalog.
        return send({ type: "usage", id: m.id, lastUsed: [...router.lastUsed()], inflightByModel: [...router.inflightByModel()].filter(([, n]) => n > 0), inflightByReplica: [...router.inflightByReplica()], limitUse: router.limitUse(), ledger: router.takeLedger(), ledger_gen: router.ledgerGen() });
      case "traffic_request":
        return send({ type: "traffic", id: m.id, ...trafficOut.delta(router.trafficNow()) });
      case "ledger_check_request":
        return send({ type: "ledger_check", id: m.id, replicas: router.reconciliation() });
      case "stop":
        void router.stop().then(() => {
          send({ type: "stopped" });
          port.close();
        });
    }
  });
}

/**
 * How much nicer the control plane is than the router thread. On a head node with few cores
 * the router thread otherwise waits its turn behind the control plane's work (placing a large
 * catalog, a heartbeat flood): on Linux a thread's nice value is its own, so the router thread
 * asks for this much more CPU priority than the process has, which the control plane's thread
 * keeps. It needs CAP_SYS_NICE (the unit `llmgw install serve` writes grants it); without, the
 * thread runs at the process's priority, as before.
 */
const ROUTER_PRIORITY_BOOST = 5;

function raisePriority(log: { info(o: object, m: string): void; debug(o: object, m: string): void }): void {
  const base = osPriority(() => getPriority(0));
  if (typeof base !== "number") return;
  const want = Math.max(-20, base - ROUTER_PRIORITY_BOOST);
  const err = osPriority(() => setPriority(0, want));
  if (err instanceof Error) log.debug({ nice: base, wanted: want, err: err.message }, "router thread: runs at the process's CPU priority (raising it needs CAP_SYS_NICE)");
  else log.info({ nice: want, control_plane_nice: base }, "router thread: runs at a higher CPU priority than the control plane");
}

function osPriority<T>(f: () => T): T | Error | undefined {
  try {
    return f();
  } catch (e) {
    return e instanceof Error ? e : undefined;
  }
}

main();
