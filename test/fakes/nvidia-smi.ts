// Fake nvidia-smi for tests that run a real agent against contract-fake engines: answers the two
// queries GPU discovery makes (`--query-gpu=FIELDS --format=csv[,noheader][,nounits]` and `-L`)
// from a fixture of cards (test/fixtures/engines/nvidia-smi-*.json), in nvidia-smi's own format.
// Usage (from a bin/nvidia-smi wrapper): bun nvidia-smi.ts FIXTURE [nvidia-smi's arguments…]

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

type Card = Record<string, string | number>;
const [fixtureName, ...argv] = process.argv.slice(2);
// A driver that stops answering, while the file LLMGW_CONTRACT_SMI_FAIL_IF names exists: what
// nvidia-smi prints then, with NVML_ERROR_DRIVER_NOT_LOADED (9) as its status
// (test/fixtures/nvidia-smi/unhealthy-gpu-outputs.txt, ci-for-research/self-hosted-runners#40).
const failIf = process.env.LLMGW_CONTRACT_SMI_FAIL_IF;
if (failIf && existsSync(failIf)) {
  process.stdout.write("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n");
  process.exit(9);
}
const fx = JSON.parse(readFileSync(join(import.meta.dir, "..", "fixtures", "engines", `${fixtureName}.json`), "utf8")) as { gpus: Card[] };
// Several fake nodes on one machine must not report the same cards: LLMGW_CONTRACT_SMI_NODE=N
// makes the UUIDs end in N.
const node = process.env.LLMGW_CONTRACT_SMI_NODE;
if (node) for (const g of fx.gpus) g.uuid = `${String(g.uuid).slice(0, -4)}${Number(node).toString(16).padStart(4, "0")}`;
const UNITS: Record<string, string> = { "memory.total": "MiB", "temperature.gpu": "" };

if (argv[0] === "-L") {
  for (const g of fx.gpus) process.stdout.write(`GPU ${g.index}: ${g.name} (UUID: ${g.uuid})\n`);
  process.exit(0);
}
const query = argv.find((a) => a.startsWith("--query-gpu="));
const format = argv.find((a) => a.startsWith("--format="));
if (query === undefined || format === undefined) {
  process.stdout.write("The fake nvidia-smi answers only --query-gpu=… --format=csv and -L.\n");
  process.exit(2);
}
const fields = query.slice("--query-gpu=".length).split(",");
const opts = new Set(format.slice("--format=".length).split(","));
const unknown = fields.find((f) => !(f in fx.gpus[0]!));
if (unknown !== undefined) {
  process.stdout.write(`Field "${unknown}" is not a valid field to query.\n\n`);
  process.exit(2);
}
const unit = (f: string) => (UNITS[f] ? ` [${UNITS[f]}]` : "");
if (!opts.has("noheader")) process.stdout.write(`${fields.map((f) => (opts.has("nounits") ? f : `${f}${unit(f)}`)).join(", ")}\n`);
for (const g of fx.gpus) process.stdout.write(`${fields.map((f) => `${g[f]}${opts.has("nounits") || !UNITS[f] ? "" : ` ${UNITS[f]}`}`).join(", ")}\n`);
