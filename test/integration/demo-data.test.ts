// The demo wipes the database it finds in its data dir only when a previous demo wrote it (or it
// holds nothing): a real server's data is never the demo's to delete.

import { expect, test } from "bun:test";
import { join } from "node:path";
import { holdsServerData } from "../../src/app/cluster";
import { Store } from "../../src/store";
import { heartbeat } from "../helpers/fleet";
import { testServer } from "../helpers/server";
import { scratchDir } from "../helpers/tmp";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

test("no database, or an empty one, is no server's data", async () => {
  expect(holdsServerData(scratchDir("llmgw-demo-"))).toBe(false);
  const s = await testServer();
  await s.stop();
  expect(holdsServerData(s.dataDir)).toBe(false);
});

test("a server's database with a node in it is; the same marked as a demo's is not", async () => {
  const s = await testServer();
  expect((await s.agent(heartbeat({ name: "gpu-01" }))).status).toBe(200);
  await s.stop();
  expect(holdsServerData(s.dataDir)).toBe(true);
  const store = new Store({ path: join(s.dataDir, "llmgw.db"), ...SQLITE_DEFAULTS });
  store.setMeta("mode", "demo");
  store.close();
  expect(holdsServerData(s.dataDir)).toBe(false);
});
