import { describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, readlinkSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { LocalWeightsFinder, sha256File } from "../../src/agent/weights-local";
import { scanHeld } from "../../src/agent/weights-disk";
import { LocalManifests, withLocal } from "../../src/control/local-weights";
import { weightsStanding } from "../../src/control/weights-placement";
import { sha256hex } from "../../src/lib/digest";
import { ManualScheduler } from "../../src/lib/scheduler";
import { LocalWeights, fileSourceRepo, localRevision, sourceProblem, type WeightsManifest } from "../../src/protocol/weights";
import { scratchDir } from "../helpers/tmp";

const silent = pino({ level: "silent" });
const file = (path: string, body: string) => ({ path, size: body.length, sha256: sha256hex(body), oid: sha256hex(body).slice(0, 40) });

describe("file:// sources in the protocol", () => {
  test("a source's repository is a valid Hub-style name, the same for the same path and apart for two folders of one name", () => {
    const a = fileSourceRepo("/srv/models/Llama 3.1 (8B)");
    expect(a).toMatch(/^llmgw-file\/Llama-3\.1-8B-[0-9a-f]{12}$/);
    expect(sourceProblem(`hf://${a}`)).toBeUndefined();
    expect(fileSourceRepo("/srv/models/Llama 3.1 (8B)/")).not.toBe(fileSourceRepo("/other/Llama 3.1 (8B)"));
    expect(sourceProblem(`hf://${fileSourceRepo("/")}`)).toBeUndefined();
  });

  test("a listing's revision does not depend on the order it is listed in, and changes with any byte", () => {
    const one = [file("b.json", "{}"), file("a.safetensors", "xx")];
    expect(localRevision(one)).toBe(localRevision([...one].reverse()));
    expect(localRevision(one)).toMatch(/^[0-9a-f]{40}$/);
    expect(localRevision([file("b.json", "{}"), file("a.safetensors", "xy")])).not.toBe(localRevision(one));
  });

  test("a report is checked at the edge: a source that is not file:///PATH is refused", () => {
    expect(LocalWeights.safeParse({ source: "hf://org/x", revision: "a".repeat(40), files: [] }).success).toBe(false);
    expect(LocalWeights.safeParse({ source: "file:///a/../b", revision: "a".repeat(40), files: [] }).success).toBe(false);
    expect(LocalWeights.safeParse({ source: "file:///srv/m", revision: "a".repeat(40), files: [file("c.json", "{}")] }).success).toBe(true);
  });
});

describe("LocalManifests (head node)", () => {
  test("the first node's report makes the manifest; a later one of the same source changes nothing; the Hub is never asked for such a repository", () => {
    let changed = 0;
    const local = new LocalManifests({ log: silent, changed: () => void changed++ });
    const files = [file("config.json", "{}")];
    const rev = localRevision(files);
    local.note({ node: "n1", local_weights: [{ source: "file:///srv/m", revision: rev, files }] });
    local.note({ node: "n2", local_weights: [{ source: "file:///srv/m", revision: "b".repeat(40), files: [] }] });
    const repo = fileSourceRepo("/srv/m");
    expect(local.revisionOf("file:///srv/m")).toBe(rev);
    expect(local.foundOn("file:///srv/m")).toBe("n1");
    expect(local.get(repo, rev)).toEqual({ repo, revision: rev, files });
    expect(local.version()).toBe(1);
    expect(changed).toBe(1);
    const asked: string[] = [];
    const hub = {
      get: (r: string, _v: string): WeightsManifest | undefined => void asked.push(r) as undefined,
      known: (r: string, _v: string): WeightsManifest | undefined => void asked.push(r) as undefined,
      needsToken: (_r: string, _v: string) => true,
    };
    const both = withLocal(hub, local);
    expect(both.get(repo, rev)?.files).toEqual(files);
    expect(both.get(fileSourceRepo("/unknown"), rev)).toBeUndefined();
    expect(both.needsToken(repo, rev)).toBe(false);
    both.get("org/x", rev);
    expect(asked).toEqual(["org/x"]);
  });

  test("placement: a source no node reported passes every node over, naming the path; once reported, holders rank first", () => {
    const node = (name: string, held: string[] = []) => ({ name, fabrics: ["f1"], peerUrl: `http://${name}:1`, credentialSha256: "", held: held.length > 0 ? [{ repo: fileSourceRepo("/srv/m"), revision: "c".repeat(40), files: held, bytes: 2, fetched: false, last_used: null }] : [], transfers: [], disk: undefined });
    const models = [{ name: "m", spec: { source: "file:///srv/m" } }];
    const none = weightsStanding(models, [node("a"), node("b")], () => undefined, () => new Set(), () => undefined);
    expect(none.get("a")?.get("m")).toMatchObject({ rank: 0, noRoom: "no node holds file:///srv/m (no agent found the directory)" });
    const m: WeightsManifest = { repo: fileSourceRepo("/srv/m"), revision: "c".repeat(40), files: [file("config.json", "{}")] };
    const found = weightsStanding(models, [node("a", ["config.json"]), node("b")], () => m, () => new Set(), () => ({ repo: m.repo, revision: m.revision }));
    expect(found.get("a")?.get("m")?.rank).toBe(2);
    expect(found.get("b")?.get("m")).toMatchObject({ rank: 1, local: true });
  });
});

describe("LocalWeightsFinder (agent)", () => {
  test("a source found is hashed, linked into the models directory's cache layout (hard links) and reported; hashes are kept for the next start", async () => {
    const dir = scratchDir("llmgw-localw-");
    const placed = join(dir, "placed", "m");
    mkdirSync(join(placed, "sub"), { recursive: true });
    writeFileSync(join(placed, "config.json"), "{}");
    writeFileSync(join(placed, "sub", "w.safetensors"), "weights!");
    writeFileSync(join(placed, ".git"), "skip");
    const models = join(dir, "models");
    const state = join(dir, "state");
    mkdirSync(models);
    mkdirSync(state);
    let changes = 0;
    const make = () => new LocalWeightsFinder({ modelsDir: models, stateDir: state, scheduler: new ManualScheduler(), log: silent, intervalMs: 30_000, onChange: () => void changes++ });
    const f = make();
    f.apply([`file://${placed}`, "file:///not/here"]);
    await f.refresh();
    const report = f.report().local_weights!;
    expect(report).toHaveLength(1);
    expect(report[0]!.files.map((x) => [x.path, x.size, x.sha256])).toEqual([
      ["config.json", 2, sha256hex("{}")],
      ["sub/w.safetensors", 8, sha256hex("weights!")],
    ]);
    expect(report[0]!.revision).toBe(localRevision(report[0]!.files));
    expect(changes).toBe(1);
    const repo = fileSourceRepo(placed);
    expect(f.placedHere(repo, report[0]!.revision)).toBe(true);
    // The cache layout's scan holds it whole, as an operator's (never evicted).
    const held = await scanHeld(models);
    expect(held.map((h) => [h.repo, h.revision, h.files.map((x) => x.path), h.fetched])).toEqual([[repo, report[0]!.revision, ["config.json", "sub/w.safetensors"], false]]);
    const snap = join(models, `models--${repo.replace("/", "--")}`, "snapshots", report[0]!.revision);
    expect(readlinkSync(join(snap, "config.json"))).toStartWith("../");
    expect(readFileSync(join(snap, "sub", "w.safetensors"), "utf8")).toBe("weights!");
    expect(await sha256File(join(placed, "sub", "w.safetensors"))).toBe(sha256hex("weights!"));
    expect(existsSync(join(state, "local-weights.json"))).toBe(true);
    const kept = JSON.parse(readFileSync(join(state, "local-weights.json"), "utf8")) as Record<string, string>;
    expect(Object.values(kept).sort()).toEqual([sha256hex("{}"), sha256hex("weights!")].sort());
    // Dropped from the head node's list: no longer reported.
    f.apply([]);
    expect(f.report()).toEqual({});
  });
});
