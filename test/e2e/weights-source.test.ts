// A catalog model's `source: hf://ORG/NAME` through the compiled binary, against a stand-in Hub
// on 127.0.0.1 (serve --hf-endpoint): a branch or tag is resolved to its commit when the catalog
// is applied, and the commit is what the catalog keeps; a commit is kept as given; a revision
// the Hub does not have refuses the apply naming the model's revision; a malformed source is
// refused at the field; and a token file that cannot be read stops serve with its name.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { run, scratchWithBinary, startServe } from "../helpers/binary";
import { type HubProcess, startHubProcess } from "../helpers/fake-hub";
import { scratchDir } from "../helpers/tmp";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };

describe("source: hf://", () => {
  let hub: HubProcess;
  let main: string;
  let v1: string;
  beforeAll(async () => {
    const root = scratchDir("llmgw-hub-");
    for (const v of ["v1", "v2"]) {
      mkdirSync(join(root, v));
      writeFileSync(join(root, v, "config.json"), JSON.stringify({ v }));
      writeFileSync(join(root, v, "model.safetensors"), `weights of ${v}`);
    }
    hub = await startHubProcess({ repos: [{ repo: "org/tiny", revisions: [{ dir: join(root, "v1"), refs: ["v1.0"] }, { dir: join(root, "v2"), refs: ["main"] }] }] });
    main = await hub.commit("org/tiny", "main");
    v1 = await hub.commit("org/tiny", "v1.0");
  });
  afterAll(() => hub.stop());

  test("a branch or tag is pinned to its commit at apply; an unknown revision or a bad source is refused at its field", async () => {
    const { dir, bin } = scratchWithBinary();
    const serve = await startServe(bin, dir, ["--hf-endpoint", hub.url]);
    try {
      const cli = (...args: string[]) => run(bin, args, { cwd: dir });
      const apply = (models: object[]) => {
        const file = join(dir, `catalog-${Math.random().toString(36).slice(2)}.json`);
        writeFileSync(file, JSON.stringify({ models }));
        return cli("apply", "-f", file);
      };
      const revisionOf = (name: string) => (JSON.parse(cli("models", name, "-o", "json").stdout) as { spec?: { revision?: string }; revision?: string }).spec?.revision;

      const ok = apply([
        { name: "latest", source: "hf://org/tiny", replicas: { min: 0, max: 1 }, profiles: [PROFILE] },
        { name: "tagged", source: "hf://org/tiny", revision: "v1.0", replicas: { min: 0, max: 1 }, profiles: [PROFILE] },
        { name: "pinned", source: "hf://org/tiny", revision: "0123456789abcdef0123456789abcdef01234567", replicas: { min: 0, max: 1 }, profiles: [PROFILE] },
      ]);
      expect(ok.stderr).toBe("");
      expect(ok.code).toBe(0);
      expect(revisionOf("latest")).toBe(main);
      expect(revisionOf("tagged")).toBe(v1);
      expect(revisionOf("pinned")).toBe("0123456789abcdef0123456789abcdef01234567");
      // Applied again unchanged: the same commit, nothing to change.
      const again = apply([{ name: "latest", source: "hf://org/tiny", replicas: { min: 0, max: 1 }, profiles: [PROFILE] }]);
      expect(again.code).toBe(0);
      expect(again.stdout).toContain("unchanged");

      const unknown = apply([{ name: "nope", source: "hf://org/tiny", revision: "no-such-branch", profiles: [PROFILE] }]);
      expect(unknown.code).not.toBe(0);
      expect(unknown.stderr).toContain("revision");
      expect(unknown.stderr).toContain("no-such-branch");
      expect(cli("models", "nope").code).not.toBe(0);

      const bad = apply([{ name: "bad", source: "hf://not a repo", profiles: [PROFILE] }]);
      expect(bad.code).not.toBe(0);
      expect(bad.stderr).toContain("source");
      expect(bad.stderr).toContain("hf://ORG/NAME");
      const branchWithoutHub = apply([{ name: "plain", revision: "main", profiles: [PROFILE] }]);
      expect(branchWithoutHub.code).not.toBe(0);
      expect(branchWithoutHub.stderr).toContain("40-character");
    } finally {
      serve.proc.kill("SIGTERM");
      await serve.proc.exited;
    }
  }, 60_000);

  test("a token file that cannot be read stops serve, naming it", () => {
    const { dir, bin } = scratchWithBinary();
    const r = run(bin, ["serve", "--admin-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--hf-token-file", join(dir, "missing.token")], { cwd: dir });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("hf_token_file");
    expect(r.stderr).toContain("missing.token");
  });
});
