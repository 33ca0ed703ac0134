// The control plane's and the store's settings from the configuration, whose schema (ServeConfig)
// holds every default once: the head node passes these to its parts, and the tests read the
// defaults through the same functions (test/helpers/control-settings.ts).

import type { ServeConfig } from "../config";
import type { NodePolicy } from "../control/admission";
import { type ReconcileConfig, startMargin } from "../control/reconciler";

export interface ControlSettings {
  reconcile: ReconcileConfig;
  policy: NodePolicy;
  /** The heartbeat interval announced to agents when the head node is not behind (load.ts). */
  heartbeatIntervalMs: number;
  /** Load must stay low this long before a model scales down. */
  scaleDownDelayMs: number;
  /** How long the usage ledger's rows are kept. */
  usageRetentionMs: number;
}

export function controlSettings(config: ServeConfig): ControlSettings {
  return {
    reconcile: {
      nodeTimeoutMs: config.node_timeout,
      startTimeoutMs: config.start_timeout,
      startMarginMs: startMargin(config.heartbeat_interval),
      maxFailures: config.max_failures,
      backoffMs: config.restart_backoff,
      backoffMaxMs: config.restart_backoff_max,
      crashWindowMs: config.crash_window,
      replaceAfterMs: config.replace_after,
      // A replica an agent has not mentioned in a few heartbeats after placement is lost.
      reportGraceMs: Math.max(3 * config.heartbeat_interval, 5_000),
      basePort: config.engine_base_port,
      portCount: config.engine_port_range,
      drainTimeoutMs: config.drain_timeout,
    },
    policy: { approveNodes: config.approve_nodes, maxNodes: config.max_nodes, heartbeatRate: config.heartbeat_rate, heartbeatBurst: config.heartbeat_burst },
    heartbeatIntervalMs: config.heartbeat_interval,
    scaleDownDelayMs: config.scale_down_delay,
    usageRetentionMs: config.usage_retention,
  };
}

/** What a store is opened with: how long a SQLite write waits for a lock, how long a PostgreSQL call may take. */
export function storeSettings(config: ServeConfig): { busyTimeoutMs: number; queryTimeoutMs: number } {
  return { busyTimeoutMs: config.db_busy_timeout, queryTimeoutMs: config.db_query_timeout };
}
