// GPU discovery for the node agent: runs nvidia-smi, parses what it prints and turns it into the
// GpuReport list a heartbeat carries; also builds the simulated inventory behind `--simulate`.
// The parsers are pure and tested on real nvidia-smi captures (test/fixtures/nvidia-smi).

import { hash32 } from "../lib/hash";
import { realScheduler, type Scheduler } from "../lib/scheduler";
import { safeText } from "../lib/text";
import { DISCOVERY_ERROR_MAX, HEARTBEAT_LIMITS, REASON_MAX } from "../protocol/heartbeat";
import type { GpuReport } from "../protocol/heartbeat";

// ───────────────────────────── parsing `nvidia-smi --query-gpu` ─────────────────────────────

/** The fields a headerless `--query-gpu` CSV is assumed to carry, in this order. */
export const QUERY_FIELDS = ["index", "uuid", "name", "memory.total", "mig.mode.current"] as const;

/**
 * What discovery asks for. pstate and temperature.gpu are not used for themselves: they are
 * live readings, and a GPU that needs a reset reports `[GPU requires reset]` there while the
 * cached fields (name, memory.total) still read fine. Pending row remaps and page retirements
 * take effect only after a reset, so a card with one pending is taken out of service.
 */
export const DISCOVERY_FIELDS = [
  ...QUERY_FIELDS,
  "pci.bus_id",
  "pstate",
  "temperature.gpu",
  "remapped_rows.pending",
  "retired_pages.pending",
] as const;

/**
 * Fields an older driver may not know; it rejects the whole query over one of them ("Field … is
 * not a valid field to query"), so discovery asks again without the one it named (pre-450
 * drivers lack mig.mode.current, pre-Ampere ones remapped_rows.*).
 */
const OPTIONAL_FIELDS = new Set(["mig.mode.current", "remapped_rows.pending", "retired_pages.pending"]);

/** One GPU row of `--query-gpu` output, or a GPU nvidia-smi could not open at all. */
export interface QueryGpuRow {
  /** nvidia-smi's index (changes across boots; not the agent's GpuReport index). */
  smiIndex: number | null;
  /** null when not queried or unreadable. */
  uuid: string | null;
  /** Canonical "00000000:0B:00.0" form, when known. */
  busId: string | null;
  /** "" when not queried or unreadable. */
  name: string;
  memoryMiB: number | null;
  /** null when the GPU has no MIG support or the field was not queried. */
  migMode: "enabled" | "disabled" | null;
  healthy: boolean;
  /** Why the GPU is unhealthy, quoting nvidia-smi. */
  problem: string | null;
}

// nvidia-smi substitutes these for a value it failed to read; any of them means the GPU is
// present but broken. "ERR!" is the table's spelling, kept in case a wrapper prints it.
const ERROR_VALUE = /GPU requires reset|GPU is lost|Unknown Error|ERR!|\[Error\]/i;
// …whereas these only mean "no such reading on this card/driver" and say nothing about health
// (the 590 driver answers "[Requested functionality has been deprecated]" on healthy H100s).
const ABSENT_VALUE = /^\[?(?:N\/A|Not Supported|Requested functionality has been deprecated|Insufficient Permissions|Unknown)\]?$/i;
const DEVICE_HANDLE_ERROR =
  /Unable to (?:determine|detect) the device handle for GPU\s*([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*:\s*(.+?)\s*$/;

const FIELD_ALIASES: Record<string, string> = {
  gpu_name: "name",
  gpu_uuid: "uuid",
  gpu_bus_id: "pci.bus_id",
  gpu_serial: "serial",
};
const KNOWN_FIELDS = new Set(["index", "uuid", "name", "memory.total", "mig.mode.current", "pci.bus_id", "serial"]);
const FIELD_NAME = /^[A-Za-z_][\w.]*(?:\s*\[[^\]]*\])?$/;

/** Health readings that are valid values yet mean "take this GPU out of service". */
const HEALTH_FLAGS: Record<string, (v: string) => boolean> = {
  // NVML's recommended recovery action: anything but "None" asks for a reset, reboot or drain.
  gpu_recovery_action: (v) => !/^none$/i.test(v),
  // Pending row remapping/page retirement only takes effect after a reset (gpud treats it so).
  "remapped_rows.pending": (v) => /^yes$/i.test(v),
  "remapped_rows.failure": (v) => /^yes$/i.test(v),
  "retired_pages.pending": (v) => /^yes$/i.test(v),
};

/** What a raised health flag means, for the operator reading the reason. */
const HEALTH_FLAG_MEANING: Record<string, string> = {
  gpu_recovery_action: "the driver asks for this recovery",
  "remapped_rows.pending": "a row remapping waits for a GPU reset",
  "remapped_rows.failure": "row remapping failed: the GPU needs service",
  "retired_pages.pending": "a page retirement waits for a GPU reset",
};

function fieldKey(header: string): string {
  const bare = header.replace(/\s*\[[^\]]*\]\s*$/, "").trim().toLowerCase();
  return FIELD_ALIASES[bare] ?? bare;
}

