// Runs the stand-in Hub with the options in the JSON file given, and prints its URL.
import { readFileSync } from "node:fs";
import { startFakeHub } from "../../src/sim/fake-hub";

const hub = startFakeHub(JSON.parse(readFileSync(process.argv[2]!, "utf8")));
process.stdout.write(`${hub.url}\n`);
