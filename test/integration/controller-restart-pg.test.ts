// A head node restarted over a PostgreSQL store answers its agents' first heartbeats and long
// polls with their whole sets, never with an empty one (test/contract/head-restart.ts), against a
// real PostgreSQL (test/helpers/postgres.ts), a fresh database per case.

import { afterAll, beforeAll } from "bun:test";
import { PgStore } from "../../src/store/pg";
import { headRestartContract } from "../contract/head-restart";
import { type Postgres, startPostgres } from "../helpers/postgres";
import { PG_DEFAULTS } from "../helpers/control-settings";

let pg: Postgres;
beforeAll(async () => {
  pg = await startPostgres();
}, 60_000);
afterAll(async () => {
  await pg?.stop();
}, 30_000);

let n = 0;
headRestartContract("PostgreSQL", async () => {
  const db = `restart_${++n}`;
  await pg.sql(`CREATE DATABASE ${db}`, "postgres");
  const store = await PgStore.open({ ...PG_DEFAULTS, url: pg.url.replace(/\/llmgw$/, `/${db}`) });
  return { store, close: () => store.close() };
});
