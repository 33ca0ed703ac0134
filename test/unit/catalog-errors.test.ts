// Catalog errors that speak of the file: every problem of a body in one pass, paths by model
// name, a "did you mean" for a misspelt key; and on the CLI side, a YAML or JSON file's syntax
// errors and the server's paths mapped back to line and column.

import { describe, expect, test } from "bun:test";
import { CatalogFile, ModelSpec, catalogPath, checkCatalogFile, knownKeys, zodIssues } from "../../src/protocol/catalog";
import { pathSegments, positionOf, scanPositions, syntaxError } from "../../src/cli/catalog-file";
import { problemLines } from "../../src/cli/apply";

const P = [{ name: "p", engine: "vllm", gpu_class: "H100-80GB" }];
const lines = (body: unknown) => checkCatalogFile(body).issues.map((i) => `${catalogPath(i.path, (body as { models?: unknown }).models)}: ${i.message}`);

describe("paths by model name", () => {
  const models = [{ name: "llama-3.1-8b" }, { name: "bad name" }, { name: "twin" }, { name: "twin" }, 7];
  test("a model by its name; by index when it has no valid name or shares it", () => {
    expect(catalogPath(["models", 0, "profiles", 0, "gpu_class"], models)).toBe("models[llama-3.1-8b].profiles[0].gpu_class");
    expect(catalogPath(["models", 1, "name"], models)).toBe("models[1].name");
    expect(catalogPath(["models", 3, "name"], models)).toBe("models[3].name");
    expect(catalogPath(["models", 4], models)).toBe("models[4]");
    expect(catalogPath(["models", 9, "x"])).toBe("models[9].x");
  });
  test("keys that are not plain words are quoted; the whole body is (body)", () => {
    expect(catalogPath(["profiles", 0, "env", "bad name"])).toBe('profiles[0].env["bad name"]');
    expect(catalogPath(["profiles", 0, "env", 'a"]b'])).toBe('profiles[0].env["a\\"]b"]');
    expect(catalogPath([])).toBe("(body)");
  });
});

describe("ports an engine would bind outside its block", () => {
  test("SGLang with DP attention and more ranks than its block holds: named at the profile's args, with the limit and why", () => {
    const body = { models: [{ name: "deepseek", profiles: [{ name: "p", engine: "sglang", gpu_class: "H200-141GB", gpus: 8, args: ["--enable-dp-attention", "--dp-size", "16"] }] }] };
    expect(lines(body)).toEqual([
      "models[deepseek].profiles[0].args: SGLang with --enable-dp-attention and --dp-size 16 binds its dist-init port, the 5 after it and one port per DP rank after those (PortArgs.init_new); llmgw keeps 16 ports per replica for them, so --dp-size may be at most 10",
    ]);
  });
});

describe("did you mean", () => {
  test("an unknown key is named at its own path with the nearest known key, at every depth", () => {
    expect(
      lines({
        modles: [],
        models: [{ name: "m", idle_timout: "5m", replicas: { mni: 1 }, profiles: [{ ...P[0], gpu_clas: "X", engnie: "vllm" }] }],
      }),
    ).toEqual([
      "modles: unknown key; did you mean models?",
      "models[m].replicas.mni: unknown key; did you mean min?",
      "models[m].profiles[0].gpu_clas: unknown key; did you mean gpu_class?",
      "models[m].profiles[0].engnie: unknown key; did you mean engine?",
      "models[m].idle_timout: unknown key; did you mean idle_timeout?",
    ]);
  });
  test("a misspelt choice gets the nearest one; a far one only the list", () => {
    expect(lines({ models: [{ name: "m", placement: "sprad", profiles: [{ ...P[0], engine: "vlm" }, { ...P[0], name: "q", engine: "tgi" }] }] })).toEqual([
      'models[m].placement: Invalid option: expected one of "binpack"|"spread"; did you mean spread?',
      'models[m].profiles[0].engine: Invalid option: expected one of "vllm"|"sglang"|"llama.cpp"|"fake"; did you mean vllm?',
      'models[m].profiles[1].engine: Invalid option: expected one of "vllm"|"sglang"|"llama.cpp"|"fake"',
    ]);
  });
  test("a key near nothing lists the keys known there", () => {
    expect(lines({ models: [{ name: "m", profiles: P, frobnicate: 1 }] })).toEqual([
      "models[m].frobnicate: unknown key (expected one of: name, aliases, replicas, on_demand, idle_timeout, pool, weight, placement, source, revision, target_inflight, profiles)",
    ]);
  });
  test("knownKeys walks arrays, defaults and the transform of a model", () => {
    expect(knownKeys(CatalogFile, ["models", 3, "replicas"])).toEqual(["min", "max"]);
    expect(knownKeys(ModelSpec, ["profiles", 0])).toContain("start_timeout");
    expect(knownKeys(ModelSpec, ["name"])).toEqual([]);
    const r = ModelSpec.safeParse({ name: "a", profiles: P, weigth: 2 });
    expect(zodIssues(r.error!.issues, ModelSpec)).toEqual([{ path: ["weigth"], message: "unknown key; did you mean weight?" }]);
  });
});

