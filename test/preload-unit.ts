// Loaded before the unit tests (`npm run test:unit`; npm test runs them so too): a unit test
// starts no process. Bun.spawn, Bun.spawnSync and Bun.$ (node:child_process goes through the first
// two) refuse to run a program: the call throws, and the test fails even where the code under test
// catches that, for the check after each test names what was tried. A program that does not exist
// may still be asked for (the agent's tests lean on it): the spawn fails as it always does
// (ENOENT), and nothing runs. A test that needs a real process belongs in test/integration, or in
// test/e2e when it runs the compiled binary.

import { afterEach } from "bun:test";
import { existsSync } from "node:fs";
import { resolve } from "node:path";

const tried: string[] = [];

type SpawnArgs = [string[] | { cmd: string[]; env?: Record<string, string | undefined>; cwd?: string }, { env?: Record<string, string | undefined>; cwd?: string }?];

/** Whether the program a spawn names is there to run (a path that exists, or a name found on the PATH it is given). */
function runnable(args: SpawnArgs): boolean {
  const [first, second] = args;
  const { cmd, env, cwd } = Array.isArray(first) ? { cmd: first, env: second?.env, cwd: second?.cwd } : first;
  const program = cmd?.[0];
  if (program === undefined) return false;
  if (program.includes("/")) return existsSync(resolve(cwd ?? process.cwd(), program));
  return Bun.which(program, { PATH: env?.PATH ?? process.env.PATH ?? "" }) !== null;
}

function refuse(what: string, detail: string): never {
  const message = `a unit test runs no process, but ${what} was asked to run ${detail.slice(0, 200)}: move the test to test/integration (or test/e2e for the compiled binary)`;
  tried.push(message);
  throw new Error(message);
}

for (const name of ["spawn", "spawnSync"] as const) {
  const real = Bun[name] as (...args: SpawnArgs) => unknown;
  (Bun as unknown as Record<string, unknown>)[name] = (...args: SpawnArgs) => {
    if (runnable(args)) refuse(`Bun.${name}`, JSON.stringify(Array.isArray(args[0]) ? args[0] : args[0].cmd));
    return real(...args);
  };
}
(Bun as unknown as Record<string, unknown>).$ = new Proxy(Bun.$, {
  apply: (_target, _this, args: unknown[]) => refuse("Bun.$", JSON.stringify((args[0] as { raw?: string[] } | undefined)?.raw ?? args[0])),
});

afterEach(() => {
  if (tried.length > 0) throw new Error(tried.splice(0).join("\n"));
});
