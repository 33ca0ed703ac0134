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

/** Every key list the plane's control plane handed its router. */
function routerOf(p: Plane): ApiKeyEntry[][] {
  return p.router.keys;
}
const names = (lists: ApiKeyEntry[][]) => lists.at(-1)?.map((k) => k.name);

describe("API keys on several control planes", () => {
  test("created and revoked on one: the other's router follows after the change feed's tick; an unchanged list is not sent again", async () => {
    env = await startPlanes({ names: ["a", "b"], clock: new ManualScheduler(T0) });
    const [a, b] = env.planes as [Plane, Plane];
    await lead(a);
    const onB = routerOf(b);
    expect(onB).toEqual([[]]);
    await a.ctl.keys.createApiKey("k1");
    // b's watch tells its control loop, which ticks (the app's loop does it on wake).
    await until("b's router to hold k1", async () => {
      await b.ctl.loop.tick();
      return names(onB)?.includes("k1");
    });
    const sent = onB.length;
    await b.ctl.loop.tick();
    expect(onB.length).toBe(sent);
    await a.ctl.keys.revokeApiKey("k1");
    await until("b's router to drop k1", async () => {
      await b.ctl.loop.tick();
      return names(onB)?.length === 0;
    });
  });

  test("a notification missed: the backstop reload and the next tick hand the router the key; a new router gets the list at once", async () => {
    env = await startPlanes({ names: ["a", "b"], clock: new ManualScheduler(T0), watch: false });
    const [a, b] = env.planes as [Plane, Plane];
    await lead(a);
    const onB = routerOf(b);
    await b.ctl.loop.tick();
    await a.ctl.keys.createApiKey("k2", "p1");
    await b.ctl.loop.tick();
    expect(names(onB)).toEqual([]);
    expect(await b.image.reload()).toBe(true);
    await b.ctl.loop.tick();
    expect(onB.at(-1)).toEqual([{ name: "k2", sha256: expect.any(String), pool: "p1" }]);
    // A restarted router: handed the list though it did not change.
    const sent = onB.length;
    await b.ctl.projector.start();
    expect(onB.length).toBe(sent + 1);
    expect(names(onB)).toEqual(["k2"]);
  });

  test("a key changed or a team's limits changed on one: the other's router gets the key with its new limits and its team's", async () => {
    env = await startPlanes({ names: ["a", "b"], clock: new ManualScheduler(T0) });
    const [a, b] = env.planes as [Plane, Plane];
    await lead(a);
    const onB = routerOf(b);
    await a.ctl.teams.createTeam({ name: "search", rpm: 100 });
    await a.ctl.keys.createApiKey("k3", undefined, { team: "search", tpm: 1000, models: ["m1"] });
    const last = () => onB.at(-1)?.find((k) => k.name === "k3");
    await until("b's router to hold k3 with its team's limits", async () => {
      await b.ctl.loop.tick();
      return last()?.teamLimits?.rpm === 100;
    });
    expect(last()).toMatchObject({ team: "search", models: ["m1"], limits: { tpm: 1000 }, teamLimits: { rpm: 100 } });
    await a.ctl.teams.updateTeam("search", { rpm: null, budget_gpu_hours: 2, priority: "batch" });
    await until("b's router to hold the team's new limits", async () => {
      await b.ctl.loop.tick();
      return last()?.teamLimits?.budgetGpuHours === 2;
    });
    expect(last()?.teamLimits).toEqual({ budgetGpuHours: 2 });
    expect(last()?.tier).toBe("batch");
    await a.ctl.keys.updateApiKey("k3", { tpm: null, models: null });
    await until("b's router to hold the key's change", async () => {
      await b.ctl.loop.tick();
      return last() !== undefined && last()!.limits === undefined && last()!.models === undefined;
    });
    await a.ctl.teams.deleteTeam("search", true);
    await until("b's router to drop the team's key", async () => {
      await b.ctl.loop.tick();
      return last() === undefined;
    });
    const events = (await a.ctl.events.events({ limit: 20 })).filter((e) => e.subject === "team/search" || e.subject === "key/k3");
    expect(events.map((e) => `${e.kind} ${e.message}`)).toEqual([
      "team.created team search created: rpm 100",
      "key.created API key k3 created in team search, tpm 1000",
      "team.updated team search changed: no rpm, budget_gpu_hours 2, priority batch",
      "key.updated API key k3 changed: no models, no tpm",
      "key.revoked API key k3 revoked with its team search",
      "team.deleted team search deleted, its 1 key revoked",
    ]);
  });
});
