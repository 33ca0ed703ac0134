// The router's settings from the serve configuration: the one place a ServeConfig becomes a
// RouterOptions' settings, for the router in the main thread and on its own thread alike (and
// for tests and benches, through test/helpers/router-settings.ts). Their defaults are the
// schema's, stated nowhere else.

import type { ServeConfig } from "../config";
import type { RouterOptions } from "../router/router";

export type RouterSettings = Pick<
  RouterOptions,
  | "maxBodyBytes"
  | "maxJsonDepth"
  | "maxJsonValues"
  | "maxAttempts"
  | "firstByteTimeoutMs"
  | "idleTimeoutMs"
  | "coldStartTimeoutMs"
  | "coldStartProgressMs"
  | "maxHeldPerModel"
  | "cooldownMs"
  | "metricsIntervalMs"
  | "balancer"
  | "usageLedger"
>;

export function routerSettings(config: ServeConfig): RouterSettings {
  return {
    maxBodyBytes: config.max_body_bytes,
    maxJsonDepth: config.max_json_depth,
    maxJsonValues: config.max_json_values,
    maxAttempts: config.max_attempts,
    firstByteTimeoutMs: config.first_byte_timeout,
    idleTimeoutMs: config.stream_idle_timeout,
    coldStartTimeoutMs: config.cold_start_timeout,
    coldStartProgressMs: config.cold_start_progress_interval,
    maxHeldPerModel: config.max_held_per_model,
    cooldownMs: config.endpoint_cooldown,
    metricsIntervalMs: config.engine_metrics_interval,
    usageLedger: config.usage_ledger,
    balancer: {
      loadFactor: config.balance_load_factor,
      // A conversation is held to the looser bound, never a tighter one than placement's.
      stickyLoadFactor: Math.max(config.balance_sticky_load_factor, config.balance_load_factor),
      stickySlots: config.balance_sticky_slots,
      vnodesPerWeight: config.balance_vnodes_per_weight,
      saturation: { inflight: config.balance_saturated_inflight, queue: config.balance_saturated_queue },
      kvHigh: config.balance_kv_high,
      queueHigh: config.balance_queue_high,
    },
  };
}
