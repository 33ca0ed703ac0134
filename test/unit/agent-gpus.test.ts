// GPU discovery on real nvidia-smi output (test/fixtures/nvidia-smi, sources in their headers):
// the parsers, the MIG rule, health marking, the not-installed path, class names, --simulate.
// nvidia-smi as a real process (a stand-in script, a hung one) is in
// test/integration/agent-commands.test.ts.

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  buildGpuReports,
  discoverGpus,
  normaliseClass,
  parseListGpus,
  parseMigDevices,
  parseQueryGpuCsv,
  simulatedGpus,
  type QueryGpuRow,
  type ListedGpu,
  type RunResult,
  type Runner,
} from "../../src/agent/gpus";
import { GpuReport, HeartbeatRequest } from "../../src/protocol/heartbeat";
import { readFixture } from "../fixtures/read";

const fx = {
  h100L: readFixture("nvidia-smi/L__h100-80gb-hbm3-mig__590.48.01.txt"),
  h200L: readFixture("nvidia-smi/L__h200-no-mig__590.48.01.txt"),
  l40sL: readFixture("nvidia-smi/L__l40s__595.80.txt"),
  h100Csv: readFixture("nvidia-smi/query-gpu-all-fields__h100-mig-load__590.48.01.csv"),
  h200Csv: readFixture("nvidia-smi/query-gpu-all-fields__h200-idle__590.48.01.csv"),
  gpustack: readFixture("nvidia-smi/query-gpu-csv-noheader__gpustack-docstring__rtx4080super.csv"),
  unhealthy: readFixture("nvidia-smi/unhealthy-gpu-outputs.txt"),
  // Constructed in the format of the captures above (see their headers): an H200 whose 3g.71gb
  // GPU instance is split into compute instances 1c.3g.71gb and 2c.3g.71gb.
  h200CiL: readFixture("nvidia-smi/L__h200-mig-compute-instances__constructed.txt"),
  h200CiQ: readFixture("nvidia-smi/q__h200-mig-compute-instances__constructed.txt"),
  h100Q: readFixture("nvidia-smi/q__h100-mig-idle__590.48.01.txt"),
};
// The COMMAND line in the gpustack fixture's header: a noheader query of other fields than ours.
const GPUSTACK_COLUMNS = ["index", "name", "memory.total", "memory.used", "utilization.gpu", "temperature.gpu"];
const ZERO_GPU = "GPU-00000000-0000-0000-0000-000000000000";

/** Every report must pass the wire schema, and a node's list must be a valid heartbeat. */
function expectValidHeartbeat(gpus: GpuReport[]) {
  for (const g of gpus) expect(GpuReport.safeParse(g).success).toBe(true);
  const hb = HeartbeatRequest.safeParse({ node: "n1", address: "10.0.0.1", gpus });
  if (!hb.success) throw new Error(JSON.stringify(hb.error.issues));
  expect(gpus.map((g) => g.index)).toEqual(gpus.map((_, i) => i));
}

/** A runner answering like nvidia-smi would, from canned outputs; records what it was asked. */
function fakeSmi(answers: { query: RunResult | Error; list: RunResult | Error; q?: RunResult | Error }, calls: string[][] = []): Runner {
  return async (argv) => {
    calls.push(argv);
    const a = argv.includes("-L") ? answers.list : argv.includes("-q") ? (answers.q ?? new Error("no -q answer")) : answers.query;
    if (a instanceof Error) throw a;
    return a;
  };
}
const ok = (stdout: string): RunResult => ({ exitCode: 0, stdout, stderr: "" });

// The fixtures come from one-GPU machines, and their capturer zeroed every uuid. To test a node
// with a MIG card and a whole card beside it, the H200 capture becomes GPU 1 with its own uuid.
const H200_AS_GPU1 = "GPU-11111111-1111-1111-1111-111111111111";
function h200AsGpu1Row(): string {
  const [header, row] = fx.h200Csv.trim().split("\n") as [string, string];
  const names = header.split(", ");
  const fields = row.split(", ");
  fields[names.indexOf("index")] = "1";
  fields[names.indexOf("uuid")] = H200_AS_GPU1;
  return fields.join(", ");
}
const mixedCsv = () => `${fx.h100Csv.trim()}\n${h200AsGpu1Row()}\n`;
const mixedL = () => `${fx.h100L.trim()}\n${fx.h200L.trim().replace("GPU 0:", "GPU 1:").replace(ZERO_GPU, H200_AS_GPU1)}\n`;

describe("parseListGpus (nvidia-smi -L)", () => {
  test("H100 in MIG mode: the card and its four instances with profiles", () => {
    const [card, ...rest] = parseListGpus(fx.h100L);
    expect(rest).toEqual([]);
    expect(card).toMatchObject({ smiIndex: 0, name: "NVIDIA H100 80GB HBM3", uuid: ZERO_GPU, problem: null });
    expect(card!.migs.map((m) => [m.profile, m.device, m.uuid])).toEqual([
      ["3g.40gb", 0, "MIG-00000000-0000-0000-0000-000000000000"],
      ["2g.20gb", 1, "MIG-00000001-0000-0000-0000-000000000001"],
      ["1g.10gb", 2, "MIG-00000002-0000-0000-0000-000000000002"],
      ["1g.10gb", 3, "MIG-00000003-0000-0000-0000-000000000003"],
    ]);
  });

  test("H200 and L40S without MIG", () => {
    expect(parseListGpus(fx.h200L)).toEqual([
      { smiIndex: 0, name: "NVIDIA H200", uuid: ZERO_GPU, busId: null, problem: null, migs: [] },
    ]);
    expect(parseListGpus(fx.l40sL)).toEqual([
      { smiIndex: 0, name: "NVIDIA L40S", uuid: ZERO_GPU, busId: null, problem: null, migs: [] },
    ]);
  });

  test("older drivers' MIG uuid form (MIG-GPU-…/gi/ci) is kept as printed", () => {
    const [card] = parseListGpus(
      "GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n" +
        "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0)\n",
    );
    expect(card!.migs[0]).toMatchObject({ profile: "1g.5gb", uuid: "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0" });
  });
});