function isHeader(fields: string[]): boolean {
  // Values such as "Enabled" or "P0" also look like names; a dotted or known name does not.
  return fields.every((f) => FIELD_NAME.test(f)) && fields.some((f) => KNOWN_FIELDS.has(fieldKey(f)) || /\.[a-z]/i.test(f));
}

/** "0000:0B:00.0" and "00000000:0b:00.0" name the same device; keep nvidia-smi's 8-digit domain. */
function canonicalBusId(raw: string): string | null {
  const m = /^([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-9A-Fa-f])$/.exec(raw.trim());
  if (!m) return null;
  return `${m[1]!.padStart(8, "0").slice(-8)}:${m[2]}:${m[3]}.${m[4]}`.toUpperCase();
}

function readable(v: string | undefined): string | null {
  if (v === undefined) return null;
  const t = v.trim();
  if (t === "" || ABSENT_VALUE.test(t) || ERROR_VALUE.test(t)) return null;
  return t;
}

function parseMiB(v: string | undefined): number | null {
  const t = readable(v);
  if (t === null) return null;
  const m = /^(\d+(?:\.\d+)?)\s*(MiB|GiB)?$/i.exec(t);
  if (!m) return null;
  const n = Number(m[1]);
  return Math.round(m[2]?.toLowerCase() === "gib" ? n * 1024 : n);
}

function deviceHandleRow(line: string): QueryGpuRow | null {
  const m = DEVICE_HANDLE_ERROR.exec(line);
  if (!m) return null;
  return {
    smiIndex: null,
    uuid: null,
    busId: canonicalBusId(m[1]!),
    name: "",
    memoryMiB: null,
    migMode: null,
    healthy: false,
    problem: line.trim(),
  };
}

/**
 * Parses `nvidia-smi --query-gpu=… --format=csv[,noheader][,nounits]`. With a header line the
 * columns are found by name (any query works, e.g. the 212-field exporter capture); without one
 * they are `columns`. Lines that are not GPU rows are skipped, except nvidia-smi's "Unable to
 * determine the device handle for GPU …" which stands for a GPU that is there but broken.
 */
export function parseQueryGpuCsv(text: string, columns: readonly string[] = QUERY_FIELDS): QueryGpuRow[] {
  let keys = columns.map(fieldKey);
  const rows: QueryGpuRow[] = [];
  for (const line of text.split(/\r?\n/)) {
    if (line.trim() === "") continue;
    const broken = deviceHandleRow(line);
    if (broken) {
      rows.push(broken);
      continue;
    }
    const fields = line.split(",").map((f) => f.trim());
    if (isHeader(fields)) {
      keys = fields.map(fieldKey);
      continue;
    }
    // nvidia-smi always prints every column, so a count mismatch means this is not a row.
    if (fields.length !== keys.length) continue;
    const get = (key: string): string | undefined => {
      const i = keys.indexOf(key);
      return i < 0 ? undefined : fields[i];
    };
    const rawIndex = get("index")?.trim();
    if (rawIndex !== undefined && !/^\d+$/.test(rawIndex) && !ERROR_VALUE.test(rawIndex)) continue;

    let problem: string | null = null;
    for (let i = 0; i < keys.length && problem === null; i++) {
      const key = keys[i]!;
      const v = fields[i]!;
      const flag = HEALTH_FLAGS[key];
      if (ERROR_VALUE.test(v)) problem = `${key} reads ${v}`;
      else if (flag && !ABSENT_VALUE.test(v) && flag(v)) problem = `${key} is ${v}: ${HEALTH_FLAG_MEANING[key]}`;
    }
    const rawUuid = get("uuid");
    const uuid = readable(rawUuid);
    // A queried uuid that will not read leaves nothing to address the card by.
    if (rawUuid !== undefined && uuid === null && problem === null) problem = `uuid reads ${rawUuid || "nothing"}`;
    const mig = readable(get("mig.mode.current"))?.toLowerCase();
    const busRaw = readable(get("pci.bus_id"));
    rows.push({
      smiIndex: rawIndex !== undefined && /^\d+$/.test(rawIndex) ? Number(rawIndex) : null,
      uuid,
      busId: busRaw === null ? null : canonicalBusId(busRaw),
      name: readable(get("name")) ?? "",
      memoryMiB: parseMiB(get("memory.total")),
      migMode: mig === "enabled" ? "enabled" : mig === "disabled" ? "disabled" : null,
      healthy: problem === null,
      problem,
    });
  }
  return rows;
}

// ───────────────────────────────── parsing `nvidia-smi -L` ─────────────────────────────────

export interface ListedMig {
  /** MIG profile as nvidia-smi names it: "3g.40gb", "1g.10gb+me", "1c.3g.40gb". */
  profile: string;
  /** The MIG device number within its card. */
  device: number;
  uuid: string;
  problem: string | null;
}