describe("every problem in one pass", () => {
  test("schema, cross-field and alias problems of several models, each model judged even when another is wrong", () => {
    const body = {
      models: [
        { name: "a", aliases: 5, profiles: P },
        { name: "b", aliases: ["x"], replicas: { min: 3, max: 1 }, profiles: [P[0], P[0]] },
        { name: "c", aliases: ["x", "a"], profiles: [{ ...P[0], engine: "tgi" }] },
        { name: "b", profiles: P },
      ],
    };
    expect(lines(body)).toEqual([
      "models[a].aliases: Invalid input: expected array, received number",
      "models[1].replicas.max: max (1) is below min (3)",
      'models[1].profiles[1].name: duplicate profile name "p"',
      'models[c].profiles[0].engine: Invalid option: expected one of "vllm"|"sglang"|"llama.cpp"|"fake"',
      'models[c].aliases[0]: "x" is already used by model "b"',
      'models[c].aliases[1]: "a" is already used by model "a"',
      'models[3].name: model "b" appears twice',
    ]);
    const r = checkCatalogFile(body);
    expect(r.file).toBeUndefined();
    // Models valid on their own are kept by index, for the checks against the stored catalog.
    expect(r.specs.map((s) => s?.name)).toEqual([undefined, undefined, undefined, "b"]);
  });
  test("a good file parses as CatalogFile does", () => {
    const body = { models: [{ name: "a", profiles: P }] };
    expect(checkCatalogFile(body)).toEqual({ file: CatalogFile.parse(body), specs: [ModelSpec.parse(body.models[0])], issues: [] });
  });
  test("a body that is not a catalog says so once", () => {
    expect(lines({ models: "all" } as unknown)).toEqual(["models: Invalid input: expected array, received string"]);
    expect(checkCatalogFile([]).issues).toHaveLength(1);
  });
});

const YAML = `# a catalog
models:
  - name: llama-3.1-8b
    aliases: [llama3, "l8"]
    idle_timout: 5m
    replicas: {min: 3, max: 1}
    profiles:
      - name: h100
        engine: vllm
        gpu_class: H100-80GB
        args: |
          --not: a key
        env: {"bad name": x}
      - {name: h100, engine: tgi, gpu_class: X}
  - name: qwen
    profiles:
    - name: p
      gpu_class: X
`;

