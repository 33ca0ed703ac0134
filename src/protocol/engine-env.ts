// The environment variables a catalog may not give an engine, and why: one list, read by the
// head node when a catalog is applied and by the agent again before it starts an engine, so an
// assignment that did not come from an accepted catalog (a forged or older head node) is
// refused on the node too. README.md lists the same names.
//
// Refused are the variables whose value chooses code the engine (or anything it starts) loads
// or runs, and the ones llmgw sets itself for the engine. A node that needs one of the first
// kind (a CUDA library path, say) sets it in the agent's own environment: engines inherit it.

import { z } from "zod";
import { safeRecord } from "./common";

export type RefusedEnv = {
  /** Exact names. */
  names: readonly string[];
  /** Every name starting with this, besides the exact ones. */
  prefix?: string;
  /** Why, as the error says it after "<NAME> is refused: ". */
  why: string;
  /** Who sets it instead: the node (its agent's environment) or llmgw itself. */
  instead: "node" | "llmgw";
};

export const ENGINE_ENV_REFUSED: readonly RefusedEnv[] = [
  {
    names: [],
    prefix: "LD_",
    why: "the dynamic loader reads it (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT…) and would load libraries of the catalog's choosing into the engine",
    instead: "node",
  },
  {
    // glibc drops these for setuid programs (sysdeps/generic/unsecvars.h) for the same reason;
    // TMPDIR and TZDIR, on that list too, only move files and are left alone.
    names: ["GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS"],
    why: "glibc reads it to load modules, tune its allocator or redirect name lookups (glibc ignores it in setuid programs for that reason)",
    instead: "node",
  },
  { names: ["CUDA_INJECTION32_PATH", "CUDA_INJECTION64_PATH"], why: "the CUDA driver loads the library it names into the engine", instead: "node" },
  { names: ["PATH"], why: "it chooses which programs run: the engine's executable and every tool the engine starts (compilers, ninja)", instead: "node" },
  {
    names: ["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH", "ZDOTDIR", "BASH_XTRACEFD", "PROMPT_COMMAND"],
    why: "a shell reads it at start and would run commands from it in any script the engine starts",
    instead: "node",
  },
  {
    names: ["PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX", "PYTHONBREAKPOINT", "PYTHONINSPECT", "PYTHONPLATLIBDIR", "PYTHONEXECUTABLE"],
    why: "Python reads it to choose where vLLM and SGLang import code from, or what to run",
    instead: "node",
  },
  { names: ["HOME"], why: "Python imports the user site under it (~/.local), whose .pth files run code", instead: "node" },
  {
    names: ["NODE_OPTIONS", "NODE_PATH", "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYLIB", "RUBYOPT", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS"],
    why: "a language runtime reads it to load code into any such program the engine starts",
    instead: "node",
  },
  {
    names: ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"],
    why: "llmgw sets it to the GPUs placement chose for the replica; another value would put the engine on cards another replica holds",
    instead: "llmgw",
  },
  {
    names: ["VLLM_API_KEY", "LLAMA_API_KEY", "LLMGW_FAKE_ENGINE_API_KEY"],
    why: "llmgw sets it to the replica's own engine key, the one the router presents; another value would lock the router out",
    instead: "llmgw",
  },
];

const byName = new Map<string, RefusedEnv>(ENGINE_ENV_REFUSED.flatMap((r) => r.names.map((n) => [n, r] as const)));
const byPrefix = ENGINE_ENV_REFUSED.filter((r) => r.prefix !== undefined);

/** Why an engine may not be given `name` from a catalog, as a sentence naming it; undefined when it may. */
export function engineEnvRefusal(name: string): string | undefined {
  const r = byName.get(name) ?? byPrefix.find((p) => name.startsWith(p.prefix!));
  if (!r) return undefined;
  const instead =
    r.instead === "llmgw"
      ? "remove it from the profile"
      : "remove it from the profile; a node whose engines need it sets it in its agent's own environment (engines inherit that)";
  return `${name} is refused: ${r.why}; ${instead}`;
}

/** Every refused name (and prefix, as "LD_*"), for help texts and the README. */
export function refusedEngineEnvNames(): string[] {
  return ENGINE_ENV_REFUSED.flatMap((r) => [...(r.prefix !== undefined ? [`${r.prefix}*`] : []), ...r.names]);
}

const EnvName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name");

/** A profile's `env`: variable names only, none of the refused ones, each issue at its variable's path. */
export const EngineEnv = safeRecord(EnvName, z.string().max(4096)).superRefine((env, ctx) => {
  for (const name of Object.keys(env)) {
    const why = engineEnvRefusal(name);
    if (why) ctx.addIssue({ code: "custom", path: [name], message: why });
  }
});
