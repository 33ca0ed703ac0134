// Pins how the agent reads each engine's version out of what its version command prints (the
// output shapes real releases print), how versions compare, and that a probe never throws or
// hangs: a missing engine, a failing command and a hung import each come back with a reason (a
// hung command as a real process: test/integration/agent-commands.test.ts).

import { describe, expect, test } from "bun:test";
import {
  compareVersions,
  llamaBuild,
  parseLlamaServerVersion,
  parseSglangVersion,
  parseVllmVersion,
  probeEngine,
  probeEngines,
  versionCommand,
  type ProbeRunner,
} from "../../src/agent/engine-versions";
import { EngineReport } from "../../src/protocol/heartbeat";

describe("parsing", () => {
  test("vllm --version: the version alone, after any platform-detection log lines", () => {
    expect(parseVllmVersion("0.10.1.1\n")).toBe("0.10.1.1");
    expect(parseVllmVersion("INFO 08-20 10:12:01 [__init__.py:241] Automatically detected platform cuda.\n0.11.0\n")).toBe("0.11.0");
    expect(parseVllmVersion("0.11.1rc2.dev14+g6a8d2b3c\n")).toBe("0.11.1rc2.dev14+g6a8d2b3c");
    expect(parseVllmVersion("Traceback (most recent call last):\nModuleNotFoundError: No module named 'vllm'\n")).toBeNull();
  });

  test("SGLang's __version__", () => {
    expect(parseSglangVersion("0.4.3.post4\n")).toBe("0.4.3.post4");
    expect(parseSglangVersion("0.5.2\n")).toBe("0.5.2");
    expect(parseSglangVersion("")).toBeNull();
  });

  test("llama-server --version: the build number, in both shapes builds print", () => {
    const older = "ggml_cuda_init: found 1 CUDA devices:\n  Device 0: NVIDIA H100 80GB HBM3, compute capability 9.0, VMM: yes\nversion: 6869 (0cdf0f8a8)\nbuilt with cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 for x86_64-linux-gnu\n";
    expect(parseLlamaServerVersion(older)).toBe("b6869");
    const newer = "version: 0.4.1-dev (build 10991, commit 930e2fa59)\nbuilt with AppleClang 21.0.0.21000334 for Darwin arm64\n";
    expect(parseLlamaServerVersion(newer)).toBe("b10991");
    expect(parseLlamaServerVersion("error: unknown argument: --version")).toBeNull();
  });
});

describe("comparing", () => {
  test("PEP 440 order: dev < rc < final < post, release parts numerically", () => {
    const order = ["0.9.2", "0.10.0", "0.10.1.1", "0.11.1.dev5", "0.11.1rc2", "0.11.1", "0.11.1.post1", "0.12.0", "1.0"];
    for (let i = 0; i + 1 < order.length; i++) expect(compareVersions(order[i]!, order[i + 1]!)).toBeLessThan(0);
    expect(compareVersions("0.12", "0.12.0")).toBe(0);
    expect(compareVersions("0.4.3.post4", "0.4.3")).toBeGreaterThan(0);
    expect(compareVersions("nightly", "0.12.0")).toBeNull();
  });

  test("llama.cpp builds as numbers", () => {
    expect(llamaBuild("b8173")).toBe(8173);
    expect(llamaBuild("6869")).toBe(6869);
    expect(llamaBuild("0.4.1")).toBeNull();
  });
});