export interface ListedGpu {
  smiIndex: number | null;
  name: string;
  uuid: string | null;
  busId: string | null;
  problem: string | null;
  migs: ListedMig[];
}

const LIST_GPU = /^GPU\s+(\d+):\s*(.*?)\s*(?:\(UUID:\s*([^)]*)\))?\s*$/;
const LIST_MIG = /^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)]*)\)/;

/** Parses `nvidia-smi -L`: one line per card, MIG instances indented beneath their card. */
export function parseListGpus(text: string): ListedGpu[] {
  const out: ListedGpu[] = [];
  for (const line of text.split(/\r?\n/)) {
    const broken = deviceHandleRow(line);
    if (broken) {
      out.push({ smiIndex: null, name: "", uuid: null, busId: broken.busId, problem: broken.problem, migs: [] });
      continue;
    }
    const mig = LIST_MIG.exec(line);
    if (mig) {
      const card = out.at(-1);
      if (!card) continue;
      const device = Number(mig[2]);
      const uuid = readable(mig[3]);
      card.migs.push({
        profile: mig[1]!,
        device,
        uuid: uuid ?? `MIG-unknown-${card.uuid ?? card.smiIndex ?? out.length - 1}-${device}`,
        problem: uuid === null ? `MIG device ${device} uuid reads ${mig[3]?.trim() || "nothing"}` : null,
      });
      continue;
    }
    const gpu = LIST_GPU.exec(line);
    if (gpu) {
      const rest = gpu[2]!;
      const uuid = readable(gpu[3]);
      const problem = ERROR_VALUE.test(line) ? line.trim() : uuid === null ? `no readable UUID: ${line.trim()}` : null;
      out.push({
        smiIndex: Number(gpu[1]),
        name: ERROR_VALUE.test(rest) ? "" : rest,
        uuid,
        busId: null,
        problem,
        migs: [],
      });
    }
  }
  return out;
}

// ───────────────────────────── parsing `nvidia-smi -q` (MIG layout) ─────────────────────────────

/** One MIG device of `nvidia-smi -q`: its device number (as in `-L`) and the instances it is. */
export interface MigDeviceInfo {
  device: number;
  /** GPU instance id: compute instances with the same one share its memory. */
  gi: number;
  /** Compute instance id within the GPU instance. */
  ci: number;
}

/**
 * Reads which GPU instance each MIG device belongs to out of `nvidia-smi -q`, per card bus id.
 * `-L` names compute instances ("1c.3g.71gb") but not their GPU instance; only `-q` (its "MIG
 * Device" blocks: Index, GPU Instance ID, Compute Instance ID) tells two 3g.71gb instances apart.
 */
