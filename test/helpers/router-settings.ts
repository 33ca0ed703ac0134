// The router's settings as `llmgw serve` would give them with no flags: read from the config
// schema, where every default is written once.

import { routerSettings } from "../../src/app/router-settings";
import { ServeConfig } from "../../src/config";

export const ROUTER_DEFAULTS = routerSettings(ServeConfig.parse({}));

/** The balancer's settings as the router gets them by default, for tests and benches that build a Balancer of their own. */
export const BALANCER_DEFAULTS = ROUTER_DEFAULTS.balancer;
