// `llmgw completion bash|zsh`: a shell completion script generated from the commands themselves
// (their flags, the values a flag takes, and the words each command takes in POSITIONALS below),
// so it never falls behind them. Commands, subcommands, flags and flag values complete from the
// script alone; node, model, replica and key names are asked of the binary being completed
// (`llmgw __complete nodes`, see complete-names.ts), which prints nothing when it cannot answer
// within a second and a half, so a dead server never holds the shell.
//
// One completion core is written once in the shell language bash and zsh share (zsh runs it with
// ksh_arrays and sh_word_split); each shell gets a small wrapper around it.

import { UsageError } from "../config/flags";
import type { FlagSpec } from "../config/flags";
import type { Command } from "./command";

/**
 * A word a position takes: a literal word, or `@nodes`, `@models`, `@replicas`, `@keys`, `@teams`
 * (names the server knows), `@files`, `@dirs`, `@commands`.
 */
export type Arg = string;
export interface Positionals {
  /** Words the first positional may be, each with what follows it. */
  sub?: Record<string, Arg[][]>;
  /** What each positional position takes otherwise (the first next to `sub`'s words). */
  args?: Arg[][];
}

/** What follows each command. A command not listed takes no words but its flags. */
export const POSITIONALS: Record<string, Positionals> = {
  nodes: { sub: { delete: [["@nodes"]], approve: [["@nodes"]], "allow-address": [["@nodes"]] }, args: [["@nodes"]] },
  models: { sub: { unpark: [["@models"]], delete: [["@models"]] }, args: [["@models"]] },
  describe: { sub: { model: [["@models"]], node: [["@nodes"]], replica: [["@replicas"]] } },
  explain: { args: [["@models"]] },
  cordon: { args: [["@nodes"]] },
  uncordon: { args: [["@nodes"]] },
  drain: { args: [["@nodes"]] },
  logs: { args: [["@replicas"]] },
  keys: { sub: { create: [], update: [["@keys"]], list: [], revoke: [["@keys"]] } },
  teams: { sub: { create: [], update: [["@teams"]], list: [], delete: [["@teams"]] } },
  backup: { args: [["@files"]] },
  install: { sub: { serve: [], agent: [], keepalived: [], prometheus: [], grafana: [] } },
  uninstall: { sub: { serve: [], agent: [] } },
  "join-token": { sub: { rotate: [] } },
  completion: { args: [["bash", "zsh"]] },
  help: { args: [["@commands"]] },
};

/** What a flag's value completes to: its choices, a kind of name, a path, or nothing (free text). */
function valueWords(f: FlagSpec): Arg[] {
  if (f.choices?.length) return [...f.choices];
  if (f.complete) return [`@${f.complete}`];
  if (f.value === "FILE" || f.value === "PATH") return ["@files"];
  if (f.value === "DIR") return ["@dirs"];
  return [];
}