describe("positions in the file", () => {
  const data = Bun.YAML.parse(YAML);
  const pos = scanPositions(YAML, "yaml");
  const at = (path: string) => {
    const segs = pathSegments(path, data);
    const p = segs && positionOf(pos, segs);
    return p && `${p.line}:${p.col}`;
  };
  test("YAML: block keys, sequence items, flow collections, block scalars skipped", () => {
    expect(at("models[llama-3.1-8b].idle_timout")).toBe("5:5");
    expect(at("models[llama-3.1-8b].aliases[1]")).toBe("4:23");
    expect(at("models[llama-3.1-8b].replicas.max")).toBe("6:24");
    expect(at('models[llama-3.1-8b].profiles[0].env["bad name"]')).toBe("13:15");
    expect(at("models[llama-3.1-8b].profiles[1].engine")).toBe("14:22");
    expect(at("models[qwen].profiles[0].gpu_class")).toBe("18:7");
    // A key the file lacks: where its object starts; a model by index too.
    expect(at("models[1].profiles[0].engine")).toBe("17:5");
    expect(pos.has(JSON.stringify(["models", 0, "profiles", 0, "args", "--not"]))).toBe(false);
    expect(at("models[nobody].name")).toBeUndefined();
  });
  test("JSON", () => {
    const text = JSON.stringify({ models: [{ name: "a", profiles: [{ name: "p", gpus: 0 }] }] }, null, 2);
    const p = positionOf(scanPositions(text, "json"), pathSegments("models[a].profiles[0].gpus", JSON.parse(text))!);
    expect(p).toEqual({ line: 8, col: 11 });
  });
  test("problem lines: FILE:LINE:COL, in the file's order, no control character", () => {
    const out = problemLines({ name: "c.yaml", text: YAML, kind: "yaml", data }, [
      { path: "models[qwen].profiles[0].engine", message: "Required" },
      { path: "models[llama-3.1-8b].idle_timout", message: "unknown key; did you mean idle_timeout?" },
      { path: "(body)", message: "bad \u001b[2J thing" },
    ]);
    expect(out).toEqual([
      "c.yaml:5:5: models[llama-3.1-8b].idle_timout: unknown key; did you mean idle_timeout?",
      "c.yaml:17:5: models[qwen].profiles[0].engine: Required",
      "c.yaml: (body): bad \\x1b[2J thing",
    ]);
  });
});

describe("syntax errors with line and column", () => {
  const yaml = (t: string) => {
    try {
      Bun.YAML.parse(t);
    } catch (e) {
      const r = syntaxError(t, "yaml", (e as Error).message);
      return `${r.pos?.line}:${r.pos?.col} ${r.message}`;
    }
    return "parsed";
  };
  const json = (t: string) => {
    try {
      JSON.parse(t);
    } catch (e) {
      const r = syntaxError(t, "json", (e as Error).message);
      return `${r.pos?.line}:${r.pos?.col} ${r.message}`;
    }
    return "parsed";
  };
  test("YAML", () => {
    expect(yaml("a: 1\nb: value: other\n")).toBe("2:9 Unexpected token");
    expect(yaml("models:\n  - name: x\n\n    # note\n   bad\n")).toBe("5:4 Unexpected token");
    expect(yaml("a:\n\t- x\n")).toBe("2:1 Tab characters cannot be used as indentation");
    // A flow collection over several lines is not an error; one never closed is, where it opens.
    expect(yaml("a: [1,\n  2]\nb: ]\n")).toMatch(/^3:\d+ /);
    expect(yaml("models:\n  - name: a\n    aliases: [x\n  - name: b\n")).toBe("3:14 Unexpected token (is the [ here ever closed?)");
    expect(yaml('a: 1\nb: "open\n')).toBe('2:4 Unexpected EOF (is the " here ever closed?)');
    expect(yaml("a: {x: [1, 2]\nb: 2\n")).toBe("1:4 Unexpected token (is the { here ever closed?)");
  });
  test("JSON", () => {
    expect(json('{\n  "models": [\n    {"name": "a",}\n  ]\n}')).toBe("3:18 expected a quoted key");
    expect(json('{"a": 1\n"b": 2}')).toBe("2:1 expected ',' or '}'");
    expect(json('{"a": tru}')).toBe("1:7 expected a value (a string, number, true, false, null, object or array)");
    expect(json("[1, 2] x")).toBe("1:8 unexpected text after the end of the value");
    expect(json('{"a": "x\ny"}')).toBe("1:9 a string may not span lines");
  });
});
