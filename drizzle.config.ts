// drizzle-kit settings: `npm run db:generate` writes a new migration into drizzle/ after a
// change to src/store/schema.ts.
import { defineConfig } from "drizzle-kit";

export default defineConfig({
  dialect: "sqlite",
  schema: "./src/store/schema.ts",
  out: "./drizzle",
});
