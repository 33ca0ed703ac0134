// The limit flags `llmgw keys` and `llmgw teams` share: each turned into its body field, `none`
// clearing one only on update, a bad value refused naming the flag; and a table's limit cells,
// with each limit's current use in front once the routers report it.

import { describe, expect, test } from "bun:test";
import { UsageError } from "../../src/config/flags";
import { type LimitView, limitCells, limitFields } from "../../src/cli/limit-flags";

describe("limit flags", () => {
  test("each flag is its body field; none clears one on update", () => {
    expect(limitFields({ rpm: "60", tpm: "1000", "max-concurrent": "4", "budget-tokens": "5000000", "budget-gpu-hours": "2.5", "budget-period": "week", priority: "batch" }, false)).toEqual({
      rpm: 60, tpm: 1000, max_concurrent: 4, budget_tokens: 5_000_000, budget_gpu_hours: 2.5, budget_period: "week", priority: "batch",
    });
    expect(limitFields({ rpm: "none", "budget-gpu-hours": "none", priority: "none" }, true)).toEqual({ rpm: null, budget_gpu_hours: null, priority: null });
    expect(limitFields({}, true)).toEqual({});
  });

  test("a bad value is refused naming the flag", () => {
    expect(() => limitFields({ rpm: "0" }, false)).toThrow(new UsageError('--rpm must be a positive whole number, not "0"'));
    expect(() => limitFields({ tpm: "1.5" }, true)).toThrow("--tpm must be a positive whole number (or none to clear it)");
    expect(() => limitFields({ "budget-gpu-hours": "-1" }, false)).toThrow("--budget-gpu-hours must be a positive number");
    expect(() => limitFields({ "budget-period": "year" }, false)).toThrow("--budget-period must be day, week or month");
    expect(() => limitFields({ priority: "urgent" }, false)).toThrow("--priority must be interactive or batch");
    expect(() => limitFields({ rpm: "none" }, false)).toThrow("--rpm none clears a limit: use it with update");
  });

  test("cells: a limit, its use in front once reported, - for none; budgets with their period", () => {
    const l: LimitView = { rpm: 60, tpm: null, max_concurrent: 4, budget_tokens: 5_000_000, budget_gpu_hours: 2, budget_period: "week", priority: null };
    expect(limitCells(l)).toEqual(["60", "-", "4", "5M tok, 2 GPU-h/week"]);
    expect(limitCells({ ...l, use: { rpm: 12, concurrent: 1, budget_tokens: 1_250_000 } })).toEqual(["12/60", "-", "1/4", "1.25M/5M tok, 2 GPU-h/week"]);
    expect(limitCells({ ...l, budget_tokens: null, budget_gpu_hours: null })[3]).toBe("-");
  });
});