/** A word as a shell word, quoted only when it must be. */
function q(s: string): string {
  return /^[A-Za-z0-9@%+,./:=_-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** The shell functions that hold the commands' data, and the core that uses them. */
function core(cmds: Command[]): string {
  const names = [...cmds.map((c) => c.name), "help"];
  const { flagCases, takesCases, valueCases } = flagData(cmds);
  const posCases = positionalData(new Set(names));
  return `_llmgw_cmds="${names.join(" ")}"
_llmgw_fallback=${q(fallbackBinary())}

# The flags of command $1, into _llmgw_r.
__llmgw_flags() {
  _llmgw_r=""
  case $1 in
${flagCases.join("\n")}
  esac
}

# Whether flag $2 of command $1 takes a value.
__llmgw_takes_value() {
  case $1 in
${takesCases.join("\n")}
  esac
  return 1
}

# What the value of flag $2 of command $1 completes to, for the word $3.
__llmgw_value() {
  case "$1 $2" in
${valueCases.join("\n")}
  esac
}

# What positional $2 (from 0; the first was $3) of command $1 completes to, for the word $4.
__llmgw_pos() {
  case "$1/$2/$3" in
${posCases.join("\n")}
  esac
}

${CORE}`;
}

/** The case arms of each command's flags: which it has, which take a value, and what each value completes to. */
function flagData(cmds: Command[]): { flagCases: string[]; takesCases: string[]; valueCases: string[] } {
  const flagCases: string[] = [];
  const takesCases: string[] = [];
  const valueCases: string[] = [];
  for (const c of cmds) {
    const all = Object.entries(c.flags);
    flagCases.push(`    ${q(c.name)}) _llmgw_r="${all.map(([n, f]) => `--${n}${f.short ? ` -${f.short}` : ""}`).join(" ")}" ;;`);
    const valued = all.filter(([, f]) => f.kind !== "boolean");
    if (valued.length > 0) takesCases.push(`    ${q(c.name)}) case $2 in ${valued.flatMap(([n, f]) => [`--${n}`, ...(f.short ? [`-${f.short}`] : [])]).join("|")}) return 0 ;; esac ;;`);
    for (const [n, f] of valued) {
      const words = valueWords(f);
      if (words.length === 0) continue;
      const pats = [`"${c.name} --${n}"`, ...(f.short ? [`"${c.name} -${f.short}"`] : [])].join("|");
      valueCases.push(`    ${pats}) __llmgw_add "$3" ${words.map(q).join(" ")} ;;`);
    }
  }
  return { flagCases, takesCases, valueCases };
}

/** The case arms of the words each known command takes (POSITIONALS), by command, position and first word. */
function positionalData(known: Set<string>): string[] {
  const posCases: string[] = [];
  for (const [cmd, p] of Object.entries(POSITIONALS)) {
    if (!known.has(cmd)) continue;
    const subs = Object.keys(p.sub ?? {});
    const first = [...subs, ...(p.args?.[0] ?? [])];
    if (first.length > 0) posCases.push(`    ${q(cmd)}/0/*) __llmgw_add "$4" ${first.map(q).join(" ")} ;;`);
    for (const [sub, rest] of Object.entries(p.sub ?? {}))
      rest.forEach((words, i) => posCases.push(`    ${q(`${cmd}/${i + 1}/${sub}`)}) __llmgw_add "$4" ${words.map(q).join(" ")} ;;`));
    (p.args ?? []).forEach((words, i) => {
      if (i > 0) posCases.push(`    ${q(cmd)}/${i}/*) __llmgw_add "$4" ${words.map(q).join(" ")} ;;`);
    });
  }
  return posCases;
}

/** The completion core itself, the same for every command set: reading the command line and adding candidates. */
const CORE = `# Adds the words after $1 that start with $1 to _llmgw_out; @kind words expand.
__llmgw_add() {
  local cur="$1" w
  shift
  for w in "$@"; do
    case $w in
      @files) _llmgw_files=f ;;
      @dirs) _llmgw_files=d ;;
      @commands) __llmgw_add "$cur" $_llmgw_cmds ;;
      @*) __llmgw_names "\${w#@}" "$cur" ;;
      *) [[ $w == "$cur"* ]] && _llmgw_out+=("$w") ;;
    esac
  done
  return 0
}

# Names of kind $1 starting with $2, from the binary being completed, asked of the same server
# as the command line names (--server, --token, --ca, --data-dir); nothing on any failure.
__llmgw_names() {
  local bin="\${_llmgw_w[0]}" line
  case $bin in "~/"*) bin="$HOME/\${bin#"~/"}" ;; esac
  if [[ $bin == */* ]]; then
    [[ -x $bin ]] || bin="$_llmgw_fallback"
  else
    command -v "$bin" >/dev/null 2>&1 || bin="$_llmgw_fallback"
  fi
  local -a run
  run=("$bin" __complete "$1" "\${_llmgw_conn[@]}")
  command -v timeout >/dev/null 2>&1 && run=(timeout 3 "\${run[@]}")
  while IFS= read -r line; do
    [[ -n $line && $line == "$2"* ]] && _llmgw_out+=("$line")
  done < <("\${run[@]}" 2>/dev/null </dev/null)
  return 0
}

# Completes word _llmgw_i of _llmgw_w (the command line, --flag=value kept as one word):
# the candidates in _llmgw_out, _llmgw_files f|d when paths are wanted, and _llmgw_pre the
# "--flag=" in front of a value being completed; _llmgw_atcmd 1 at the command's own position.
__llmgw_core() {
  local cur="\${_llmgw_w[_llmgw_i]}" cmd="" first="" n=0 i w pending="" dd=0
  _llmgw_out=()
  _llmgw_conn=()
  _llmgw_files=""
  _llmgw_pre=""
  _llmgw_atcmd=0
  for (( i=1; i<_llmgw_i; i++ )); do
    w="\${_llmgw_w[i]}"
    if [[ -n $pending ]]; then
      case $pending in --server|--token|--ca|--data-dir) _llmgw_conn+=("$pending" "$w") ;; esac
      pending=""
      continue
    fi
    if [[ -z $cmd ]]; then
      case $w in -*) ;; *) cmd="$w" ;; esac
      continue
    fi
    if (( dd == 0 )) && [[ $w == "--" ]]; then dd=1; continue; fi
    if (( dd == 0 )) && [[ $w == -?* ]]; then
      case $w in
        --server=*|--token=*|--ca=*|--data-dir=*) _llmgw_conn+=("\${w%%=*}" "\${w#*=}") ;;
        --*=*) ;;
        *) __llmgw_takes_value "$cmd" "$w" && pending="$w" ;;
      esac
      continue
    fi
    (( n == 0 )) && first="$w"
    n=$((n + 1))
  done
  if [[ -n $pending ]]; then
    __llmgw_value "$cmd" "$pending" "$cur"
    return 0
  fi
  if [[ -z $cmd ]]; then
    if [[ $cur == -* ]]; then
      __llmgw_add "$cur" --help --version
    else
      _llmgw_atcmd=1
      __llmgw_add "$cur" $_llmgw_cmds
    fi
    return 0
  fi
  if (( dd == 0 )) && [[ $cur == --*=* ]]; then
    _llmgw_pre="\${cur%%=*}="
    __llmgw_value "$cmd" "\${cur%%=*}" "\${cur#*=}"
    return 0
  fi
  if (( dd == 0 )) && [[ $cur == -* ]]; then
    __llmgw_flags "$cmd"
    __llmgw_add "$cur" $_llmgw_r
    return 0
  fi
  __llmgw_pos "$cmd" "$n" "$first" "$cur"
  return 0
}`;

/** The names the script binds: llmgw, ./llmgw, and this binary as it was invoked and by its full path. */
export function boundNames(argv0 = process.argv0, execPath = process.execPath, compiled = Bun.main.startsWith("/$bunfs/")): string[] {
  const names = ["llmgw", "./llmgw"];
  if (compiled) {
    for (const n of [argv0, execPath]) if (n && !/[\s'"\\$`]/.test(n)) names.push(n);
    const base = execPath.split("/").pop();
    if (base && /^[A-Za-z0-9._-]+$/.test(base)) names.push(base, `./${base}`);
  }
  return [...new Set(names)];
}

/** The binary names are asked of when the command line's own cannot be run (`~user/…`, an alias). */
function fallbackBinary(): string {
  return Bun.main.startsWith("/$bunfs/") ? process.execPath : "llmgw";
}

export function bashScript(cmds: Command[], bind = boundNames()): string {
  return `# llmgw bash completion: source <(llmgw completion bash)
${core(cmds)}

_llmgw() {
  local i w split=0 last
  _llmgw_w=()
  # bash splits --flag=value at "=" (COMP_WORDBREAKS): join it again for the core.
  local join=0
  for (( i=0; i<=COMP_CWORD; i++ )); do
    w="\${COMP_WORDS[i]}"
    last=$(( \${#_llmgw_w[@]} - 1 ))
    if (( join )); then
      _llmgw_w[last]+="$w"; join=0
      (( i == COMP_CWORD )) && split=1
    elif (( last > 0 )) && [[ $w == "=" && \${_llmgw_w[last]} == --* && \${_llmgw_w[last]} != *=* ]]; then
      _llmgw_w[last]+="="; join=1
      (( i == COMP_CWORD )) && split=1
    else
      _llmgw_w+=("$w")
    fi
  done
  _llmgw_i=$(( \${#_llmgw_w[@]} - 1 ))
  __llmgw_core
  local cur="\${_llmgw_w[_llmgw_i]}"
  cur="\${cur#"$_llmgw_pre"}"
  COMPREPLY=()
  if [[ -n $_llmgw_files ]]; then
    compopt -o filenames 2>/dev/null
    if [[ $_llmgw_files == d ]]; then mapfile -t COMPREPLY < <(compgen -d -- "$cur")
    else mapfile -t COMPREPLY < <(compgen -f -- "$cur"); fi
    (( split )) || [[ -z $_llmgw_pre ]] || COMPREPLY=("\${COMPREPLY[@]/#/$_llmgw_pre}")
    return 0
  fi
  for w in "\${_llmgw_out[@]}"; do
    if (( split )); then COMPREPLY+=("$w"); else COMPREPLY+=("$_llmgw_pre$w"); fi
  done
  return 0
}
complete -F _llmgw ${bind.map(q).join(" ")}
`;
}

export function zshScript(cmds: Command[], bind = boundNames()): string {
  const esc = (s: string) => s.replace(/'/g, "'\\''").replace(/:/g, "\\:");
  return `#compdef ${bind.filter((n) => !n.includes("/")).join(" ")}
# llmgw zsh completion: source <(llmgw completion zsh), or llmgw completion zsh > "\${fpath[1]}/_llmgw"
${core(cmds)}

_llmgw() {
  _llmgw_w=("\${(@)words[1,CURRENT]}")
  () {
    setopt localoptions ksh_arrays sh_word_split
    _llmgw_i=$(( \${#_llmgw_w[@]} - 1 ))
    __llmgw_core
  }
  if [[ -n $_llmgw_pre ]]; then compset -P '*='; fi
  if [[ $_llmgw_files == f ]]; then _files; return; fi
  if [[ $_llmgw_files == d ]]; then _files -/; return; fi
  if (( _llmgw_atcmd )); then
    local -a commands
    commands=(
${cmds.map((c) => `      '${esc(c.name)}:${esc(c.summary)}'`).join("\n")}
      'help:show a command'"'"'s help'
    )
    _describe 'command' commands
    return
  fi
  (( \${#_llmgw_out[@]} )) && compadd -- "\${_llmgw_out[@]}"
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
  _llmgw "$@"
else
  compdef _llmgw ${bind.map(q).join(" ")}
fi
`;
}

export function completionCommand(all: () => Promise<Command[]>): Command {
  return {
    name: "completion",
    summary: "Print a shell completion script (bash or zsh).",
    usage: "llmgw completion bash|zsh",
    details:
      "Completes commands, subcommands, flags and the values of flags like -o, and the names of nodes, models, replicas and keys, asked of the server the command line names (as the command itself would find it) with a short timeout. Bound to `llmgw`, `./llmgw` and this binary's path.",
    flags: { help: { kind: "boolean", short: "h", help: "show this help" } },
    examples: ["source <(llmgw completion bash)", "llmgw completion bash > /etc/bash_completion.d/llmgw", "source <(llmgw completion zsh)", 'llmgw completion zsh > "${fpath[1]}/_llmgw"'],
    async run({ positionals }) {
      const shell = positionals[0];
      if (shell !== "bash" && shell !== "zsh") throw new UsageError("completion takes bash or zsh");
      const cmds = await all();
      process.stdout.write(shell === "bash" ? bashScript(cmds) : zshScript(cmds));
    },
  };
}
