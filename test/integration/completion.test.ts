// The bash completion script as bash runs it: sourced into a real bash, COMP_WORDS and
// COMP_CWORD set as bash sets them, the completion function called, COMPREPLY read back. Names
// come from the binary being completed; here a stand-in `./llmgw` script prints them and notes
// how it was asked, so the script's side is tested alone (complete-names.ts against a real
// server is tested through the compiled binary in test/e2e/completion.test.ts).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { bashScript, zshScript } from "../../src/cli/completion";
import { allCommands } from "../../src/main";
import { scratchDir } from "../helpers/tmp";

let dir: string;
let script: string;

const STUB = `#!/bin/sh
echo "$@" >> asked.txt
case "$2" in
  nodes) printf 'gpu-01\\ngpu-02\\nh100-a\\n$(touch pwned)\\n' ;;
  models) printf 'llama-3.1-8b\\nqwen2.5-7b\\n' ;;
  replicas) printf 'r-1a2b3c4d\\nr-9f8e7d6c\\n' ;;
  keys) printf 'team-a\\n' ;;
  teams) printf 'search\\n' ;;
  subjects) printf 'node/gpu-01\\nmodel/llama-3.1-8b\\n' ;;
esac
`;

beforeAll(async () => {
  dir = scratchDir("llmgw-completion-");
  script = join(dir, "llmgw.bash");
  writeFileSync(script, bashScript(await allCommands(), ["llmgw", "./llmgw"]));
  writeFileSync(join(dir, "llmgw"), STUB, { mode: 0o755 });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** COMPREPLY for a command line whose last word is the one being completed, as bash would see it. */
function complete(words: string[], opts: { wordbreaks?: string } = {}): string[] {
  const body = `source "$1"; shift; ${opts.wordbreaks !== undefined ? `COMP_WORDBREAKS='${opts.wordbreaks}';` : ""}
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _llmgw; printf '%s\\n' "\${COMPREPLY[@]}"`;
  const p = Bun.spawnSync(["bash", "--norc", "--noprofile", "-c", body, "bash", script, ...words], { cwd: dir, env: { PATH: process.env.PATH ?? "", HOME: dir }, stdout: "pipe", stderr: "pipe" });
  expect(p.stderr.toString()).toBe("");
  return p.stdout.toString().split("\n").filter(Boolean);
}

describe("bash completion", () => {
  test("the script is valid bash and binds llmgw and ./llmgw", () => {
    expect(Bun.spawnSync(["bash", "-n", script]).exitCode).toBe(0);
    const p = Bun.spawnSync(["bash", "--norc", "-c", `source "${script}"; complete -p llmgw; complete -p ./llmgw`], { stdout: "pipe" });
    expect(p.stdout.toString()).toBe("complete -F _llmgw llmgw\ncomplete -F _llmgw ./llmgw\n");
  });

  test("commands, then each command's subcommands", () => {
    expect(complete(["llmgw", ""])).toContain("describe");
    expect(complete(["llmgw", "st"])).toEqual(["status"]);
    expect(complete(["./llmgw", "des"])).toEqual(["describe"]);
    expect(complete(["llmgw", "describe", ""])).toEqual(["model", "node", "replica"]);
    expect(complete(["llmgw", "completion", ""])).toEqual(["bash", "zsh"]);
    expect(complete(["llmgw", "keys", ""])).toEqual(["create", "update", "list", "revoke"]);
    expect(complete(["llmgw", "teams", ""])).toEqual(["create", "update", "list", "delete"]);
    expect(complete(["llmgw", "help", "dra"])).toEqual(["drain"]);
    // What a command takes nothing after gets nothing (no file names).
    expect(complete(["llmgw", "status", ""])).toEqual([]);
  });

  test("flags per command, short and long, after other words too", () => {
    expect(complete(["llmgw", "status", "--"])).toEqual(["--output", "--watch", "--interval", "--server", "--token", "--ca", "--data-dir", "--help"]);
    expect(complete(["llmgw", "drain", "gpu-01", "--w"])).toEqual(["--wait"]);
    expect(complete(["llmgw", "cordon", "--w"])).toEqual([]);
    expect(complete(["llmgw", "serve", "--log-f"])).toEqual(["--log-format"]);
    expect(complete(["llmgw", "nope", "--"])).toEqual([]);
  });

  test("-o values as each command accepts them; other enumerated flags", () => {
    expect(complete(["llmgw", "events", "-o", ""])).toEqual(["table", "wide", "json"]);
    expect(complete(["llmgw", "status", "--output", "w"])).toEqual(["wide"]);
    expect(complete(["llmgw", "describe", "-o", ""])).toEqual(["table", "json"]);
    expect(complete(["llmgw", "keys", "list", "-o", ""])).toEqual(["table", "wide", "json"]);
    expect(complete(["llmgw", "keys", "create", "k", "--priority", ""])).toEqual(["interactive", "batch"]);
    expect(complete(["llmgw", "teams", "create", "t", "--budget-period", ""])).toEqual(["day", "week", "month"]);
    // --output=VALUE, as bash splits it at "=" ...
    expect(complete(["llmgw", "events", "--output", "=", ""])).toEqual(["table", "wide", "json"]);
    expect(complete(["llmgw", "events", "--output", "=", "j"])).toEqual(["json"]);
    // ... and whole, when "=" does not break words.
    expect(complete(["llmgw", "events", "--output=j"], { wordbreaks: " \t\n" })).toEqual(["--output=json"]);
    expect(complete(["llmgw", "serve", "--log-format", ""])).toEqual(["auto", "text", "json"]);
    expect(complete(["llmgw", "agent", "--log-level", "w"])).toEqual(["warn"]);
    expect(complete(["llmgw", "install", "--for", ""])).toEqual(["llmgw", "database"]);
    // A value is not mistaken for a positional: after -o json, describe still wants its kind.
    expect(complete(["llmgw", "describe", "-o", "json", "r"])).toEqual(["replica"]);
  });

  test("node, model, replica, key and subject names from the binary being completed", () => {
    rmSync(join(dir, "asked.txt"), { force: true });
    expect(complete(["./llmgw", "nodes", "delete", "gpu"])).toEqual(["gpu-01", "gpu-02"]);
    expect(complete(["./llmgw", "nodes", ""])).toEqual(["delete", "approve", "allow-address", "gpu-01", "gpu-02", "h100-a", "$(touch pwned)"]);
    expect(complete(["./llmgw", "describe", "model", "q"])).toEqual(["qwen2.5-7b"]);
    expect(complete(["./llmgw", "describe", "node", "h"])).toEqual(["h100-a"]);
    expect(complete(["./llmgw", "describe", "replica", ""])).toEqual(["r-1a2b3c4d", "r-9f8e7d6c"]);
    expect(complete(["./llmgw", "models", "delete", "ll"])).toEqual(["llama-3.1-8b"]);
    expect(complete(["./llmgw", "logs", "r-9"])).toEqual(["r-9f8e7d6c"]);
    expect(complete(["./llmgw", "drain", "g"])).toEqual(["gpu-01", "gpu-02"]);
    expect(complete(["./llmgw", "keys", "revoke", ""])).toEqual(["team-a"]);
    expect(complete(["./llmgw", "teams", "delete", ""])).toEqual(["search"]);
    expect(complete(["./llmgw", "keys", "create", "k", "--team", "s"])).toEqual(["search"]);
    expect(complete(["./llmgw", "replicas", "-m", ""])).toEqual(["llama-3.1-8b", "qwen2.5-7b"]);
    expect(complete(["./llmgw", "events", "--subject", "node/"])).toEqual(["node/gpu-01"]);
    // A name is a word, never shell code: nothing ran it.
    expect(existsSync(join(dir, "pwned"))).toBe(false);
    // Asked of the server the command line names.
    writeFileSync(join(dir, "asked.txt"), "");
    complete(["./llmgw", "cordon", "--server", "http://head:8001", "--token=t0k", "--data-dir", "/srv/d", ""]);
    expect(readFileSync(join(dir, "asked.txt"), "utf8")).toBe("__complete nodes --server http://head:8001 --token t0k --data-dir /srv/d\n");
  });

  test("a binary that does not answer holds the shell at most a few seconds, and offers nothing", () => {
    const slow = join(dir, "slow");
    Bun.spawnSync(["mkdir", "-p", slow]);
    writeFileSync(join(slow, "llmgw"), "#!/bin/sh\nsleep 30\necho gpu-01\n", { mode: 0o755 });
    const started = Date.now();
    const p = Bun.spawnSync(["bash", "--norc", "-c", `source "${script}"; COMP_WORDS=(./llmgw cordon ""); COMP_CWORD=2; _llmgw; echo "n=\${#COMPREPLY[@]}"`], { cwd: slow, stdout: "pipe" });
    expect(p.stdout.toString()).toBe("n=0\n");
    expect(Date.now() - started).toBeLessThan(6000);
  });
});

/** Types each line into an interactive zsh with the script sourced, presses TAB, and reads the line back. */
const ZSH_DRIVER = `zmodload zsh/zpty
zpty z 'zsh -f -i'
zpty -w z "PS1='%% '; autoload -Uz compinit; compinit -u -D; source \${(q)1}; show() { print -rn -- \\"<<\\$BUFFER>>\\"; BUFFER= }; zle -N show; bindkey '^X' show; print RE''ADY"
zpty -r z out '*READY*'
shift
for line in "$@"; do
  zpty -w -n z "$line"$'\\t\\C-x'
  zpty -r z out '*<<*>>*'
  out=\${out##*<<}
  print -r -- "\${out%%>>*}"
done
zpty -d z
`;

describe("zsh completion", () => {
  test("in a real zsh: commands, subcommands, -o values, --flag=value, paths and names, for llmgw and ./llmgw", async () => {
    const zsh = join(dir, "llmgw.zsh");
    writeFileSync(zsh, zshScript(await allCommands(), ["llmgw", "./llmgw"]));
    writeFileSync(join(dir, "drive.zsh"), ZSH_DRIVER);
    const lines = ["llmgw sta", "./llmgw describe r", "llmgw describe -o j", "llmgw events --output=w", "llmgw serve --log-format t", "llmgw apply -f llmgw.z", "./llmgw describe node h", "./llmgw nodes delete gpu-0"];
    const p = Bun.spawnSync(["timeout", "30", "zsh", "-f", join(dir, "drive.zsh"), zsh, ...lines], { cwd: dir, env: { PATH: process.env.PATH ?? "", HOME: dir, TERM: "dumb" }, stdout: "pipe", stderr: "pipe" });
    expect(p.stdout.toString().split("\n").filter(Boolean)).toEqual([
      "llmgw status ",
      "./llmgw describe replica ",
      "llmgw describe -o json ",
      "llmgw events --output=wide ",
      "llmgw serve --log-format text ",
      "llmgw apply -f llmgw.zsh ",
      "./llmgw describe node h100-a ",
      // Two nodes match: zsh inserts what they share.
      "./llmgw nodes delete gpu-0",
    ]);
  });

  test("holds the same core and binds llmgw and ./llmgw", async () => {
    const zsh = zshScript(await allCommands(), ["llmgw", "./llmgw"]);
    expect(zsh.split("\n")[0]).toBe("#compdef llmgw");
    expect(zsh).toContain("compdef _llmgw llmgw ./llmgw");
    expect(zsh).toContain('"describe --output"|"describe -o") __llmgw_add "$3" table json ;;');
    expect(zsh).toContain("'status:Show the fleet summary");
    // The zsh-only part aside, the core is valid shell: bash parses it.
    expect(Bun.spawnSync(["bash", "-n"], { stdin: new TextEncoder().encode(zsh.slice(0, zsh.indexOf("\n_llmgw() {"))) }).exitCode).toBe(0);
  });
});
