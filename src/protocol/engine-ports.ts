// Ports an engine binds beyond the one it serves on, read from its profile: what the control
// plane keeps free for it (one rendezvous block per replica, control/reconcile/ports.ts), what the
// agent points the engine at (agent/engines.ts), and what the catalog refuses because it would not
// fit. Shared by both sides, so they cannot disagree on which replicas have a block.
//
// A multi-node replica's rendezvous: vLLM's and torch's --master-port, SGLang's --dist-init-addr
// and the ports after it. SGLang with --enable-dp-attention on one node binds TCP ports even
// without --dist-init-addr: PortArgs.init_new (python/sglang/srt/server_args.py, v0.4 to today)
// then takes 127.0.0.1:--port + ZMQ_TCP_PORT_DELTA (233; −233 near 65535) as its dist-init port
// and the ports after it (port_base = dist_init_port + 1: tokenizer, detokenizer, rpc, metrics,
// scheduler input, and in older releases one scheduler input per DP rank at port_base + 5 +
// dp_rank; newer ones also a handshake at + DP_ATTENTION_HANDSHAKE_PORT_DELTA, 13). --port + 233
// is another replica's engine port as often as not, so such a replica gets a block of its own
// and its --dist-init-addr points there.

import type { Engine } from "./catalog";

/** Ports in one rendezvous block: the dist-init port, the six after it, and DP ranks up to 10 (or the handshake at +13). */
export const RENDEZVOUS_STRIDE = 16;

/** DP ranks one block holds for SGLang's DP attention: older releases bind dist-init + 6 + rank for each. */
export const SGLANG_DP_ATTENTION_MAX_DP = RENDEZVOUS_STRIDE - 6;

interface ProfileArgs {
  engine: Engine;
  args: readonly string[];
  nodes: number;
}

/** The last value given to any spelling of an argparse option (`--x v` or `--x=v`); undefined when absent. */
export function optionValue(args: readonly string[], names: readonly string[]): string | undefined {
  let out: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    for (const n of names) {
      if (a === n) out = args[i + 1];
      else if (a.startsWith(`${n}=`)) out = a.slice(n.length + 1);
    }
  }
  return out;
}

const has = (args: readonly string[], names: readonly string[]) => args.some((a) => names.some((n) => a === n || a.startsWith(`${n}=`)));

// SGLang's spellings (server_args.py add_cli_args; argparse with allow_abbrev=False).
export const DP_SIZE = ["--dp-size", "--dp", "--data-parallel-size"];
const DIST_INIT = ["--dist-init-addr", "--nccl-init-addr"];

/** SGLang with DP attention: it binds TCP ports beside its own (see the file's head). */
export function sglangDpAttention(p: Pick<ProfileArgs, "engine" | "args">): boolean {
  return p.engine === "sglang" && p.args.includes("--enable-dp-attention");
}

/** Whether a replica of this profile binds a rendezvous block: it spans nodes, or it is SGLang with DP attention. */
export function usesRendezvousBlock(p: ProfileArgs): boolean {
  return p.nodes > 1 || sglangDpAttention(p);
}

/** Why the profile's rendezvous ports cannot be kept to its block, or undefined when they can. */
export function rendezvousProblem(p: ProfileArgs): string | undefined {
  if (p.engine !== "sglang" || !usesRendezvousBlock(p)) return undefined;
  if (has(p.args, DIST_INIT))
    return `llmgw gives SGLang its --dist-init-addr itself (a port block kept free for the replica${p.nodes > 1 ? " on its leader" : ""}); one set in args would bind ports no one keeps free for it: remove it`;
  if (!sglangDpAttention(p)) return undefined;
  const raw = optionValue(p.args, DP_SIZE);
  const dp = raw === undefined ? 1 : Number(raw);
  if (Number.isInteger(dp) && dp > SGLANG_DP_ATTENTION_MAX_DP)
    return `SGLang with --enable-dp-attention and --dp-size ${dp} binds its dist-init port, the 5 after it and one port per DP rank after those (PortArgs.init_new); llmgw keeps ${RENDEZVOUS_STRIDE} ports per replica for them, so --dp-size may be at most ${SGLANG_DP_ATTENTION_MAX_DP}`;
  return undefined;
}