describe("parseQueryGpuCsv", () => {
  test("all-fields capture with header and units (H100, MIG on): columns found by name", () => {
    expect(parseQueryGpuCsv(fx.h100Csv)).toEqual([
      {
        smiIndex: 0,
        uuid: ZERO_GPU,
        busId: "00000000:00:09.0",
        name: "NVIDIA H100 80GB HBM3",
        memoryMiB: 81559,
        migMode: "enabled",
        // Healthy although dozens of cells read "[Requested functionality has been deprecated]".
        healthy: true,
        problem: null,
      },
    ]);
  });

  test("all-fields capture, H200 without MIG", () => {
    expect(parseQueryGpuCsv(fx.h200Csv)).toMatchObject([
      { smiIndex: 0, name: "NVIDIA H200", memoryMiB: 143771, migMode: "disabled", healthy: true },
    ]);
  });

  test("gpustack's noheader rows with units, given their columns", () => {
    const rows = parseQueryGpuCsv(fx.gpustack, GPUSTACK_COLUMNS);
    expect(rows.map((r) => [r.smiIndex, r.name, r.memoryMiB, r.uuid, r.healthy])).toEqual([
      [0, "NVIDIA GeForce RTX 4080 SUPER", 16376, null, true],
      [1, "NVIDIA GeForce RTX 4080 SUPER", 16376, null, true],
    ]);
  });

  test("our own headerless nounits format (values taken from the H100 capture)", () => {
    const rows = parseQueryGpuCsv(`0, ${ZERO_GPU}, NVIDIA H100 80GB HBM3, 81559, Enabled\n`);
    expect(rows).toMatchObject([{ smiIndex: 0, uuid: ZERO_GPU, memoryMiB: 81559, migMode: "enabled", healthy: true }]);
    // …and with unit suffixes left on.
    expect(parseQueryGpuCsv(`0, ${ZERO_GPU}, NVIDIA H100 80GB HBM3, 81559 MiB, Enabled`)[0]!.memoryMiB).toBe(81559);
  });

  test("an unreadable uuid gives an unhealthy row, not a missing one", () => {
    const [row] = parseQueryGpuCsv("3, [Unknown Error], NVIDIA H100 80GB HBM3, 81559, Disabled");
    expect(row).toMatchObject({ smiIndex: 3, uuid: null, healthy: false });
    expect(buildGpuReports([row!], [])[0]).toMatchObject({ uuid: "GPU-unknown-3", healthy: false, class: "H100-80GB" });
  });

  test("health readings that are values, not errors: recovery action and pending remaps", () => {
    const header = "index, uuid, name, memory.total [MiB], gpu_recovery_action, remapped_rows.pending";
    const rows = parseQueryGpuCsv(
      `${header}\n0, GPU-a, NVIDIA H100 80GB HBM3, 81559 MiB, None, [N/A]\n` +
        `1, GPU-b, NVIDIA H100 80GB HBM3, 81559 MiB, Reset, No\n` +
        `2, GPU-c, NVIDIA H100 80GB HBM3, 81559 MiB, None, Yes\n`,
    );
    expect(rows.map((r) => r.healthy)).toEqual([true, false, false]);
    expect(rows[1]!.problem).toContain("gpu_recovery_action is Reset");
  });

  test("never throws and never invents a GPU from prose", () => {
    fc.assert(
      fc.property(fc.array(fc.string(), { maxLength: 8 }), (lines) => {
        const text = lines.join("\n");
        parseQueryGpuCsv(text);
        parseListGpus(text);
        parseMigDevices(text);
      }),
    );
    expect(parseQueryGpuCsv("No devices were found")).toEqual([]);
    expect(parseListGpus("No devices were found")).toEqual([]);
  });
});

