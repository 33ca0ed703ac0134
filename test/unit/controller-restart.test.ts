// A head node restarted over its SQLite store answers its agents' first heartbeats and long polls
// with their whole sets, never with an empty one (test/contract/head-restart.ts).

import { Store } from "../../src/store";
import { headRestartContract } from "../contract/head-restart";

headRestartContract("SQLite", async () => {
  const store = new Store({ path: ":memory:" });
  return { store, close: async () => store.close() };
});
