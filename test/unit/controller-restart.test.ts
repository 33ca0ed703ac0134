// A head node restarted over its SQLite store answers its agents' first heartbeats and long polls
// with their whole sets, never with an empty one (test/contract/head-restart.ts).

import { Store } from "../../src/store";
import { headRestartContract } from "../contract/head-restart";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

headRestartContract("SQLite", async () => {
  const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
  return { store, close: async () => store.close() };
});