describe("normaliseClass", () => {
  const table: [string, number | null, string][] = [
    ["NVIDIA H100 80GB HBM3", 81559, "H100-80GB"],
    ["NVIDIA H100 PCIe", 81559, "H100-80GB"],
    ["NVIDIA H100 NVL", 95830, "H100-94GB"],
    ["NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"],
    ["NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"],
    ["NVIDIA A100 80GB PCIe", 81920, "A100-80GB"],
    ["NVIDIA H200", 143771, "H200-141GB"],
    ["NVIDIA L40S", 46068, "L40S"],
    ["NVIDIA L4", 23034, "L4"],
    ["NVIDIA A10G", 23028, "A10G"],
    ["Tesla T4", 15360, "T4"],
    ["Tesla V100-SXM2-32GB", 32510, "V100-32GB"],
    ["Tesla V100-PCIE-16GB", 16160, "V100-16GB"],
    ["NVIDIA GeForce RTX 4080 SUPER", 16376, "RTX-4080-SUPER"],
    ["NVIDIA GeForce RTX 4090", 24564, "RTX-4090"],
    ["NVIDIA GeForce RTX 4060 Ti", 16380, "RTX-4060-TI-16GB"],
    ["NVIDIA RTX A6000", 49140, "RTX-A6000"],
    ["NVIDIA RTX 6000 Ada Generation", 49140, "RTX-6000-ADA"],
    ["NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "RTX-PRO-6000-BLACKWELL"],
    ["NVIDIA B200", 183359, "B200-180GB"],
    ["NVIDIA H100 80GB HBM3", null, "H100-80GB"],
    ["NVIDIA H200", null, "H200"],
    ["", 81559, "unknown"],
  ];
  test.each(table)("%p with %p MiB → %p", (name, mib, cls) => {
    expect(normaliseClass(name, mib)).toBe(cls);
  });

  test("overrides by raw name or by normalised class; MIG instances inherit the card's", () => {
    const rows = parseQueryGpuCsv(mixedCsv());
    const listing = parseListGpus(mixedL());
    const byName = buildGpuReports(rows, listing, { "NVIDIA H200": "H200-SXM" });
    expect(byName.map((g) => g.class)).toEqual([
      "H100-80GB/3g.40gb", "H100-80GB/2g.20gb", "H100-80GB/1g.10gb", "H100-80GB/1g.10gb", "H200-SXM",
    ]);
    const byClass = buildGpuReports(rows, listing, { "H100-80GB": "H100", "H100-80GB/1g.10gb": "tiny" });
    expect(byClass.map((g) => g.class)).toEqual(["H100/3g.40gb", "H100/2g.20gb", "H100/1g.10gb", "H100/1g.10gb", "H200-141GB"]);
  });
});

describe("buildGpuReports", () => {
  test("H100 MIG box: instances, never the card, parent = card uuid, memory from profile", () => {
    const gpus = buildGpuReports(parseQueryGpuCsv(fx.h100Csv), parseListGpus(fx.h100L));
    expect(gpus).toEqual([
      { index: 0, uuid: "MIG-00000000-0000-0000-0000-000000000000", name: "NVIDIA H100 80GB HBM3 MIG 3g.40gb", class: "H100-80GB/3g.40gb", memory_mib: 40960, healthy: true, parent: ZERO_GPU, smi_index: 0, pci_bus_id: "00000000:00:09.0" },
      { index: 1, uuid: "MIG-00000001-0000-0000-0000-000000000001", name: "NVIDIA H100 80GB HBM3 MIG 2g.20gb", class: "H100-80GB/2g.20gb", memory_mib: 20480, healthy: true, parent: ZERO_GPU, smi_index: 0, pci_bus_id: "00000000:00:09.0" },
      { index: 2, uuid: "MIG-00000002-0000-0000-0000-000000000002", name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb", class: "H100-80GB/1g.10gb", memory_mib: 10240, healthy: true, parent: ZERO_GPU, smi_index: 0, pci_bus_id: "00000000:00:09.0" },
      { index: 3, uuid: "MIG-00000003-0000-0000-0000-000000000003", name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb", class: "H100-80GB/1g.10gb", memory_mib: 10240, healthy: true, parent: ZERO_GPU, smi_index: 0, pci_bus_id: "00000000:00:09.0" },
    ]);
    expectValidHeartbeat(gpus);
  });

  test("MIG card with a whole card beside it: the whole card is itself, parent null, next index", () => {
    const gpus = buildGpuReports(parseQueryGpuCsv(mixedCsv()), parseListGpus(mixedL()));
    expect(gpus).toHaveLength(5);
    expect(gpus.slice(0, 4).every((g) => g.parent === ZERO_GPU)).toBe(true);
    expect(gpus[4]).toEqual({
      index: 4, uuid: H200_AS_GPU1, name: "NVIDIA H200", class: "H200-141GB", memory_mib: 143771, healthy: true, parent: null, smi_index: 1, pci_bus_id: "00000000:83:00.0",
    });
    expect(gpus.some((g) => g.uuid === ZERO_GPU)).toBe(false);
    expectValidHeartbeat(gpus);
  });

  test("H200 without MIG", () => {
    const gpus = buildGpuReports(parseQueryGpuCsv(fx.h200Csv), parseListGpus(fx.h200L));
    expect(gpus).toEqual([
      { index: 0, uuid: ZERO_GPU, name: "NVIDIA H200", class: "H200-141GB", memory_mib: 143771, healthy: true, parent: null, smi_index: 0, pci_bus_id: "00000000:83:00.0" },
    ]);
  });

  test("gpustack rows: no uuid was queried, so stable ones are made up from the index", () => {
    const gpus = buildGpuReports(parseQueryGpuCsv(fx.gpustack, GPUSTACK_COLUMNS), []);
    expect(gpus.map((g) => [g.index, g.uuid, g.class, g.memory_mib, g.healthy])).toEqual([
      [0, "GPU-unknown-0", "RTX-4080-SUPER", 16376, true],
      [1, "GPU-unknown-1", "RTX-4080-SUPER", 16376, true],
    ]);
    expectValidHeartbeat(gpus);
  });

  test("L40S with its query row (no MIG support: mig.mode.current reads [N/A]) is a whole card", () => {
    const row = parseQueryGpuCsv(`0, ${ZERO_GPU}, NVIDIA L40S, 46068, [N/A]`);
    expect(row[0]!.migMode).toBeNull();
    expect(buildGpuReports(row, parseListGpus(fx.l40sL))).toEqual([
      { index: 0, uuid: ZERO_GPU, name: "NVIDIA L40S", class: "L40S", memory_mib: 46068, healthy: true, parent: null, smi_index: 0, pci_bus_id: null },
    ]);
  });

  test("L40S known only from -L (query gave nothing): reported, but unhealthy, with a warning", () => {
    const warnings: string[] = [];
    const gpus = buildGpuReports([], parseListGpus(fx.l40sL), {}, (w) => warnings.push(w));
    expect(gpus).toEqual([
      { index: 0, uuid: ZERO_GPU, name: "NVIDIA L40S", class: "L40S", memory_mib: 0, healthy: false, parent: null, reason: "nvidia-smi --query-gpu gave no row for it (memory and health unknown)", smi_index: 0, pci_bus_id: null },
    ]);
    expect(warnings.join()).toContain("no row");
  });

  test("a MIG-mode card with no instances offers nothing: reported unhealthy, and says so", () => {
    const warnings: string[] = [];
    const gpus = buildGpuReports(parseQueryGpuCsv(fx.h100Csv), [], {}, (w) => warnings.push(w));
    expect(gpus).toMatchObject([{ class: "H100-80GB", healthy: false, parent: null, reason: "MIG mode with no GPU instances" }]);
    expect(warnings.join()).toContain("MIG mode but lists no MIG instances");
  });

  test("any mix of rows and listings gives a valid heartbeat (unique indices and uuids)", () => {
    const uuid = fc.constantFrom(null, "GPU-a", "GPU-b", "GPU-c");
    const row = fc.record({
      smiIndex: fc.option(fc.nat(4)),
      uuid,
      busId: fc.constantFrom(null, "00000000:0B:00.0"),
      name: fc.constantFrom("", "NVIDIA H100 80GB HBM3", "NVIDIA L40S"),
      memoryMiB: fc.option(fc.nat(200_000)),
      migMode: fc.constantFrom(null, "enabled" as const, "disabled" as const),
      healthy: fc.boolean(),
      problem: fc.constantFrom(null, "temperature.gpu reads [GPU requires reset]"),
    }) satisfies fc.Arbitrary<QueryGpuRow>;
    const listed = fc.record({
      smiIndex: fc.option(fc.nat(4)),
      name: fc.constantFrom("", "NVIDIA H100 80GB HBM3"),
      uuid,
      busId: fc.constantFrom(null, "00000000:0B:00.0"),
      problem: fc.constantFrom(null, "Unknown Error"),
      migs: fc.array(
        fc.record({ profile: fc.constantFrom("3g.40gb", "1g.10gb"), device: fc.nat(6), uuid: fc.constantFrom("MIG-a", "MIG-b"), problem: fc.constant(null) }),
        { maxLength: 3 },
      ),
    }) satisfies fc.Arbitrary<ListedGpu>;
    fc.assert(
      fc.property(fc.array(row, { maxLength: 6 }), fc.array(listed, { maxLength: 6 }), (rows, listing) => {
        expectValidHeartbeat(buildGpuReports(rows, listing));
      }),
    );
  });
});

describe("unhealthy nvidia-smi outputs (unhealthy-gpu-outputs.txt)", () => {
  const blocks = fx.unhealthy
    .split(/^### /m)
    .filter((b) => b.trim() !== "")
    .map((b) => {
      const nl = b.indexOf("\n");
      return { source: b.slice(0, nl), body: b.slice(nl + 1) };
    });
  const block = (key: string) => {
    const found = blocks.filter((b) => b.source.includes(key));
    if (found.length !== 1) throw new Error(`expected one block for ${key}, found ${found.length}`);
    return found[0]!;
  };

  // GPUs nvidia-smi could not open: it prints this line in place of their row, in -L and --query-gpu alike.
  const deviceHandle = ["open-gpu-kernel-modules/issues/387", "nvidia-docker/issues/1553", "syno_nvidia_gpu_driver/issues/22", "Easy-GPU-PV/issues/276"];
  // Output in our --query-gpu format.
  const queryCsv = ["58061924347"];
  // The driver or its libraries are missing: no GPU can be named at all.
  const nodeWide = ["self-hosted-runners/issues/40", "manylinux-cuda/issues/5"];
  // Table, -q or prose samples: the broken reading is replayed in the --query-gpu field that carries it.
  const translated: Record<string, { quote: string; columns: string[]; row: string }> = {
    "azhpc-diagnostics/issues/77": { quote: "ERR! / 250W", columns: ["index", "name", "memory.total", "power.draw"], row: "1, Tesla V100-PCIE..., 16160 MiB, ERR!" },
    "open-gpu-kernel-modules/issues/1193": { quote: "GPU fans is display ERR!", columns: ["index", "fan.speed", "power.draw"], row: "0, ERR!, [N/A]" },
    "68287365195": { quote: "temperature.gpu -> [GPU requires reset]", columns: ["index", "temperature.gpu"], row: "0, [GPU requires reset]" },
    "69725654568": { quote: "pstate reads `[GPU requires reset]`", columns: ["index", "pstate", "utilization.gpu"], row: "0, [GPU requires reset], [N/A]" },
    "leptonai/gpud/pull/80": { quote: "Pending                           : Yes", columns: ["index", "remapped_rows.pending"], row: "0, Yes" },
  };
  // `nvidia-smi -r` refusing a reset: not discovery output.
  const notDiscovery = ["NVSentinel/pull/1692"];

  test("every block in the file is accounted for below", () => {
    const known = [...deviceHandle, ...queryCsv, ...nodeWide, ...Object.keys(translated), ...notDiscovery];
    expect(blocks.map((b) => known.filter((k) => b.source.includes(k)).length)).toEqual(blocks.map(() => 1));
  });

  test.each(deviceHandle)("%s: the GPU is present and unhealthy, in both parsers", (key) => {
    const { body } = block(key);
    for (const gpus of [buildGpuReports(parseQueryGpuCsv(body), []), buildGpuReports([], parseListGpus(body))]) {
      expect(gpus).toHaveLength(1);
      expect(gpus[0]).toMatchObject({ index: 0, healthy: false, parent: null, class: "unknown" });
      expect(gpus[0]!.uuid).toMatch(/^GPU-unknown-0{8}:[0-9A-F]{2}:00\.0$/);
      expectValidHeartbeat(gpus);
    }
  });

  test("one broken GPU among healthy ones: both outputs name it, it is reported once", () => {
    const { body } = block("open-gpu-kernel-modules/issues/387");
    const gpus = buildGpuReports(parseQueryGpuCsv(`${fx.h200Csv}${body}`), parseListGpus(`${fx.h200L}${body}`));
    expect(gpus.map((g) => [g.uuid, g.healthy])).toEqual([
      [ZERO_GPU, true],
      ["GPU-unknown-00000000:0B:00.0", false],
    ]);
  });

  test("[GPU requires reset] in a --query-gpu row (with header)", () => {
    const gpus = buildGpuReports(parseQueryGpuCsv(block(queryCsv[0]!).body), []);
    expect(gpus).toEqual([
      { index: 0, uuid: "GPU-unknown-0", name: "", class: "unknown", memory_mib: 0, healthy: false, parent: null, reason: "temperature.gpu reads [GPU requires reset]", smi_index: 0, pci_bus_id: null },
    ]);
  });

  test.each(Object.entries(translated))("%s: replayed as a query row, unhealthy", (key, t) => {
    expect(block(key).body).toContain(t.quote);
    const rows = parseQueryGpuCsv(t.row, t.columns);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.healthy).toBe(false);
    expect(buildGpuReports(rows, [])[0]!.healthy).toBe(false);
  });

  test.each(nodeWide)("%s: no GPUs, and the error quotes nvidia-smi", async (key) => {
    const text = block(key).body.trim();
    const failed: RunResult = { exitCode: 9, stdout: `${text}\n`, stderr: "" };
    const d = await discoverGpus({ run: fakeSmi({ query: failed, list: failed }) });
    expect(d.gpus).toEqual([]);
    expect(d.error).toStartWith(`nvidia-smi exited with status 9: ${text.replace(/\.$/, "")}`);
    // Both commands failed alike: said once.
    expect(d.error!.split("exited with").length).toBe(2);
    expect(d.error).toContain("this node reports no GPUs");
  });

  test.each(notDiscovery)("%s: names a bus id but is not a GPU listing", (key) => {
    const { body } = block(key);
    expect(parseQueryGpuCsv(body)).toEqual([]);
    expect(parseListGpus(body)).toEqual([]);
  });
});

describe("discoverGpus", () => {
  test("a driver string with control characters is made printable, so the heartbeat is not refused", async () => {
    // A hostile or broken driver could print anything in a name; the head node refuses raw
    // controls in gpus[].name, which would cost the node every heartbeat.
    const evil = "\u001b[2J\u001b]0;pwned\u0007NVIDIA H200";
    const d = await discoverGpus({ run: fakeSmi({ query: ok(fx.h200Csv.replaceAll("NVIDIA H200", evil)), list: ok(fx.h200L.replaceAll("NVIDIA H200", evil)) }) });
    expect(d.gpus.length).toBe(1);
    for (const g of d.gpus) expect(g.name).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
    expectValidHeartbeat(d.gpus);
  });

  test("nvidia-smi not installed: no GPUs and a clear error, never a throw", async () => {
    const onPath = await discoverGpus({ nvidiaSmi: "nvidia-smi-does-not-exist-llmgw" });
    expect(onPath.gpus).toEqual([]);
    expect(onPath.error).toContain("nvidia-smi not found on PATH");
    expect(onPath.error).toContain("this node reports no GPUs (use --simulate for a simulated inventory)");
    const atPath = await discoverGpus({ nvidiaSmi: "/nonexistent/llmgw/nvidia-smi" });
    expect(atPath).toMatchObject({ gpus: [] });
    expect(atPath.error).toStartWith("nvidia-smi not found at /nonexistent/llmgw/nvidia-smi: this node reports no GPUs");
  });

  test("the default message, via a runner that cannot find the binary", async () => {
    const missing = Object.assign(new Error("Executable not found in $PATH"), { code: "ENOENT" });
    const d = await discoverGpus({ run: fakeSmi({ query: missing, list: missing }) });
    expect(d.error).toBe("nvidia-smi not found on PATH: this node reports no GPUs (use --simulate for a simulated inventory)");
  });

  test("asks for a CSV with header and the -L listing; H100 MIG + H200 node", async () => {
    const calls: string[][] = [];
    const d = await discoverGpus({ run: fakeSmi({ query: ok(mixedCsv()), list: ok(mixedL()) }, calls), classOverrides: { "NVIDIA H200": "H200" } });
    expect(calls.map((c) => c.slice(1).join(" ")).sort()).toEqual([
      "--query-gpu=index,uuid,name,memory.total,mig.mode.current,pci.bus_id,pstate,temperature.gpu,remapped_rows.pending,retired_pages.pending --format=csv,nounits",
      "-L",
    ]);
    expect(d.error).toBeUndefined();
    expect(d.warnings).toEqual([]);
    expect(d.gpus.map((g) => g.class)).toEqual(["H100-80GB/3g.40gb", "H100-80GB/2g.20gb", "H100-80GB/1g.10gb", "H100-80GB/1g.10gb", "H200"]);
  });

  test("non-zero exit with rows: keeps what it read, marks the broken GPU unhealthy, says why", async () => {
    const broken = "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n";
    const d = await discoverGpus({
      run: fakeSmi({
        query: { exitCode: 15, stdout: `${fx.h200Csv}${broken}`, stderr: "" },
        list: { exitCode: 15, stdout: `${fx.h200L}${broken}`, stderr: "" },
      }),
    });
    expect(d.gpus.map((g) => [g.index, g.class, g.healthy])).toEqual([
      [0, "H200-141GB", true],
      [1, "unknown", false],
    ]);
    expect(d.error).toContain("exited with status 15: Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error");
    expect(d.error).toContain("1 marked unhealthy");
    expect(d.warnings.join()).toContain("00000000:0B:00.0");
  });

  test("a pre-MIG driver rejecting mig.mode.current: asks again without it", async () => {
    const calls: string[][] = [];
    let queries = 0;
    const run: Runner = async (argv) => {
      calls.push(argv);
      if (argv.includes("-L")) return ok("GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n");
      if (queries++ === 0) return { exitCode: 2, stdout: 'Field "mig.mode.current" is not a valid field to query.\n', stderr: "" };
      return ok("index, uuid, name, memory.total [MiB], pci.bus_id, pstate, temperature.gpu\n0, GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77, Tesla V100-SXM2-16GB, 16160, 00000000:00:1E.0, P0, 35\n");
    };
    const d = await discoverGpus({ run });
    expect(calls.filter((c) => !c.includes("-L")).at(-1)!.join(" ")).not.toContain("mig.mode");
    expect(d).toEqual({
      gpus: [{ index: 0, uuid: "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77", name: "Tesla V100-SXM2-16GB", class: "V100-16GB", memory_mib: 16160, healthy: true, parent: null, smi_index: 0, pci_bus_id: "00000000:00:1E.0" }],
      warnings: [],
    });
  });
});

describe("simulatedGpus", () => {
  test("H100-80GB:8 — eight whole cards, deterministic uuids per node", () => {
    const a = simulatedGpus("H100-80GB:8", [], "node-a");
    expect(a).toHaveLength(8);
    expect(a.every((g) => g.class === "H100-80GB" && g.memory_mib === 81559 && g.parent === null && g.healthy)).toBe(true);
    expect(a.every((g) => /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(g.uuid))).toBe(true);
    expect(simulatedGpus("H100-80GB:8", [], "node-a")).toEqual(a);
    const b = simulatedGpus("H100-80GB:8", [], "node-b");
    expect(b.some((g) => a.some((h) => h.uuid === g.uuid))).toBe(false);
    expectValidHeartbeat(a);
  });

  test("mixed spec with MIG instances grouped under synthetic cards, unhealthy indices marked", () => {
    const gpus = simulatedGpus("H100-80GB:4,A100-80GB/3g.40gb:3,L40S:2", [1, 5]);
    expect(gpus.map((g) => [g.index, g.class, g.memory_mib, g.healthy])).toEqual([
      [0, "H100-80GB", 81559, true],
      [1, "H100-80GB", 81559, false],
      [2, "H100-80GB", 81559, true],
      [3, "H100-80GB", 81559, true],
      [4, "A100-80GB/3g.40gb", 40960, true],
      [5, "A100-80GB/3g.40gb", 40960, false],
      [6, "A100-80GB/3g.40gb", 40960, true],
      [7, "L40S", 46068, true],
      [8, "L40S", 46068, true],
    ]);
    // Two 3g.40gb fit on a card: instances 4 and 5 share one, 6 starts the next.
    const [m4, m5, m6] = [gpus[4]!, gpus[5]!, gpus[6]!];
    expect(m4.parent).toBe(m5.parent);
    expect(m6.parent).not.toBe(m4.parent);
    expect(m4.uuid).toStartWith("MIG-");
    expect(gpus.some((g) => g.uuid === m4.parent || g.uuid === m6.parent)).toBe(false);
    expectValidHeartbeat(gpus);
  });

  test("seven 1g.10gb per card; memory from NNGB in an unknown class name", () => {
    const gpus = simulatedGpus("H100-80GB/1g.10gb:8,MI300X-192GB:1");
    expect(new Set(gpus.slice(0, 7).map((g) => g.parent)).size).toBe(1);
    expect(gpus[7]!.parent).not.toBe(gpus[0]!.parent);
    expect(gpus[8]).toMatchObject({ class: "MI300X-192GB", memory_mib: 192 * 1024 });
  });

  const bad: [string, string][] = [
    ["", "empty"],
    ["H100-80GB", '"H100-80GB"'],
    ["H100-80GB:0", '"H100-80GB:0"'],
    ["H100-80GB:two", '"two"'],
    [":2", '":2"'],
    ["H100-80GB:2,", 'part ""'],
    ["H100-80GB:2,FOO:1", '"FOO"'],
    ["A100-80GB/3x.40gb:2", '"3x.40gb"'],
    ["A100-80GB/9g.40gb:1", '"9g.40gb"'],
    ["A100/3g.40gb/x:1", '"A100/3g.40gb/x"'],
    ["H100-80GB:300", '"H100-80GB:300"'],
  ];
  test.each(bad)("spec %p is refused naming %s", (spec, named) => {
    expect(() => simulatedGpus(spec, [])).toThrow(named);
  });

  test("an unhealthy index outside the inventory is refused", () => {
    expect(() => simulatedGpus("L40S:2", [2])).toThrow("unhealthy GPU index 2");
  });

  test("any spec of known classes gives a valid heartbeat", () => {
    const part = fc.tuple(fc.constantFrom("H100-80GB", "L40S", "A100-80GB/3g.40gb", "H200-141GB/1g.18gb", "T4"), fc.integer({ min: 1, max: 9 }));
    fc.assert(
      fc.property(fc.array(part, { minLength: 1, maxLength: 6 }), fc.string({ minLength: 1, maxLength: 12 }), (parts, node) => {
        const gpus = simulatedGpus(parts.map(([c, n]) => `${c}:${n}`).join(","), [], node);
        expect(gpus).toHaveLength(parts.reduce((s, [, n]) => s + n, 0));
        expectValidHeartbeat(gpus);
      }),
    );
  });
});

describe("what held-out samples showed", () => {
  // The H200 capture's row with MIG mode switched on, as it reads on the card of the constructed
  // compute-instance sample (same name, bus id and memory).
  const h200MigCsv = () => {
    const [header, row] = fx.h200Csv.trim().split("\n") as [string, string];
    const names = header.split(", ");
    const fields = row.split(", ");
    for (const f of ["mig.mode.current", "mig.mode.pending"]) fields[names.indexOf(f)] = "Enabled";
    return `${header}\n${fields.join(", ")}\n`;
  };
  /** Memory of the node's devices as totals count it: a device sharing another's memory adds none. */
  const memoryOnce = (gpus: GpuReport[]) =>
    gpus.filter((g) => !gpus.some((o) => o.uuid === g.parent)).reduce((a, g) => a + g.memory_mib, 0);

  test("the switched-on H200 row really reads MIG mode enabled", () => {
    expect(parseQueryGpuCsv(h200MigCsv())).toMatchObject([{ migMode: "enabled", memoryMiB: 143771, busId: "00000000:83:00.0" }]);
  });

  test("compute instances of one GPU instance: its memory counted once, the largest CI stands for it", async () => {
    const calls: string[][] = [];
    const d = await discoverGpus({ run: fakeSmi({ query: ok(h200MigCsv()), list: ok(fx.h200CiL), q: ok(fx.h200CiQ) }, calls) });
    expect(d.error).toBeUndefined();
    const lead = "MIG-00000001-0000-0000-0000-000000000001";
    expect(d.gpus.map((g) => [g.index, g.class, g.memory_mib, g.uuid, g.parent])).toEqual([
      [0, "H200-141GB/1c.3g.71gb", 72704, "MIG-00000000-0000-0000-0000-000000000000", lead],
      [1, "H200-141GB/3g.71gb", 72704, lead, ZERO_GPU],
      [2, "H200-141GB/2g.35gb", 35840, "MIG-00000002-0000-0000-0000-000000000002", ZERO_GPU],
      [3, "H200-141GB/1g.18gb", 18432, "MIG-00000003-0000-0000-0000-000000000003", ZERO_GPU],
    ]);
    // Summed naively the card has 199680 MiB; counted once it has what its instances really hold.
    expect(d.gpus.reduce((a, g) => a + g.memory_mib, 0)).toBe(199680);
    expect(memoryOnce(d.gpus)).toBe(126976);
    expect(memoryOnce(d.gpus)).toBeLessThanOrEqual(143771);
    expect(calls.some((c) => c.includes("-q"))).toBe(true);
    expectValidHeartbeat(d.gpus);
  });

  test("without nvidia-smi -q, compute instances of one profile on a card are grouped (never split wrongly)", async () => {
    const d = await discoverGpus({ run: fakeSmi({ query: ok(h200MigCsv()), list: ok(fx.h200CiL), q: { exitCode: 4, stdout: "", stderr: "Insufficient Permissions" } }) });
    expect(d.gpus.map((g) => [g.class, g.parent])).toEqual([
      ["H200-141GB/1c.3g.71gb", "MIG-00000001-0000-0000-0000-000000000001"],
      ["H200-141GB/3g.71gb", ZERO_GPU],
      ["H200-141GB/2g.35gb", ZERO_GPU],
      ["H200-141GB/1g.18gb", ZERO_GPU],
    ]);
    expect(memoryOnce(d.gpus)).toBe(126976);
  });

  test("older drivers name the GPU instance in the MIG uuid (MIG-GPU-…/gi/ci): two 3g instances stay two", () => {
    const card = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77";
    const listing = parseListGpus(
      `GPU 0: A100-SXM4-80GB (UUID: ${card})\n` +
        [
          ["1c.3g.40gb", 0, "1/0"],
          ["2c.3g.40gb", 1, "1/1"],
          ["1c.3g.40gb", 2, "2/0"],
          ["2c.3g.40gb", 3, "2/1"],
        ]
          .map(([p, d, gc]) => `  MIG ${p} Device ${d}: (UUID: MIG-${card}/${gc})`)
          .join("\n"),
    );
    const gpus = buildGpuReports([{ smiIndex: 0, uuid: card, busId: null, name: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, migMode: "enabled", healthy: true, problem: null }], listing);
    expect(gpus.map((g) => [g.class, g.parent])).toEqual([
      ["A100-80GB/1c.3g.40gb", `MIG-${card}/1/1`],
      ["A100-80GB/3g.40gb", card],
      ["A100-80GB/1c.3g.40gb", `MIG-${card}/2/1`],
      ["A100-80GB/3g.40gb", card],
    ]);
  });

  test("nvidia-smi -q is asked only when compute instances are listed; the real H100 -q parses", async () => {
    const calls: string[][] = [];
    await discoverGpus({ run: fakeSmi({ query: ok(fx.h100Csv), list: ok(fx.h100L) }, calls) });
    expect(calls.some((c) => c.includes("-q"))).toBe(false);
    expect(parseMigDevices(fx.h100Q).get("00000000:00:09.0")).toEqual([
      { device: 0, gi: 2, ci: 0 },
      { device: 1, gi: 3, ci: 0 },
      { device: 2, gi: 9, ci: 0 },
      { device: 3, gi: 10, ci: 0 },
    ]);
    expect(parseMigDevices(fx.h200CiQ).get("00000000:83:00.0")!.map((m) => [m.gi, m.ci])).toEqual([[2, 0], [2, 1], [3, 0], [9, 0]]);
  });

  test("a card in MIG mode with no instances is reported, unhealthy, with its reason", async () => {
    const d = await discoverGpus({ run: fakeSmi({ query: ok(h200MigCsv()), list: ok(fx.h200L) }) });
    expect(d.gpus).toEqual([
      { index: 0, uuid: ZERO_GPU, name: "NVIDIA H200", class: "H200-141GB", memory_mib: 143771, healthy: false, parent: null, reason: "MIG mode with no GPU instances", smi_index: 0, pci_bus_id: "00000000:83:00.0" },
    ]);
    expectValidHeartbeat(d.gpus);
  });

  test("memory.total [N/A] on a healthy card: kept out with a reason, no invented class", () => {
    const header = "index, uuid, name, memory.total [MiB], mig.mode.current";
    const rows = parseQueryGpuCsv(`${header}\n0, GPU-a, NVIDIA H100 PCIe, 81559 MiB, Disabled\n1, GPU-b, NVIDIA H100 PCIe, [N/A], Disabled\n`);
    const gpus = buildGpuReports(rows, []);
    expect(gpus.map((g) => [g.class, g.memory_mib, g.healthy, g.reason])).toEqual([
      ["H100-80GB", 81559, true, undefined],
      ["unknown", 0, false, "memory.total not reported"],
    ]);
    // A name that carries its size needs no memory reading for its class, yet still gets no placement.
    const named = buildGpuReports(parseQueryGpuCsv(`${header}\n0, GPU-c, NVIDIA H100 80GB HBM3, [N/A], Disabled\n`), []);
    expect(named[0]).toMatchObject({ class: "H100-80GB", healthy: false, reason: "memory.total not reported" });
  });

  test("pending row remaps and retired pages are asked for and make the card unhealthy, with the reason", async () => {
    const header = "index, uuid, name, memory.total [MiB], mig.mode.current, pci.bus_id, pstate, temperature.gpu, remapped_rows.pending, retired_pages.pending";
    const csv = `${header}\n0, GPU-a, NVIDIA H100 80GB HBM3, 81559 MiB, Disabled, 00000000:0B:00.0, P0, 30, No, [N/A]\n1, GPU-b, NVIDIA H100 80GB HBM3, 81559 MiB, Disabled, 00000000:0C:00.0, P0, 30, Yes, [N/A]\n2, GPU-c, NVIDIA H100 80GB HBM3, 81559 MiB, Disabled, 00000000:0D:00.0, P0, 30, No, Yes\n`;
    const d = await discoverGpus({ run: fakeSmi({ query: ok(csv), list: ok("") }) });
    expect(d.gpus.map((g) => [g.healthy, g.reason])).toEqual([
      [true, undefined],
      [false, "remapped_rows.pending is Yes: a row remapping waits for a GPU reset"],
      [false, "retired_pages.pending is Yes: a page retirement waits for a GPU reset"],
    ]);
  });

  test("a driver that does not know remapped_rows/retired_pages: asked again without the field it names", async () => {
    const queries: string[] = [];
    const run: Runner = async (argv) => {
      if (argv.includes("-L")) return ok("GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n");
      const q = argv.find((a) => a.startsWith("--query-gpu="))!;
      queries.push(q);
      for (const f of ["remapped_rows.pending", "retired_pages.pending"])
        if (q.includes(f)) return { exitCode: 2, stdout: `Field "${f}" is not a valid field to query.\n`, stderr: "" };
      return ok("index, uuid, name, memory.total [MiB], mig.mode.current, pci.bus_id, pstate, temperature.gpu\n0, GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77, Tesla V100-SXM2-16GB, 16160, [N/A], 00000000:00:1E.0, P0, 35\n");
    };
    const d = await discoverGpus({ run });
    expect(queries).toHaveLength(3);
    expect(queries.at(-1)).toContain("mig.mode.current");
    expect(queries.at(-1)).not.toContain("pending");
    expect(d).toEqual({
      gpus: [{ index: 0, uuid: "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77", name: "Tesla V100-SXM2-16GB", class: "V100-16GB", memory_mib: 16160, healthy: true, parent: null, smi_index: 0, pci_bus_id: "00000000:00:1E.0" }],
      warnings: [],
    });
  });

  test("unhealthy reports carry their reason; a long one is clipped to what the heartbeat allows", () => {
    const { body } = { body: "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error" };
    expect(buildGpuReports(parseQueryGpuCsv(body), [])[0]!.reason).toBe(body);
    const long = buildGpuReports([{ smiIndex: 0, uuid: "GPU-x", busId: null, name: "NVIDIA L40S", memoryMiB: 46068, migMode: null, healthy: false, problem: "x".repeat(5000) }], []);
    expect(long[0]!.reason!.length).toBeLessThanOrEqual(256);
    expectValidHeartbeat(long);
  });

  test("a driver that cannot be reached: the error is short enough for the heartbeat", async () => {
    const text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.";
    const failed: RunResult = { exitCode: 9, stdout: `${text} ${"x".repeat(3000)}\n`, stderr: "" };
    const d = await discoverGpus({ run: fakeSmi({ query: failed, list: failed }) });
    expect(d.error).toContain("couldn't communicate with the NVIDIA driver");
    expect(d.error!.length).toBeLessThanOrEqual(1024);
    expect(d.error).toEndWith(": this node reports no GPUs");
    expect(HeartbeatRequest.safeParse({ node: "n1", address: "10.0.0.1", gpus: [], discovery_error: d.error }).success).toBe(true);
  });
});
