// drizzle-kit settings for the PostgreSQL dialect: `npm run db:generate` writes a new migration
// into drizzle/pg/ after a change to src/store/pg/schema.ts. Generating needs no database and no
// driver; the binary applies the migrations itself (src/store/migrations.ts).
import { defineConfig } from "drizzle-kit";

export default defineConfig({
  dialect: "postgresql",
  schema: "./src/store/pg/schema.ts",
  out: "./drizzle/pg",
});
