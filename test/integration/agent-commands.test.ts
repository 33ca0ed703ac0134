// The agent's commands as real processes, each with its timeout on a ManualScheduler: nvidia-smi
// (a stand-in script printing real captures, and a hung one) and an engine's version command (a
// hung one). Their parsing and every outcome without a process are tested in
// test/unit/agent-gpus.test.ts and test/unit/agent-engine-versions.test.ts.

import { describe, expect, test } from "bun:test";
import { chmodSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { probeEngine } from "../../src/agent/engine-versions";
import { discoverGpus } from "../../src/agent/gpus";
import { ManualScheduler } from "../../src/lib/scheduler";
import { readFixture } from "../fixtures/read";
import { scratchDir } from "../helpers/tmp";

const fx = {
  h100L: readFixture("nvidia-smi/L__h100-80gb-hbm3-mig__590.48.01.txt"),
  h100Csv: readFixture("nvidia-smi/query-gpu-all-fields__h100-mig-load__590.48.01.csv"),
};

describe("discoverGpus", () => {
  test("real process: a stand-in nvidia-smi script printing the captures; and a hung one times out", async () => {
    const dir = scratchDir("llmgw-smi-");
    try {
      writeFileSync(join(dir, "q.csv"), fx.h100Csv);
      writeFileSync(join(dir, "l.txt"), fx.h100L);
      const smi = join(dir, "nvidia-smi");
      writeFileSync(smi, `#!/bin/sh\nif [ "$1" = "-L" ]; then cat "${dir}/l.txt"; else cat "${dir}/q.csv"; fi\n`);
      chmodSync(smi, 0o755);
      const d = await discoverGpus({ nvidiaSmi: smi });
      expect(d.error).toBeUndefined();
      expect(d.gpus.map((g) => g.class)).toEqual(["H100-80GB/3g.40gb", "H100-80GB/2g.20gb", "H100-80GB/1g.10gb", "H100-80GB/1g.10gb"]);

      const hung = join(dir, "hung-smi");
      writeFileSync(hung, "#!/bin/sh\nexec sleep 30\n");
      chmodSync(hung, 0o755);
      // The timeout runs on the clock: both commands are killed when it moves past 30 s.
      const clock = new ManualScheduler();
      const pending = discoverGpus({ nvidiaSmi: hung, timeoutMs: 30_000, scheduler: clock });
      clock.advance(29_999);
      clock.advance(1);
      const t = await pending;
      expect(t.gpus).toEqual([]);
      expect(t.error).toContain("did not finish within 30s");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("probing", () => {
  test("a hung version command is killed at the timeout and reported, not waited on", async () => {
    const dir = scratchDir("llmgw-probe-");
    const script = join(dir, "vllm");
    writeFileSync(script, "#!/bin/sh\nexec sleep 30\n", { mode: 0o755 });
    try {
      // The timeout runs on the clock; only the killed child's exit is waited for.
      const clock = new ManualScheduler();
      const pending = probeEngine("vllm", { timeoutMs: 60_000, bin: { vllm: script }, scheduler: clock });
      clock.advance(60_000);
      const r = await pending;
      expect(r.version).toBeNull();
      expect(r.error).toBe(`\`${script} --version\` did not finish within 60s`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
