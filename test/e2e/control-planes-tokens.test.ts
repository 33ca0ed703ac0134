// The admin and join tokens of two `serve --ha` on one SQLite file, end to end with the compiled
// binary (the scenario is test/helpers/shared-tokens.ts): the store keeps their digests only, a
// rotation on one control plane is followed by the other within seconds, and no restart brings
// a rotated-away join token back. A control plane without the admin token refuses to start.

import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ADMIN_TOKEN, HaCluster } from "../helpers/ha-cluster";
import { freePort } from "../helpers/ports";
import { sharedTokensScenario } from "../helpers/shared-tokens";
import { until } from "../helpers/until";

let c: HaCluster;

sharedTokensScenario("SQLite", {
  cluster: async () => (c = new HaCluster(["--lease-ttl", "3s", "--lease-renew", "1s"], undefined, { joinToken: "file" })),
  meta: async () => {
    const db = new Database(c.storeOf("cp-a"), { readonly: true });
    try {
      return db.query("SELECT key, value FROM meta").all() as { key: string; value: string }[];
    } finally {
      db.close();
    }
  },
});

describe("a control plane without the admin token", () => {
  test("refuses to start, saying to copy admin.token or give --admin-token, and leaves no token behind; with the copy it starts", async () => {
    const dataDir = join(c.dir, "data-cp-c");
    const start = () =>
      Bun.spawn([c.bin, "serve", "--data-dir", dataDir, "--store", c.storeOf("cp-c"), "--ha", "--name", "cp-c", "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${freePort()}`], {
        cwd: c.dir,
        env: { PATH: process.env.PATH ?? "" },
        stdout: "ignore",
        stderr: "pipe",
      });
    const refused = start();
    expect(await refused.exited).toBe(1);
    const stderr = await new Response(refused.stderr).text();
    expect(stderr).toContain(`copy admin.token from the data dir of a control plane that has it to ${join(dataDir, "admin.token")}`);
    expect(stderr).toContain("--admin-token");
    expect(existsSync(join(dataDir, "admin.token"))).toBe(false);
    expect(existsSync(join(dataDir, "join.token"))).toBe(false);
    // The operator copies it (here: the token the others were given).
    writeFileSync(join(dataDir, "admin.token"), `${ADMIN_TOKEN}\n`, { mode: 0o600 });
    const started = start();
    try {
      const info = await until("cp-c's server.json", () => {
        if (started.exitCode !== null) throw new Error(`cp-c exited with ${started.exitCode}`);
        return existsSync(join(dataDir, "server.json")) ? (JSON.parse(readFileSync(join(dataDir, "server.json"), "utf8")) as { admin_url: string }) : undefined;
      }, 20_000);
      const r = await fetch(`${info.admin_url}/api/v1/summary`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      expect(r.status).toBe(200);
    } finally {
      started.kill("SIGTERM");
      await started.exited;
    }
  }, 45_000);
});
