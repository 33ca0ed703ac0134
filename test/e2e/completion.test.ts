// Shell completion through the compiled binary, as an operator sets it up: `source <(./llmgw
// completion bash)` beside a running serve, then TAB. The script is sourced into a real bash,
// COMP_WORDS/COMP_CWORD set as bash sets them, COMPREPLY read back: commands, flags, -o values,
// and node, model and replica names the binary asks the server for, for `./llmgw`, `llmgw`
// (not on PATH: the binary's own path is used) and the binary's full path. A server that never
// answers costs the shell a moment and offers no names.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { heartbeat } from "../helpers/fleet";
import { heartbeatSender, run, scratchWithBinary, startServe, until } from "../helpers/binary";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;
let replicaId: string;
let script: string;
let silent: ReturnType<typeof Bun.serve>;

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  serve = await startServe(bin, dir);
  const send = heartbeatSender(serve);
  for (const name of ["gpu-01", "gpu-02"]) expect((await send(heartbeat({ name, gpus: ["H100-80GB", "H100-80GB"], models: ["llama-3.1-8b"] }))).status).toBe(200);
  writeFileSync(join(dir, "catalog.yaml"), "models:\n  - name: llama-3.1-8b\n    replicas: {min: 1}\n    profiles:\n      - {name: h100, engine: vllm, gpu_class: H100-80GB}\n  - name: qwen2.5-7b\n    replicas: {min: 0}\n    profiles:\n      - {name: p, engine: vllm, gpu_class: H100-80GB}\n");
  expect(run(bin, ["apply", "-f", "catalog.yaml"], { cwd: dir }).code).toBe(0);
  replicaId = await until("a replica placed", () => /\b(r-[0-9a-f]+)\b/.exec(run(bin, ["replicas"], { cwd: dir }).stdout)?.[1]);
  const gen = run(bin, ["completion", "bash"], { cwd: dir });
  expect(gen.code).toBe(0);
  script = join(dir, "llmgw.bash");
  writeFileSync(script, gen.stdout);
  // Accepts connections, never answers.
  silent = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Promise<Response>(() => undefined) });
});

