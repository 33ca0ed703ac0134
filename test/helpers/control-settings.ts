// The control plane's and the store's settings as `llmgw serve` would give them with no flags:
// read from the config schema, where every default is written once (as router-settings.ts does
// for the router).

import { ServeConfig } from "../../src/config";
import { controlSettings, storeSettings } from "../../src/app/settings";

export const CONTROL_DEFAULTS = controlSettings(ServeConfig.parse({}));
/** The reconciler's settings with no flags. */
export const RECONCILE_DEFAULTS = CONTROL_DEFAULTS.reconcile;
/** Who may join and how often, with no flags. */
export const NODE_POLICY_DEFAULTS = CONTROL_DEFAULTS.policy;
/** What a SQLite store is opened with (new Store({ path, ...SQLITE_DEFAULTS })). */
export const SQLITE_DEFAULTS = { busyTimeoutMs: storeSettings(ServeConfig.parse({})).busyTimeoutMs };
/** What a PostgreSQL store is opened with (PgStore.open({ url, ...PG_DEFAULTS })). */
export const PG_DEFAULTS = { queryTimeoutMs: storeSettings(ServeConfig.parse({})).queryTimeoutMs };
