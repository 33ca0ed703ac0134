// drizzle-kit settings for the SQLite dialect: `npm run db:generate` writes a new migration
// into drizzle/sqlite/ after a change to src/store/schema.ts (and one into drizzle/pg/ from
// src/store/pg/schema.ts, by drizzle.pg.config.ts). Add each new file to src/store/migrations.ts.
import { defineConfig } from "drizzle-kit";

export default defineConfig({
  dialect: "sqlite",
  schema: "./src/store/schema.ts",
  out: "./drizzle/sqlite",
});