afterAll(() => {
  serve?.proc.kill("SIGTERM");
  silent?.stop(true);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** COMPREPLY for a command line whose last word is being completed, in the serve's directory, with the binary not on PATH. */
function complete(...words: string[]): string[] {
  const body = `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _llmgw; printf '%s\\n' "\${COMPREPLY[@]}"`;
  const p = Bun.spawnSync(["bash", "--norc", "--noprofile", "-c", body, "bash", script, ...words], { cwd: dir, env: { PATH: process.env.PATH ?? "", HOME: dir }, stdout: "pipe", stderr: "pipe" });
  expect(p.stderr.toString()).toBe("");
  return p.stdout.toString().split("\n").filter(Boolean);
}

describe("completion through the compiled binary", () => {
  test("bound to llmgw, ./llmgw and the binary's path", () => {
    const p = Bun.spawnSync(["bash", "--norc", "-c", `source "${script}"; complete -p`], { stdout: "pipe" });
    const bound = p.stdout.toString().split("\n").filter(Boolean).sort();
    expect(bound).toEqual([`complete -F _llmgw ${bin}`, "complete -F _llmgw ./llmgw", "complete -F _llmgw llmgw"].sort());
  });

  test("commands, subcommands, flags and -o values", () => {
    expect(complete("./llmgw", "desc")).toEqual(["describe"]);
    expect(complete("./llmgw", "describe", "")).toEqual(["model", "node", "replica"]);
    expect(complete("./llmgw", "events", "--fo")).toEqual(["--follow"]);
    expect(complete("./llmgw", "events", "-o", "")).toEqual(["table", "wide", "json"]);
    expect(complete("./llmgw", "status", "-o", "")).toEqual(["table", "wide", "json"]);
    expect(complete("./llmgw", "describe", "-o", "")).toEqual(["table", "json"]);
    expect(complete("./llmgw", "serve", "--log-format", "")).toEqual(["auto", "text", "json"]);
  });

  test("node, model and replica names from the running serve, for ./llmgw, llmgw and the full path", () => {
    expect(complete("./llmgw", "describe", "node", "gpu")).toEqual(["gpu-01", "gpu-02"]);
    expect(complete("./llmgw", "nodes", "delete", "")).toEqual(["gpu-01", "gpu-02"]);
    expect(complete("./llmgw", "cordon", "gpu-0")).toEqual(["gpu-01", "gpu-02"]);
    expect(complete("./llmgw", "describe", "model", "")).toEqual(["llama-3.1-8b", "qwen2.5-7b"]);
    expect(complete("./llmgw", "models", "delete", "q")).toEqual(["qwen2.5-7b"]);
    expect(complete("./llmgw", "describe", "replica", "r-")).toEqual([replicaId]);
    expect(complete("./llmgw", "logs", "")).toEqual([replicaId]);
    expect(complete("./llmgw", "replicas", "--model", "ll")).toEqual(["llama-3.1-8b"]);
    expect(complete("./llmgw", "events", "--subject", "node/")).toEqual(["node/gpu-01", "node/gpu-02"]);
    // `llmgw` is not on PATH here: the binary the script came from answers.
    expect(complete("llmgw", "describe", "node", "")).toEqual(["gpu-01", "gpu-02"]);
    expect(complete(bin, "drain", "gpu-02")).toEqual(["gpu-02"]);
    // Another server named on the line is the one asked: this one has no such names.
    expect(complete("./llmgw", "cordon", "--server", serve.adminUrl, "--token", serve.adminToken, "g")).toEqual(["gpu-01", "gpu-02"]);
    expect(complete("./llmgw", "cordon", "--server", serve.adminUrl, "--token", "wrong-token-wrong-token", "g")).toEqual([]);
  });

  test("__complete prints names one a line, and nothing at all on a failure", () => {
    expect(run(bin, ["__complete", "nodes"], { cwd: dir })).toEqual({ code: 0, stdout: "gpu-01\ngpu-02\n", stderr: "" });
    expect(run(bin, ["__complete", "nodes", "--token", "nope-nope-nope-nope"], { cwd: dir })).toEqual({ code: 1, stdout: "", stderr: "" });
    expect(run(bin, ["__complete", "nodes", "--server", "http://127.0.0.1:1"], { cwd: dir })).toEqual({ code: 1, stdout: "", stderr: "" });
    // Hidden: not in the help.
    expect(run(bin, ["--help"], { cwd: dir }).stdout).not.toContain("__complete");
  });

  test("a server that never answers: no names, and the shell waits under three seconds", () => {
    const url = `http://127.0.0.1:${silent.port}`;
    const started = performance.now();
    expect(complete("./llmgw", "nodes", "--server", url, "--token", "t", "")).toEqual(["delete", "approve", "allow-address"]);
    expect(performance.now() - started).toBeLessThan(3000);
  });
});

describe("-o wide does what --help says", () => {
  test("status -o wide names every node the summary holds (table: the first five); events -o wide prints timestamp and subject", async () => {
    const send = heartbeatSender(serve);
    const names = ["n-01", "n-02", "n-03", "n-04", "n-05", "n-06", "n-07"];
    for (const name of names) {
      expect((await send(heartbeat({ name, gpus: ["L40S"] }))).status).toBe(200);
      expect(run(bin, ["cordon", name], { cwd: dir }).code).toBe(0);
    }
    expect(run(bin, ["status", "--help"], { cwd: dir }).stdout).toContain("-o wide names up to 20");
    // Piped: 80 columns, the Nodes line's continuation under its text.
    const table = run(bin, ["status"], { cwd: dir }).stdout.replace(/\n {10}/g, " ");
    expect(table).toContain("7 cordoned (n-01, n-02, n-03, n-04, n-05, and 2 more)");
    const wide = run(bin, ["status", "-o", "wide"], { cwd: dir });
    expect(wide.code).toBe(0);
    expect(wide.stdout).toContain(`7 cordoned (${names.join(", ")})`);
    expect(run(bin, ["events", "--help"], { cwd: dir }).stdout).toContain("-o wide prints its timestamp (UTC) and subject");
    const events = run(bin, ["events", "-o", "wide", "--subject", "node/n-07"], { cwd: dir });
    expect(events.code).toBe(0);
    expect(events.stdout).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+node\.\w+\s+node\/n-07\s/m);
  });
});
