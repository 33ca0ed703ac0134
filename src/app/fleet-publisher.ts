// Hands the router the fleet's gauges after control-loop ticks: the control plane's tables
// rendered as exposition text (control/fleet-metrics.ts), sent through the FleetMetricsSink
// (the router in this thread, or the router thread's link), so the router's /metrics serves
// the fleet beside its own series. At most once per interval, and never two at once: a busy
// loop ticking on every heartbeat does not render the fleet on every tick.

import type { Logger } from "pino";
import type { FleetViews } from "../control/fleet-views";
import type { LeadershipView } from "../control/leadership";
import { fleetMetricsPaced } from "../control/fleet-metrics";
import { letIoIn, type Scheduler } from "../lib/scheduler";
import type { FleetMetricsSink } from "../protocol/routing";

/**
 * Least time between two renderings, ms. Rendering builds the fleet's tables (at 2,000 nodes a
 * few percent of a core when done every second); a scrape interval is 15 s or more.
 */
export const FLEET_METRICS_INTERVAL_MS = 5_000;

export class FleetPublisher {
  private last = Number.NEGATIVE_INFINITY;
  private busy = false;
  private failing: string | undefined;

  constructor(private readonly o: { views: Pick<FleetViews, "tables">; leadership: LeadershipView; sink: FleetMetricsSink; scheduler: Scheduler; log: Logger }) {}

  /** Renders and sends the fleet gauges, unless done less than an interval ago (`force`: regardless). */
  async publish(force = false): Promise<void> {
    const now = this.o.scheduler.mono();
    if (this.busy || (!force && now - this.last < FLEET_METRICS_INTERVAL_MS)) return;
    this.busy = true;
    this.last = now;
    try {
      const leading = this.o.leadership.get().leading;
      // A standby exports no fleet (the leader does): its tables are not even built.
      const tables = leading ? await this.o.views.tables() : { nodes: [], replicas: [], models: [] };
      // Rendered in steps, the I/O already due let in between (a heartbeat waits for one family, not all).
      this.o.sink.setFleetMetrics(await fleetMetricsPaced(tables, { leading }, () => letIoIn(this.o.scheduler)));
      this.failing = undefined;
    } catch (e) {
      // The last text stays on /metrics; said once per cause.
      const why = (e as Error).message;
      if (why !== this.failing) this.o.log.warn({ err: why }, "fleet metrics not updated");
      this.failing = why;
    } finally {
      this.busy = false;
    }
  }
}
