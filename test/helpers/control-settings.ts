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
/** What a store is opened with (openStore({ ...STORE_DEFAULTS, target, dataDir })). */
export const STORE_DEFAULTS = storeSettings(ServeConfig.parse({}));
/** What a SQLite store is opened with (new Store({ path, ...SQLITE_DEFAULTS })). */
export const SQLITE_DEFAULTS = { busyTimeoutMs: STORE_DEFAULTS.busyTimeoutMs };
/** What a PostgreSQL store is opened with (PgStore.open({ ...PG_DEFAULTS, url })). */
export const PG_DEFAULTS = { queryTimeoutMs: STORE_DEFAULTS.queryTimeoutMs };
