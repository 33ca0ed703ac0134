// How a replica's engine splits its work, read from its profile as the agent launches it: what
// the router needs to read the engine's /metrics right. SGLang with data parallelism runs one
// scheduler (and one request queue) per data-parallel group, and older releases label their
// series so that the groups cannot all be told apart (router/engine-metrics.ts): the router
// can only add them up knowing how many groups there are and how their ranks are numbered.

import { DP_SIZE, optionValue } from "./engine-ports";

/** SGLang's data-parallel shape; see sglangDataParallel. */
export interface DataParallelLayout {
  /** Data-parallel groups (--dp-size): each has its own scheduler and queue. */
  dp: number;
  /** Tensor-parallel size (--tp-size): under DP attention, the ranks of every group together. */
  tp: number;
  /** --enable-dp-attention: the groups share one TP group, and tp_rank ÷ (tp / dp) is the group. */
  dp_attention: boolean;
}

// SGLang's spellings (server_args.py add_cli_args: "--tensor-parallel-size", "--tp-size").
const TP_SIZE = ["--tensor-parallel-size", "--tp-size", "--tp"];

/**
 * The data-parallel layout of a replica of this profile, or undefined when it has none (not
 * SGLang, or one group). The agent passes `--tp-size` GPUs × nodes and the profile's args after
 * it (agent/engines.ts), so a `--tp-size` in the args wins, as argparse takes the last.
 */
export function sglangDataParallel(p: { engine: string; args: readonly string[]; gpus: number; nodes: number }): DataParallelLayout | undefined {
  if (p.engine !== "sglang") return undefined;
  const dp = Number(optionValue(p.args, DP_SIZE) ?? "1");
  if (!Number.isInteger(dp) || dp <= 1) return undefined;
  const given = optionValue(p.args, TP_SIZE);
  const tp = given === undefined ? p.gpus * p.nodes : Number(given);
  return { dp, tp: Number.isInteger(tp) && tp >= 1 ? tp : p.gpus * p.nodes, dp_attention: p.args.includes("--enable-dp-attention") };
}