export function parseMigDevices(text: string): Map<string, MigDeviceInfo[]> {
  const out = new Map<string, MigDeviceInfo[]>();
  let card: MigDeviceInfo[] | undefined;
  let cur: Partial<MigDeviceInfo> | undefined;
  const flush = () => {
    if (card && cur && cur.device !== undefined && cur.gi !== undefined && cur.ci !== undefined) card.push(cur as MigDeviceInfo);
    cur = undefined;
  };
  for (const line of text.split(/\r?\n/)) {
    const gpu = /^GPU\s+([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$/.exec(line);
    if (gpu) {
      flush();
      const bus = canonicalBusId(gpu[1]!)!;
      card = out.get(bus) ?? [];
      out.set(bus, card);
      continue;
    }
    if (/^\s+MIG Device\s*$/.test(line)) {
      flush();
      cur = {};
      continue;
    }
    if (!cur) continue;
    const kv = /^\s+(Index|GPU Instance ID|Compute Instance ID)\s*:\s*(\d+)\s*$/.exec(line);
    if (!kv) continue;
    const n = Number(kv[2]);
    if (kv[1] === "Index") cur.device = n;
    else if (kv[1] === "GPU Instance ID") cur.gi = n;
    else cur.ci = n;
  }
  flush();
  return out;
}

/** "2c.3g.71gb" → compute slices 2 and GPU instance profile "3g.71gb"; null for a whole GPU instance. */
function computeInstanceOf(profile: string): { slices: number; gi: string } | null {
  const m = /^(\d+)c\.(.+)$/.exec(profile);
  return m ? { slices: Number(m[1]), gi: m[2]! } : null;
}

/** True when the listing has compute instances, whose GPU instances only `-q` can name. */
export function listsComputeInstances(listing: readonly ListedGpu[]): boolean {
  return listing.some((l) => l.migs.some((m) => computeInstanceOf(m.profile) !== null));
}

// ─────────────────────────────────── class normalisation ───────────────────────────────────

// Brand, form-factor and memory-technology words: they do not change what a replica can run.
const DROPPED_WORDS = new Set([
  "NVIDIA", "GEFORCE", "TESLA", "QUADRO", "GPU", "GENERATION", "EDITION", "SERVER", "WORKSTATION",
  "SXM", "SXM2", "SXM3", "SXM4", "SXM5", "SXM6", "PCIE", "NVL", "NVLINK",
  "HBM", "HBM2", "HBM2E", "HBM3", "HBM3E", "GDDR6", "GDDR6X", "GDDR7",
]);

// Families sold with more than one memory size under one name: the size must be in the class or
// a 40 GB and an 80 GB card would be interchangeable to placement.
const MULTI_SIZE_FAMILIES = new Set([
  "A100", "A800", "H100", "H800", "H200", "H20", "GH200", "B100", "B200", "GB200", "B300", "GB300",
  "V100", "P100", "RTX-2060", "RTX-3060", "RTX-3080", "RTX-4060-TI", "RTX-5060-TI",
]);

// Marketing sizes; MiB totals are a little under them (81559 MiB is an "80GB" H100, 143771 MiB
// a "141GB" H200), so plain rounding would give 80 but 140.
const MARKETED_GB = [4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 128, 141, 144, 180, 186, 192, 288];

function marketedGB(memoryMiB: number): number {
  const gib = memoryMiB / 1024;
  let best = Math.round(gib);
  let bestDist = Infinity;
  for (const size of MARKETED_GB) {
    const dist = Math.abs(size - gib);
    if (dist < bestDist && dist <= size * 0.03) [best, bestDist] = [size, dist];
  }
  return best;
}

/**
 * A stable class name for a card: "NVIDIA H100 80GB HBM3" → "H100-80GB", "NVIDIA GeForce RTX
 * 4080 SUPER" → "RTX-4080-SUPER". Memory is added when the name carries it or the family comes
 * in several sizes; an unreadable name gives "unknown".
 */
export function normaliseClass(name: string, memoryMiB: number | null): string {
  const words = name
    .toUpperCase()
    .split(/[\s\-_/(),]+/)
    .map((w) => w.replace(/[^A-Z0-9.+]/g, ""))
    .filter((w) => w !== "" && !DROPPED_WORDS.has(w));
  let namedGB: string | null = null;
  const core: string[] = [];
  for (const w of words) {
    const gb = /^(\d+)GB$/.exec(w);
    if (gb) namedGB ??= gb[1]!;
    else core.push(w);
  }
  if (core.length === 0) return "unknown";
  const family = core.join("-");
  if (namedGB !== null) return `${family}-${namedGB}GB`;
  if (MULTI_SIZE_FAMILIES.has(family) && memoryMiB !== null && memoryMiB > 0) return `${family}-${marketedGB(memoryMiB)}GB`;
  return family;
}

function classFor(name: string, memoryMiB: number | null, overrides: Record<string, string>): string {
  const normal = normaliseClass(name, memoryMiB);
  return overrides[name.trim()] ?? overrides[normal] ?? normal;
}

/** A family sold in several sizes needs the memory reading for its class ("H100" alone would be invented). */
function classNeedsMemory(name: string): boolean {
  return normaliseClass(name, null) !== normaliseClass(name, 81920);
}

/** "3g.40gb" → 40960; also "1g.10gb+me", "1c.3g.40gb". */
export function migProfileMiB(profile: string): number | null {
  const m = /(\d+)g\.(\d+)gb/i.exec(profile);
  return m ? Number(m[2]) * 1024 : null;
}

// ───────────────────────────────────── building reports ─────────────────────────────────────

/**
 * Joins query rows and the `-L` listing into the devices this node can schedule: MIG cards
 * become their instances (parent = card uuid, class = card class + "/" + profile), other cards
 * themselves; `index` numbers them 0..n-1 in nvidia-smi's order. A GPU we could not read fully
 * is reported unhealthy rather than dropped, so the head node sees it is broken. `warn` hears
 * about each unhealthy or unusable card.
 */
export function buildGpuReports(
  rows: readonly QueryGpuRow[],
  listing: readonly ListedGpu[],
  overrides: Record<string, string> = {},
  warn: (message: string) => void = () => {},
  migLayout: ReadonlyMap<string, readonly MigDeviceInfo[]> = new Map(),
): GpuReport[] {
  const reports: GpuReport[] = [];
  const seenUuids = new Set<string>();
  const unique = (uuid: string): string => {
    const base = clip(uuid, 120);
    let u = base;
    for (let n = 2; seenUuids.has(u); n++) u = `${base}-dup${n}`;
    seenUuids.add(u);
    return u;
  };

  joinCards(rows, listing).forEach(({ row, listed }, ordinal) => {
    const name = row?.name || listed?.name || "";
    const smiIndex = row?.smiIndex ?? listed?.smiIndex ?? null;
    const busId = row?.busId ?? listed?.busId ?? null;
    const key = busId ?? (smiIndex !== null ? String(smiIndex) : `row${ordinal}`);
    const uuid = unique(row?.uuid ?? listed?.uuid ?? `GPU-unknown-${key}`);
    const rowProblem =
      row === undefined
        ? "nvidia-smi --query-gpu gave no row for it (memory and health unknown)"
        : row.healthy && row.problem === null
          ? null
          : (row.problem ?? "reported unhealthy");
    const memoryMiB = row?.memoryMiB ?? null;
    const migs = listed?.migs ?? [];
    const inMig = migs.length > 0 || row?.migMode === "enabled";
    // A class is never made up from a missing reading: "H100" beside "H100-80GB" siblings would
    // look like capacity of its own. A whole card without its memory is not placed at all.
    const noMemory =
      row !== undefined && memoryMiB === null && (!inMig || classNeedsMemory(name)) ? "memory.total not reported" : null;
    let problem = rowProblem ?? listed?.problem ?? noMemory;
    const label = `GPU ${smiIndex ?? "?"}${busId ? ` (${busId})` : ""}${name ? ` ${name}` : ""}`;
    const cardClass = noMemory !== null && classNeedsMemory(name) ? "unknown" : classFor(name, memoryMiB, overrides);
    // What CUDA_VISIBLE_DEVICES means by a number under CUDA_DEVICE_ORDER=PCI_BUS_ID: the card's
    // nvidia-smi index (a MIG instance carries its card's), for engines that take no UUIDs.
    const where = { smi_index: smiIndex, pci_bus_id: busId === null ? null : clip(busId, 32) };
    const push = ({ g, reason }: Device) => {
      const report: GpuReport = { index: reports.length, ...g, ...where };
      if (!g.healthy && reason !== null) report.reason = clip(reason, REASON_MAX);
      reports.push(report);
    };
    if (inMig && migs.length === 0) {
      // Reported rather than dropped: a card that vanished would look like one that was never there.
      problem ??= "MIG mode with no GPU instances";
      warn(`${label} is in MIG mode but lists no MIG instances: it offers nothing to schedule`);
    } else if (problem !== null) warn(`${label} is unhealthy: ${problem}`);
    if (!inMig || migs.length === 0) {
      push({ g: { uuid, name: clip(name, 256), class: clip(cardClass, 128), memory_mib: memoryMiB ?? 0, healthy: problem === null, parent: null }, reason: problem });
      return;
    }
    const layout = busId !== null ? migLayout.get(busId) : undefined;
    for (const d of migDevices({ name, cardClass, uuid, problem, migs }, layout, overrides, unique)) push(d);
  });
  return reports;
}

/** One schedulable device before its place in the list is known, and why it is unhealthy. */
type Device = { g: Omit<GpuReport, "index" | "reason" | "smi_index" | "pci_bus_id">; reason: string | null };

/**
 * Pairs each query row with its `-L` line: by uuid, then by bus id, then by index; a listed GPU
 * no row claimed becomes a card of its own.
 */
function joinCards(rows: readonly QueryGpuRow[], listing: readonly ListedGpu[]): { row: QueryGpuRow | undefined; listed: ListedGpu | undefined }[] {
  const used = new Set<number>();
  const claim = (pred: (l: ListedGpu) => boolean): ListedGpu | undefined => {
    const i = listing.findIndex((l, j) => !used.has(j) && pred(l));
    if (i < 0) return undefined;
    used.add(i);
    return listing[i];
  };
  const cards: { row: QueryGpuRow | undefined; listed: ListedGpu | undefined }[] = rows.map((row) => ({
    row,
    listed:
      (row.uuid !== null ? claim((l) => l.uuid === row.uuid) : undefined) ??
      (row.busId !== null ? claim((l) => l.busId === row.busId) : undefined) ??
      // Index only joins when no uuid contradicts it: indices are per-command, uuids are not.
      (row.smiIndex !== null ? claim((l) => l.smiIndex === row.smiIndex && (l.uuid === null || row.uuid === null)) : undefined),
  }));
  listing.forEach((listed, j) => {
    if (!used.has(j)) cards.push({ row: undefined, listed });
  });
  return cards;
}

/**
 * The MIG instances of one card. Compute instances of one GPU instance share its memory. The
 * largest stands for the GPU instance (its class, so a profile asking for "3g.71gb" gets the
 * whole instance); the others keep their own class and name it as parent, so placement and
 * totals know.
 */
function migDevices(
  card: { name: string; cardClass: string; uuid: string; problem: string | null; migs: readonly ListedMig[] },
  layout: readonly MigDeviceInfo[] | undefined,
  overrides: Record<string, string>,
  unique: (uuid: string) => string,
): Device[] {
  const { name, cardClass, uuid, problem, migs } = card;
  const giOf = (mig: ListedMig, ci: { gi: string }): string => {
    // Drivers before R470 spell the instances out in the uuid: MIG-GPU-<card>/<gi>/<ci>.
    const spelled = /^MIG-GPU-[^/]+\/(\d+)\/\d+$/.exec(mig.uuid);
    if (spelled) return `gi${spelled[1]}`;
    const known = layout?.find((m) => m.device === mig.device);
    // Without -q, every compute instance of one profile on a card counts as one GPU instance:
    // too few slots at worst, never two replicas in one instance's memory.
    return known ? `gi${known.gi}` : `profile ${ci.gi}`;
  };
  const groups = new Map<string, ListedMig[]>();
  for (const mig of migs) {
    const ci = computeInstanceOf(mig.profile);
    if (!ci) continue;
    const key = giOf(mig, ci);
    groups.set(key, [...(groups.get(key) ?? []), mig]);
  }
  const leadOf = new Map<ListedMig, ListedMig>();
  for (const members of groups.values()) {
    let lead = members[0]!;
    for (const m of members) if (computeInstanceOf(m.profile)!.slices > computeInstanceOf(lead.profile)!.slices) lead = m;
    for (const m of members) leadOf.set(m, lead);
  }
  const uuidOf = new Map<ListedMig, string>();
  for (const mig of migs) uuidOf.set(mig, unique(mig.uuid));
  return migs.map((mig) => {
    const ci = computeInstanceOf(mig.profile);
    const lead = leadOf.get(mig);
    const standsForGi = ci !== null && lead === mig;
    const profile = standsForGi ? ci.gi : mig.profile;
    const migClass = `${cardClass}/${profile}`;
    const shares = ci !== null && lead !== undefined && lead !== mig;
    const detail = standsForGi ? ` (compute instance ${mig.profile})` : shares ? ` (shares GPU instance ${ci.gi} memory)` : "";
    return {
      g: {
        uuid: uuidOf.get(mig)!,
        name: clip(`${name || "unknown GPU"} MIG ${profile}${detail}`, 256),
        class: clip(overrides[migClass] ?? migClass, 128),
        memory_mib: migProfileMiB(mig.profile) ?? 0,
        healthy: problem === null && mig.problem === null,
        parent: shares ? uuidOf.get(lead)! : uuid,
      },
      reason: problem ?? mig.problem,
    };
  });
}

/**
 * The heartbeat schema caps these and refuses control characters; an odd driver string must
 * not get the whole heartbeat refused, so it is made printable and cut here.
 */
function clip(raw: string, max: number): string {
  const s = safeText(raw);
  return s.length > max ? s.slice(0, max) : s;
}

// ───────────────────────────────────── running nvidia-smi ─────────────────────────────────────

export interface RunResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}
/** Runs argv and collects its output; rejects (with `code: "ENOENT"` when missing) if it cannot start. */
export type Runner = (argv: string[]) => Promise<RunResult>;

export interface DiscoverOptions {
  nvidiaSmi?: string;
  /** Raw name or normalised class → class to report instead. */
  classOverrides?: Record<string, string>;
  run?: Runner;
  /** nvidia-smi can hang for minutes on a GPU that fell off the bus. */
  timeoutMs?: number;
  /** Times the nvidia-smi timeout; realScheduler unless a test drives time. */
  scheduler?: Scheduler;
}

export interface Discovery {
  gpus: GpuReport[];
  /** Why discovery failed, or why it is incomplete; absent when all went well. */
  error?: string;
  /** Unhealthy or unusable cards, one line each, for the agent's log. */
  warnings: string[];
}

function spawnRunner(timeoutMs: number, scheduler: Scheduler): Runner {
  return async (argv) => {
    const proc = Bun.spawn(argv, { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    let timedOut = false;
    const timer = scheduler.after(timeoutMs, () => {
      timedOut = true;
      proc.kill("SIGKILL");
    });
    try {
      const [stdout, stderr, exitCode] = await Promise.all([
        new Response(proc.stdout).text(),
        new Response(proc.stderr).text(),
        proc.exited,
      ]);
      if (timedOut) throw new Error(`${argv.join(" ")} did not finish within ${Math.round(timeoutMs / 1000)}s`);
      return { exitCode, stdout, stderr };
    } finally {
      timer.cancel();
    }
  };
}

type Attempt = { ok: RunResult } | { failed: string; missing: boolean };

async function attempt(run: Runner, argv: string[]): Promise<Attempt> {
  try {
    return { ok: await run(argv) };
  } catch (e) {
    const err = e as { code?: unknown; message?: unknown };
    return { failed: String(err.message ?? e), missing: err.code === "ENOENT" };
  }
}

/** The line of nvidia-smi's output that best says what went wrong. */
function firstComplaint(r: RunResult): string {
  // A CSV header names fields such as remapped_rows.failure: it is output, not a complaint.
  const lines = `${r.stderr}\n${r.stdout}`
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== "" && !isHeader(l.split(",").map((f) => f.trim())));
  const line = lines.find((l) => /error|fail|unable|not found|no devices|not a valid|couldn't|cannot/i.test(l)) ?? lines[0] ?? "no output";
  return line.length > 300 ? `${line.slice(0, 299)}…` : line;
}

/**
 * Asks nvidia-smi what GPUs this node has. Never throws: a node without nvidia-smi, or whose
 * driver is broken, reports no GPUs and says why in `error`; a partly broken one keeps every GPU
 * it could see and marks the broken ones unhealthy.
 */
export async function discoverGpus(opts: DiscoverOptions = {}): Promise<Discovery> {
  const smi = opts.nvidiaSmi ?? "nvidia-smi";
  const run = opts.run ?? spawnRunner(opts.timeoutMs ?? 30_000, opts.scheduler ?? realScheduler);
  const queryArgv = (fields: readonly string[]) => [smi, `--query-gpu=${fields.join(",")}`, "--format=csv,nounits"];

  let fields: string[] = [...DISCOVERY_FIELDS];
  let [query, list] = await Promise.all([attempt(run, queryArgv(fields)), attempt(run, [smi, "-L"])]);
  if (("missing" in query && query.missing) || ("missing" in list && list.missing)) {
    const where = smi.includes("/") ? `at ${smi}` : smi === "nvidia-smi" ? "on PATH" : `on PATH (looked for "${smi}")`;
    return {
      gpus: [],
      error: `nvidia-smi not found ${where}: this node reports no GPUs (use --simulate for a simulated inventory)`,
      warnings: [],
    };
  }
  // An older driver rejects the whole query over one field it does not know: ask again without
  // the field it names (or, if it names none we can drop, without every optional one).
  for (let tries = 0; tries < OPTIONAL_FIELDS.size && "ok" in query && query.ok.exitCode !== 0; tries++) {
    const text = `${query.ok.stdout}${query.ok.stderr}`;
    if (!/not a valid field/i.test(text)) break;
    const named = /Field "([^"]+)" is not a valid field/i.exec(text)?.[1];
    const next = named !== undefined && OPTIONAL_FIELDS.has(named) ? fields.filter((f) => f !== named) : fields.filter((f) => !OPTIONAL_FIELDS.has(f));
    if (next.length === fields.length) break;
    fields = next;
    query = await attempt(run, queryArgv(fields));
  }

  // Both commands usually fail the same way (driver not loaded); say it once, not twice.
  const failures = new Map<string, string[]>();
  const fail = (what: string, detail: string) => failures.set(detail, [...(failures.get(detail) ?? []), what]);
  const outputOf = (a: Attempt, what: string): string => {
    if ("failed" in a) {
      fail(what, `could not run: ${a.failed}`);
      return "";
    }
    if (a.ok.exitCode !== 0) fail(what, `exited with status ${a.ok.exitCode}: ${firstComplaint(a.ok)}`);
    // Per-GPU "Unable to determine the device handle" lines may land on either stream.
    return `${a.ok.stdout}\n${a.ok.stderr}`;
  };
  const rows = parseQueryGpuCsv(outputOf(query, `${smi} --query-gpu`));
  const listing = parseListGpus(outputOf(list, `${smi} -L`));
  // Only compute instances need it, and -q is slow and long: asked for only then. Failing, the
  // grouping falls back to the conservative one (see buildGpuReports), so it is not an error.
  let migLayout = new Map<string, MigDeviceInfo[]>();
  if (listsComputeInstances(listing)) {
    const q = await attempt(run, [smi, "-q"]);
    if ("ok" in q && q.ok.exitCode === 0) migLayout = parseMigDevices(q.ok.stdout);
  }

  const warnings: string[] = [];
  const gpus = buildGpuReports(rows, listing, opts.classOverrides ?? {}, (w) => warnings.push(w), migLayout);
  if (gpus.length > HEARTBEAT_LIMITS.gpus) {
    fail(smi, `found ${gpus.length} GPUs; a heartbeat carries at most ${HEARTBEAT_LIMITS.gpus}, the rest are left out`);
    gpus.length = HEARTBEAT_LIMITS.gpus;
  }
  const seen = [...failures]
    .map(([detail, whats]) => `${whats.length > 1 ? smi : whats[0]} ${detail}`.replace(/[.\s]+$/, ""))
    .join("; ");
  // The heartbeat bounds the error; the front of it is what says what went wrong.
  const bounded = (why: string, tail: string) => {
    const room = DISCOVERY_ERROR_MAX - tail.length;
    return `${why.length > room ? `${why.slice(0, room - 1)}…` : why}${tail}`;
  };
  if (gpus.length === 0) {
    const why = seen || (warnings.length > 0 ? warnings.join("; ") : `${smi} listed no GPUs`);
    return { gpus, error: bounded(why, ": this node reports no GPUs"), warnings };
  }
  if (seen) {
    const unhealthy = gpus.filter((g) => !g.healthy).length;
    return { gpus, error: bounded(seen, ` (kept the ${gpus.length} GPUs it could list, ${unhealthy} marked unhealthy)`), warnings };
  }
  return { gpus, warnings };
}

// ──────────────────────────────────── simulated inventory ────────────────────────────────────

/** Memory of classes people simulate most, as their real cards report it. */
const SIMULATED_MEMORY_MIB: Record<string, number> = {
  "H100-80GB": 81559,
  "H100-94GB": 95830,
  "H200-141GB": 143771,
  "A100-80GB": 81920,
  "A100-40GB": 40960,
  "B200-180GB": 183359,
  L40S: 46068,
  L40: 46068,
  L4: 23034,
  A10G: 23028,
  A10: 23028,
  T4: 15360,
  "RTX-4090": 24564,
  "RTX-4080-SUPER": 16376,
  "RTX-A6000": 49140,
};

/** A100/H100 cards have 7 compute slices; a profile "Ng.…" takes N of them. */
const MIG_SLICES = 7;

// Simulated uuids must be the same on every run; the murmur finaliser keeps "node/gpu/1" and
// "node/gpu/2" from giving look-alike uuids.
function fakeUuid(key: string): string {
  const hex = [0, 1, 2, 3].map((seed) => hash32(key, Math.imul(seed, 0x9e3779b9)).toString(16).padStart(8, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

function simulatedMemory(cls: string, part: string): number {
  const known = SIMULATED_MEMORY_MIB[cls];
  if (known !== undefined) return known;
  const gb = /(?:^|-)(\d+)GB(?:-|$)/i.exec(cls);
  if (gb) return Number(gb[1]) * 1024;
  throw new Error(
    `bad --simulate part "${part}": unknown GPU class "${cls}"; put its memory in the name (e.g. "${cls}-48GB") ` +
      `or use one of ${Object.keys(SIMULATED_MEMORY_MIB).join(", ")}`,
  );
}

/**
 * A made-up inventory for `--simulate`, e.g. "H100-80GB:4,A100-80GB/3g.40gb:2,L40S:2": each part
 * is class:count, and a class with "/" counts MIG instances, packed onto synthetic parent cards
 * as densely as real MIG allows. uuids derive from `node`, so restarts report the same devices.
 * Throws on a bad spec, naming the bad part.
 */
export function simulatedGpus(spec: string, unhealthyIndices: Iterable<number> = [], node = "sim"): GpuReport[] {
  const parts = spec.split(",").map((p) => p.trim());
  if (spec.trim() === "") throw new Error(`--simulate spec is empty; expected e.g. "H100-80GB:8"`);
  const gpus: GpuReport[] = [];
  let card = 0;
  for (const part of parts) {
    const m = /^([^:\s]+):(\S+)$/.exec(part);
    if (!m) throw new Error(`bad --simulate part "${part}": expected class:count, e.g. "H100-80GB:8"`);
    const cls = m[1]!;
    const countText = m[2]!;
    if (!/^\d+$/.test(countText) || Number(countText) < 1)
      throw new Error(`bad --simulate part "${part}": count "${countText}" is not a whole number of at least 1`);
    const count = Number(countText);
    if (gpus.length + count > HEARTBEAT_LIMITS.gpus)
      throw new Error(`bad --simulate part "${part}": more than ${HEARTBEAT_LIMITS.gpus} GPUs on one node`);
    const [cardClass, profile, ...extra] = cls.split("/");
    if (!/^[A-Za-z0-9][A-Za-z0-9._+-]*$/.test(cardClass!) || extra.length > 0)
      throw new Error(`bad --simulate part "${part}": "${cls}" is not a GPU class (letters, digits, . _ + -; one "/" for MIG)`);

    if (profile === undefined) {
      const memory = simulatedMemory(cls, part);
      for (let i = 0; i < count; i++, card++) {
        gpus.push({
          index: gpus.length,
          uuid: `GPU-${fakeUuid(`${node}/gpu/${card}`)}`,
          name: `simulated ${cls}`,
          class: cls,
          memory_mib: memory,
          healthy: true,
          parent: null,
        });
      }
      continue;
    }
    const pm = /^(?:\d+c\.)?(\d+)g\.(\d+)gb(?:[+-][a-z]+)?$/.exec(profile);
    if (!pm || Number(pm[1]) < 1 || Number(pm[1]) > MIG_SLICES)
      throw new Error(`bad --simulate part "${part}": "${profile}" is not a MIG profile like 3g.40gb or 1g.10gb`);
    const perCard = Math.floor(MIG_SLICES / Number(pm[1]));
    for (let i = 0; i < count; i++) {
      if (i > 0 && i % perCard === 0) card++;
      const parent = `GPU-${fakeUuid(`${node}/gpu/${card}`)}`;
      gpus.push({
        index: gpus.length,
        uuid: `MIG-${fakeUuid(`${node}/gpu/${card}/mig/${i % perCard}`)}`,
        name: `simulated ${cardClass} MIG ${profile}`,
        class: cls,
        memory_mib: Number(pm[2]) * 1024,
        healthy: true,
        parent,
      });
    }
    card++;
  }
  for (const i of unhealthyIndices) {
    const gpu = Number.isInteger(i) ? gpus[i] : undefined;
    if (!gpu) throw new Error(`unhealthy GPU index ${i} is not in the simulated inventory (indices 0..${gpus.length - 1})`);
    gpu.healthy = false;
    gpu.reason = "simulated as unhealthy (--simulate-unhealthy)";
  }
  return gpus;
}
