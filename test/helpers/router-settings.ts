// The router's settings as `llmgw serve` would give them with no flags: read from the config
// schema, where every default is written once.

import { routerSettings } from "../../src/app/head";
import { ServeConfig } from "../../src/config";

export const ROUTER_DEFAULTS = routerSettings(ServeConfig.parse({}));
