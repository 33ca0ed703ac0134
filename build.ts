// Compiles dist/llmgw: one self-contained executable for this machine's platform, minified,
// with the version stamped in and .env/bunfig autoloading off (a binary copied onto a head
// node must not change behaviour because of files in whatever directory it is started from).
// Bytecode with ESM output cuts start-up, which `llmgw status` pays on every call.

import pkg from "./package.json";

const version = process.env.LLMGW_VERSION ?? pkg.version;
const outfile = process.argv[2] ?? "dist/llmgw";

const result = await Bun.build({
  // The router thread's module and its body worker's are entrypoints of their own: a compiled
  // binary starts Workers only from those.
  entrypoints: ["./src/main.ts", "./src/app/router-worker.ts", "./src/router/body-worker.ts"],
  compile: {
    outfile,
    autoloadDotenv: false,
    autoloadBunfig: false,
  },
  minify: true,
  bytecode: true,
  format: "esm",
  sourcemap: "none",
  define: { __LLMGW_VERSION__: JSON.stringify(version) },
});

if (!result.success) {
  for (const log of result.logs) console.error(log);
  process.exit(1);
}
console.log(`built ${outfile} (llmgw ${version})`);
