// `llmgw apply -f FILE` through the compiled binary: a file with problems is refused whole, each
// problem on its own line as FILE:LINE:COL: PATH: MESSAGE (a model by its name, a misspelt key
// with the nearest known one), all of them at once; a syntax error at its line and column; and
// nothing changes on the server.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { run, scratchWithBinary, startServe } from "../helpers/binary";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  serve = await startServe(bin, dir);
});
afterAll(async () => {
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
  rmSync(dir, { recursive: true, force: true });
});

const models = () => {
  const r = run(bin, ["models", "-o", "json"], { cwd: dir });
  expect(r.code).toBe(0);
  return (JSON.parse(r.stdout) as { name: string; desired: number }[]).map((m) => `${m.name}:${m.desired}`).sort();
};

const GOOD = `models:
  - name: llama-3.1-8b
    aliases: [llama3-8b]
    profiles:
      - {name: h100, engine: vllm, gpu_class: H100-80GB}
`;

describe("apply: catalog errors speak of the file", () => {
  test("every problem of a YAML file, one per line with its line and column, by model name; nothing changes", () => {
    writeFileSync(join(dir, "catalog.yaml"), GOOD);
    expect(run(bin, ["apply", "-f", "catalog.yaml"], { cwd: dir }).code).toBe(0);
    const before = models();
    expect(before).toEqual(["llama-3.1-8b:1"]);

    writeFileSync(
      join(dir, "bad.yaml"),
      [
        "models:",
        "  - name: llama-3.1-8b",
        "    aliases: [llama3-8b]",
        "    idle_timout: 5m",
        "    replicas: {min: 3, max: 1}",
        "    profiles:",
        "      - name: h100",
        "        engine: vllm",
        "        gpu_class: H100-80GB",
        "        gpus: 0",
        "  - name: qwen2.5-7b",
        "    aliases: [llama3-8b]",
        "    profiles:",
        "      - {name: p, engine: tgi, gpu_class: L40S}",
        "",
      ].join("\n"),
    );
    const r = run(bin, ["apply", "-f", "bad.yaml"], { cwd: dir });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr.split("\n")).toEqual([
      "error: bad.yaml: 5 problems; nothing was applied",
      "bad.yaml:4:5: models[llama-3.1-8b].idle_timout: unknown key; did you mean idle_timeout?",
      "bad.yaml:5:24: models[llama-3.1-8b].replicas.max: max (1) is below min (3)",
      "bad.yaml:10:9: models[llama-3.1-8b].profiles[0].gpus: Too small: expected number to be >=1",
      'bad.yaml:12:15: models[qwen2.5-7b].aliases[0]: "llama3-8b" is already used by model "llama-3.1-8b"',
      'bad.yaml:14:19: models[qwen2.5-7b].profiles[0].engine: Invalid option: expected one of "vllm"|"sglang"|"llama.cpp"|"fake"',
      "",
    ]);
    expect(models()).toEqual(before);
  });

  test("an env that would load code into the engine, or set what llmgw sets, is refused naming the model, profile and variable; the API refuses it too", async () => {
    writeFileSync(
      join(dir, "env.yaml"),
      [
        "models:",
        "  - name: llama-3.1-8b",
        "    profiles:",
        "      - name: h100",
        "        engine: vllm",
        "        gpu_class: H100-80GB",
        "        env: {HF_TOKEN: hf_x, LD_PRELOAD: /tmp/evil.so, PATH: /tmp/bin, BASH_ENV: /tmp/rc}",
        "      - name: l40s",
        "        engine: vllm",
        "        gpu_class: L40S",
        "        env: {PYTHONPATH: /tmp/py, CUDA_VISIBLE_DEVICES: '0', NODE_OPTIONS: --require=/tmp/x.js}",
        "",
      ].join("\n"),
    );
    const r = run(bin, ["apply", "-f", "env.yaml"], { cwd: dir });
    expect(r.code).toBe(1);
    const lines = r.stderr.trimEnd().split("\n");
    expect(lines[0]).toBe("error: env.yaml: 6 problems; nothing was applied");
    const at = lines.slice(1).map((l) => /^env\.yaml:\d+:\d+: (\S+): (\S+) is refused: /.exec(l)?.slice(1));
    expect(at).toEqual([
      ["models[llama-3.1-8b].profiles[0].env.LD_PRELOAD", "LD_PRELOAD"],
      ["models[llama-3.1-8b].profiles[0].env.PATH", "PATH"],
      ["models[llama-3.1-8b].profiles[0].env.BASH_ENV", "BASH_ENV"],
      ["models[llama-3.1-8b].profiles[1].env.PYTHONPATH", "PYTHONPATH"],
      ["models[llama-3.1-8b].profiles[1].env.CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"],
      ["models[llama-3.1-8b].profiles[1].env.NODE_OPTIONS", "NODE_OPTIONS"],
    ]);
    expect(r.stderr).toContain("sets it in its agent's own environment");
    expect(r.stderr).not.toContain("hf_x");

    // The server's own check, whatever client sent it.
    const { adminUrl, adminToken } = serve;
    const put = await fetch(`${adminUrl}/api/v1/models/env-test`, {
      method: "PUT",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "env-test", profiles: [{ name: "p", engine: "vllm", gpu_class: "H100-80GB", env: { LD_LIBRARY_PATH: "/tmp/lib" } }] }),
    });
    expect(put.status).toBe(400);
    const body = (await put.json()) as { error: { message: string; issues?: { path: string; message: string }[] } };
    expect(JSON.stringify(body.error)).toContain("LD_LIBRARY_PATH is refused: the dynamic loader reads it");
    expect(models()).toEqual(["llama-3.1-8b:1"]);
  });

  test("a conflict with the stored catalog is listed beside the file's own problems", () => {
    writeFileSync(join(dir, "steal.json"), JSON.stringify({ models: [{ name: "thief", aliases: ["llama3-8b"], profiles: [{ name: "p", engine: "vllm", gpu_class: "H100-80GB" }] }, { name: "other", weight: -1, profiles: [{ name: "p", engine: "vllm", gpu_class: "X" }] }] }, null, 2));
    const r = run(bin, ["apply", "-f", "steal.json"], { cwd: dir });
    expect(r.code).toBe(1);
    const lines = r.stderr.trimEnd().split("\n");
    expect(lines[0]).toBe("error: steal.json: 2 problems; nothing was applied");
    expect(lines.slice(1)).toEqual([
      'steal.json:6:9: models[thief].aliases[0]: alias "llama3-8b" of model "thief" is already an alias of model "llama-3.1-8b"',
      "steal.json:18:7: models[other].weight: Too small: expected number to be >0",
    ]);
    expect(models()).toEqual(["llama-3.1-8b:1"]);
  });

  test("YAML and JSON syntax errors are given at their line and column; nothing is sent", () => {
    writeFileSync(join(dir, "broken.yaml"), "models:\n  - name: x\n    profiles:\n      - name: p\n       engine: vllm\n");
    const y = run(bin, ["apply", "-f", "broken.yaml"], { cwd: dir });
    expect(y.code).toBe(1);
    expect(y.stderr).toBe(["error: broken.yaml:5:8: not valid YAML at line 5, column 8: Unexpected token", "  5 |        engine: vllm", "    |        ^", ""].join("\n"));
    writeFileSync(join(dir, "broken.json"), '{\n  "models": [\n    {"name": "a",}\n  ]\n}\n');
    const j = run(bin, ["apply", "-f", "broken.json"], { cwd: dir });
    expect(j.code).toBe(1);
    expect(j.stderr).toBe(['error: broken.json:3:18: not valid JSON at line 3, column 18: expected a quoted key', '  3 |     {"name": "a",}', "    |                  ^", ""].join("\n"));
    writeFileSync(join(dir, "empty.yaml"), "# nothing yet\n");
    const e = run(bin, ["apply", "-f", "empty.yaml"], { cwd: dir });
    expect(e.code).toBe(1);
    expect(e.stderr).toBe("error: empty.yaml: the file is empty; a catalog is a mapping with a models list (models: [...])\n");
    expect(models()).toEqual(["llama-3.1-8b:1"]);
  });

  test("a key named twice in one mapping (the parsers would keep the last silently) is an error at both places; nothing is sent", () => {
    writeFileSync(
      join(dir, "twice.yaml"),
      "models:\n  - name: llama-3.1-8b\n    replicas: {min: 1, min: 3}\n    profiles:\n      - name: h100\n        engine: vllm\n        gpu_class: H100-80GB\n        engine: sglang\n  - name: other\n    profiles: [{name: p, engine: vllm, gpu_class: H100-80GB}]\n",
    );
    const y = run(bin, ["apply", "-f", "twice.yaml"], { cwd: dir });
    expect(y.code).toBe(1);
    expect(y.stderr).toBe(
      [
        "error: twice.yaml: 2 problems; nothing was applied",
        'twice.yaml:3:24: models[llama-3.1-8b].replicas.min: duplicate key "min" (first at line 3, column 16); name each key once: only the last would count',
        'twice.yaml:8:9: models[llama-3.1-8b].profiles[0].engine: duplicate key "engine" (first at line 6, column 9); name each key once: only the last would count',
        "",
      ].join("\n"),
    );
    writeFileSync(join(dir, "twice.json"), '{"models": [{"name": "a", "name": "b", "profiles": []}]}\n');
    const j = run(bin, ["apply", "-f", "twice.json", "--dry-run"], { cwd: dir });
    expect(j.code).toBe(1);
    expect(j.stderr).toContain('twice.json:1:27: models[0].name: duplicate key "name" (first at line 1, column 14)');
    // The same keys in different items, or at different depths, are no duplicates.
    writeFileSync(join(dir, "fine.yaml"), `${GOOD}  - name: other\n    profiles:\n      - {name: h100, engine: vllm, gpu_class: H100-80GB}\n      - {name: l40s, engine: vllm, gpu_class: L40S}\n`);
    expect(run(bin, ["apply", "-f", "fine.yaml", "--dry-run"], { cwd: dir }).code).toBe(0);
    expect(models()).toEqual(["llama-3.1-8b:1"]);
  });

  test("control characters in a file's keys never reach the terminal", () => {
    writeFileSync(join(dir, "hostile.yaml"), 'models:\n  - name: m\n    "evil\\u001b[2Jkey": 1\n    profiles:\n      - {name: p, engine: vllm, gpu_class: "H\\u001b]0;pwned\\u0007"}\n');
    const r = run(bin, ["apply", "-f", "hostile.yaml"], { cwd: dir });
    expect(r.code).toBe(1);
    expect(r.stderr).not.toContain("\x1b");
    expect(r.stderr).not.toContain("\x07");
    expect(r.stderr).toContain('hostile.yaml:3:5: models[m]["evil\\u001b[2Jkey"]: unknown key (expected one of: name, aliases,');
    expect(r.stderr).toContain("hostile.yaml:5:33: models[m].profiles[0].gpu_class: must be printable text");
    expect(models()).toEqual(["llama-3.1-8b:1"]);
  });
});
