// Client API keys reach every control plane's router, however the change arrived: the store's
// change feed (another control plane created or revoked a key), the backstop reload (the
// notification was missed), or a start. Two controllers on one SQLite file, one manual clock.

import { afterEach, describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { ApiKeyEntry } from "../../src/protocol/routing";
import { T0 } from "../helpers/fleet";
import { type Plane, type Planes, lead, startPlanes } from "../helpers/planes";
import { until } from "../helpers/until";

let env: Planes | undefined;
afterEach(() => {
  env?.stop();
  env = undefined;
});

/** Keeps every key list the plane's controller hands its router. */
async function routerOf(p: Plane): Promise<ApiKeyEntry[][]> {
  const lists: ApiKeyEntry[][] = [];
  await p.ctl.setEndpointSink({ setEndpoints: () => {}, setCatalog: () => {}, setApiKeys: (k) => lists.push(k) });
  return lists;
}
const names = (lists: ApiKeyEntry[][]) => lists.at(-1)?.map((k) => k.name);

describe("API keys on several control planes", () => {
  test("created and revoked on one: the other's router follows after the change feed's tick; an unchanged list is not sent again", async () => {
    env = await startPlanes({ names: ["a", "b"], clock: new ManualScheduler(T0) });
    const [a, b] = env.planes as [Plane, Plane];
    await lead(a);
    const onB = await routerOf(b);
    expect(onB).toEqual([[]]);
    await a.ctl.createApiKey("k1");
    // b's watch tells its controller, which ticks (the app's loop does it on wake).
    await until("b's router to hold k1", async () => {
      await b.ctl.tick();
      return names(onB)?.includes("k1");
    });
    const sent = onB.length;
    await b.ctl.tick();
    expect(onB.length).toBe(sent);
    await a.ctl.revokeApiKey("k1");
    await until("b's router to drop k1", async () => {
      await b.ctl.tick();
      return names(onB)?.length === 0;
    });
  });

  test("a notification missed: the backstop reload and the next tick hand the router the key; a new router gets the list at once", async () => {
    env = await startPlanes({ names: ["a", "b"], clock: new ManualScheduler(T0), watch: false });
    const [a, b] = env.planes as [Plane, Plane];
    await lead(a);
    const onB = await routerOf(b);
    await b.ctl.tick();
    await a.ctl.createApiKey("k2", "p1");
    await b.ctl.tick();
    expect(names(onB)).toEqual([]);
    expect(await b.model.reload()).toBe(true);
    await b.ctl.tick();
    expect(onB.at(-1)).toEqual([{ name: "k2", sha256: expect.any(String), pool: "p1" }]);
    // A restarted router thread, or a new sink: handed the list though it did not change.
    const fresh = await routerOf(b);
    expect(names(fresh)).toEqual(["k2"]);
  });
});
