// Loaded before the test files (bunfig.toml): what runs once for the whole `bun test` run.
import { afterAll } from "bun:test";
import { removeScratch } from "./helpers/tmp";

afterAll(removeScratch);
