// The admin and join tokens of two `serve` on one PostgreSQL, end to end with the compiled binary
// (the scenario is test/helpers/shared-tokens.ts): the store keeps their digests only, a rotation
// on one control plane is followed by the other within seconds, and no restart brings a
// rotated-away join token back.

import { HaCluster } from "../helpers/ha-cluster";
import { type Postgres, startPostgres } from "../helpers/postgres";
import { sharedTokensScenario } from "../helpers/shared-tokens";

let pg: Postgres;

sharedTokensScenario("PostgreSQL", {
  cluster: async () => {
    pg = await startPostgres();
    return new HaCluster(["--lease-ttl", "3s", "--lease-renew", "1s"], () => pg.url, { joinToken: "file" });
  },
  meta: async () => (await pg.sql("SELECT key, value FROM meta")).map((r) => ({ key: String(r.key), value: String(r.value) })),
  after: async () => {
    await pg?.stop();
  },
});