describe("probing", () => {
  const ok = (stdout: string, stderr = ""): ProbeRunner => async () => ({ exitCode: 0, stdout, stderr });

  test("each engine is asked with its own command and the configured executables", () => {
    expect(versionCommand("vllm", { vllm: "/opt/venv/bin/vllm" })).toEqual(["/opt/venv/bin/vllm", "--version"]);
    expect(versionCommand("sglang", { python: "/opt/sgl/bin/python" })).toEqual(["/opt/sgl/bin/python", "-c", "import sglang; print(sglang.__version__)"]);
    expect(versionCommand("llama.cpp")).toEqual(["llama-server", "--version"]);
  });

  test("a found version, with no error; llama-server's on stderr", async () => {
    expect(await probeEngine("vllm", { timeoutMs: 1000, run: ok("0.10.1.1\n") })).toEqual({ engine: "vllm", version: "0.10.1.1", error: null });
    expect(await probeEngine("llama.cpp", { timeoutMs: 1000, run: ok("", "version: 6869 (0cdf0f8a8)\nbuilt with cc\n") })).toEqual({ engine: "llama.cpp", version: "b6869", error: null });
  });

  test("not installed, a failing command and no version each say why, and fit the heartbeat", async () => {
    const missing: ProbeRunner = async () => {
      throw Object.assign(new Error("spawn vllm ENOENT"), { code: "ENOENT" });
    };
    const reports = [
      await probeEngine("vllm", { timeoutMs: 1000, run: missing }),
      await probeEngine("sglang", { timeoutMs: 1000, run: async () => ({ exitCode: 1, stdout: "", stderr: "Traceback (most recent call last):\nModuleNotFoundError: No module named 'sglang'\n" }) }),
      await probeEngine("vllm", { timeoutMs: 1000, run: ok("hello\n") }),
    ];
    expect(reports.map((r) => [r.version, r.error])).toEqual([
      [null, "not installed: vllm not found"],
      [null, "`python3 -c import sglang; print(sglang.__version__)` exited 1: ModuleNotFoundError: No module named 'sglang'"],
      [null, "`vllm --version` printed no version: hello"],
    ]);
    for (const r of reports) expect(EngineReport.safeParse(r).success).toBe(true);
  });

  test("an operator's --vllm-version is used as it is, nothing run", async () => {
    let ran = 0;
    const run: ProbeRunner = async () => {
      ran++;
      return { exitCode: 0, stdout: "0.9.0\n", stderr: "" };
    };
    const all = await probeEngines({ timeoutMs: 1000, run, overrides: { vllm: "0.12.1" } });
    expect(all.map((r) => [r.engine, r.version])).toEqual([["vllm", "0.12.1"], ["sglang", "0.9.0"], ["llama.cpp", null]]);
    expect(ran).toBe(2);
  });

  test("a real executable missing from PATH is reported as not installed", async () => {
    const r = await probeEngine("llama.cpp", { timeoutMs: 2_000, bin: { llamaServer: "/nonexistent/llama-server" } });
    expect(r).toEqual({ engine: "llama.cpp", version: null, error: "not installed: /nonexistent/llama-server not found" });
  });
});

describe("settings", () => {
  const base = { server: "http://10.0.0.1:8001" };
  test("engine executables and stated versions; a llama.cpp build may be given without its b", async () => {
    const { AgentConfig } = await import("../../src/config");
    const c = AgentConfig.parse({ ...base, vllm: "/opt/v/bin/vllm", sglang_python: "/opt/s/bin/python", vllm_version: "0.10.1.1", sglang_version: "0.4.3.post4", llama_server_version: "6869" });
    expect([c.vllm, c.sglang_python, c.llama_server]).toEqual(["/opt/v/bin/vllm", "/opt/s/bin/python", "llama-server"]);
    expect([c.vllm_version, c.sglang_version, c.llama_server_version]).toEqual(["0.10.1.1", "0.4.3.post4", "b6869"]);
  });

  test("a stated version that is not one is refused naming the setting", async () => {
    const { AgentConfig } = await import("../../src/config");
    const bad = AgentConfig.safeParse({ ...base, vllm_version: "latest", llama_server_version: "v1.2" });
    expect(bad.success).toBe(false);
    const issues = bad.error!.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
    expect(issues).toEqual([
      "vllm_version: must be a version such as 0.10.1.1 or 0.4.3.post4",
      "llama_server_version: must be a llama.cpp build number such as b6869",
    ]);
  });
});
