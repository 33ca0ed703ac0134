// Two `serve` under one --name on one store (two on one machine both defaulting to its host
// name, or machines cloned from one image), end to end with the compiled binary on a shared
// SQLite file: the second refuses to start, naming the clash and --name, and the first goes on
// leading alone. The lease is held by the process, not the name: the same control plane killed
// and started again at once is not refused, and leads only once its predecessor's lease lapsed,
// under a new epoch; stopped cleanly and started again, it leads again at once.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { HaCluster } from "../helpers/ha-cluster";
import { freePort } from "../helpers/ports";
import { until } from "../helpers/until";

const TTL_MS = 3000;
const RENEW_MS = 1000;

let c: HaCluster;

beforeAll(async () => {
  c = new HaCluster(["--lease-ttl", `${TTL_MS}ms`, "--lease-renew", `${RENEW_MS}ms`]);
  await c.startServe("head");
  await until("head leads", async () => (await c.health("head"))?.status === 200);
}, 60_000);
afterAll(() => c?.cleanup(), 30_000);

const leaseRow = () => {
  const db = new Database(c.storeOf("head"), { readonly: true });
  try {
    return db.query("SELECT holder, epoch FROM leases WHERE name = 'leader'").get() as { holder: string; epoch: number };
  } finally {
    db.close();
  }
};

describe("one --name, two processes", () => {
  test("a second serve under the name of a live one refuses to start, naming the clash and --name; the first leads alone", async () => {
    const dataDir = join(c.dir, "data-twin");
    const proc = Bun.spawn(
      [c.bin, "serve", "--data-dir", dataDir, "--store", c.storeOf("head"), "--ha", "--name", "head", "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${freePort()}`,
        "--lease-ttl", `${TTL_MS}ms`, "--lease-renew", `${RENEW_MS}ms`, "--admin-token", "llmgw_admin_ha_cluster_test_token_0123456789", "--join-token", "llmgw_join_ha_cluster_test_token_0123456789"],
      { cwd: c.dir, env: { PATH: process.env.PATH ?? "" }, stdout: "pipe", stderr: "pipe" },
    );
    const exited = await Promise.race([proc.exited, Bun.sleep(15_000).then(() => "still running" as const)]);
    if (exited === "still running") proc.kill("SIGKILL");
    const stderr = await new Response(proc.stderr).text();
    expect(exited).toBe(1);
    expect(stderr).toContain("another control plane named head is running on this store");
    expect(stderr).toContain("--name");
    // It never said it leads, and the first one does.
    expect(await new Response(proc.stdout).text()).not.toContain("leads (epoch");
    expect(await c.health("head")).toMatchObject({ status: 200, body: { leading: true, epoch: 1, name: "head" } });
    expect(leaseRow()).toMatchObject({ holder: expect.stringMatching(/^head@[0-9a-f]{8}$/), epoch: 1 });
  }, 30_000);

  test("killed and started again at once, the same control plane is not refused, and leads under a new epoch once the old lease lapsed", async () => {
    const before = leaseRow().holder;
    const adminUrl = c.serve("head").adminUrl;
    c.kill9("head");
    const restarted = Date.now();
    // Its listeners open before it asks for the lease (and here it waits for its predecessor's
    // row to go still first): every leader check answered meanwhile must say it does not lead.
    const answers: { status: number; leading: boolean; epoch: number }[] = [];
    let watching = true;
    const watch = (async () => {
      while (watching) {
        try {
          const r = await fetch(`${adminUrl}/healthz?leader=1`);
          const b = (await r.json()) as { leading: boolean; epoch: number };
          answers.push({ status: r.status, leading: b.leading, epoch: b.epoch });
          if (b.leading) return;
        } catch {
          // Not listening yet.
        }
        await Bun.sleep(20);
      }
    })();
    await c.startServe("head");
    const leads = await until("head leads again", async () => ((await c.health("head"))?.status === 200 ? Date.now() : undefined), 15_000);
    watching = false;
    await watch;
    expect(answers.filter((a) => a.status === 503).length).toBeGreaterThan(0);
    expect(answers.filter((a) => a.leading || a.status === 200).map((a) => a.epoch)).not.toContain(0);
    expect(answers.filter((a) => a.leading || a.status === 200).map((a) => a.epoch)).not.toContain(1);
    console.log(`restart under the same name: serving after ${leads - restarted} ms (the predecessor's lease had up to ${TTL_MS} ms left)`);
    expect((await c.health("head"))!.body).toMatchObject({ leading: true, epoch: 2, name: "head" });
    const now = leaseRow();
    expect(now.epoch).toBe(2);
    expect(now.holder).not.toBe(before);
    expect(now.holder.startsWith("head@")).toBe(true);
    // Its predecessor's row was seconds old, but nothing listens at its address here any more:
    // no watch of the row, only the wait for the old lease to lapse.
    const log = readFileSync(join(c.dir, "serve-head-2.log"), "utf8");
    expect(log).toContain("nothing listens at");
    expect(log).not.toContain("waiting up to");
  }, 30_000);

  test("stopped cleanly and started again, it leads again at once: no watch of its own row, the lease it released taken under a new epoch", async () => {
    const epoch = leaseRow().epoch;
    await c.stop("head");
    const restarted = Date.now();
    await c.startServe("head");
    const leads = await until("head leads again", async () => ((await c.health("head"))?.status === 200 ? Date.now() : undefined), 15_000);
    console.log(`clean restart under the same name: leading after ${leads - restarted} ms`);
    // Watching the row would cost two renewals and a margin (2.5 s here) before the lease is even asked.
    expect(leads - restarted).toBeLessThan(2500);
    expect((await c.health("head"))!.body).toMatchObject({ leading: true, epoch: epoch + 1, name: "head" });
    const log = readFileSync(join(c.dir, "serve-head-3.log"), "utf8");
    expect(log).toContain("nothing listens at");
    expect(log).not.toContain("waiting up to");
  }, 30_000);
});
