// `llmgw completion bash|zsh`: a shell completion script for every command and its flags,
// generated from the commands themselves so it never falls behind them.

import { UsageError } from "../config/flags";
import type { Command } from "./command";

export function bashScript(cmds: Command[]): string {
  const cases = cmds
    .map((c) => `    ${c.name}) opts="${Object.entries(c.flags).map(([n, f]) => `--${n}${f.short ? ` -${f.short}` : ""}`).join(" ")}" ;;`)
    .join("\n");
  return `# llmgw bash completion: source <(llmgw completion bash)
_llmgw() {
  local cur cmd opts
  cur="\${COMP_WORDS[COMP_CWORD]}"
  cmd="\${COMP_WORDS[1]}"
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=( $(compgen -W "${cmds.map((c) => c.name).join(" ")}" -- "$cur") )
    return
  fi
  case "$cmd" in
${cases}
    *) opts="" ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
  else
    COMPREPLY=( $(compgen -f -- "$cur") )
  fi
}
complete -F _llmgw llmgw
`;
}

export function zshScript(cmds: Command[]): string {
  const esc = (s: string) => s.replace(/'/g, "'\\''").replace(/[[\]:]/g, "\\$&");
  const fns = cmds
    .map(
      (c) =>
        `    ${c.name})\n      _arguments ${Object.entries(c.flags)
          .map(([n, f]) => `'--${n}[${esc(f.help ?? "")}]${f.kind === "boolean" ? "" : ":value:"}'`)
          .join(" ")} '*:file:_files' ;;`,
    )
    .join("\n");
  return `#compdef llmgw
# llmgw zsh completion: llmgw completion zsh > "\${fpath[1]}/_llmgw"
_llmgw() {
  local -a commands
  commands=(
${cmds.map((c) => `    '${c.name}:${esc(c.summary)}'`).join("\n")}
  )
  if (( CURRENT == 2 )); then
    _describe 'command' commands
    return
  fi
  case $words[2] in
${fns}
  esac
}
compdef _llmgw llmgw
`;
}

export function completionCommand(all: () => Promise<Command[]>): Command {
  return {
    name: "completion",
    summary: "Print a shell completion script (bash or zsh).",
    usage: "llmgw completion bash|zsh",
    flags: { help: { kind: "boolean", short: "h", help: "show this help" } },
    examples: ["source <(llmgw completion bash)", 'llmgw completion zsh > "${fpath[1]}/_llmgw"'],
    async run({ positionals }) {
      const shell = positionals[0];
      if (shell !== "bash" && shell !== "zsh") throw new UsageError("completion takes bash or zsh");
      const cmds = await all();
      process.stdout.write(shell === "bash" ? bashScript(cmds) : zshScript(cmds));
    },
  };
}
