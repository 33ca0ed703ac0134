// Installing as a service: the units `llmgw install` writes pass `systemd-analyze verify`,
// carry the binary, data dir, user, restart policy and hardening, keep tokens off the command
// line, and `llmgw uninstall` removes them.

import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BINARY, run } from "../helpers/binary";
import { scratchDir } from "../helpers/tmp";

const verify = (unit: string, name: string) => {
  const dir = scratchDir("llmgw-unit-");
  const path = join(dir, name);
  writeFileSync(path, unit);
  const p = Bun.spawnSync(["systemd-analyze", "verify", path], { stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode, out: p.stdout.toString() + p.stderr.toString() };
};

describe("llmgw install", () => {
  test("serve --print: a unit systemd-analyze verify accepts, hardened, with the data dir writable", () => {
    const r = run(BINARY, ["install", "serve", "--print", "--user", "root", "--data-dir", "/var/lib/llmgw-test"], { cwd: tmpdir() });
    expect(r.code).toBe(0);
    const unit = r.stdout;
    expect(unit).toContain(`ExecStart=${BINARY} serve --data-dir /var/lib/llmgw-test`);
    for (const line of ["User=root", "Restart=on-failure", "NoNewPrivileges=yes", "AmbientCapabilities=CAP_SYS_NICE", "ProtectSystem=strict", "ReadWritePaths=/var/lib/llmgw-test", "WantedBy=multi-user.target"])
      expect(unit).toContain(line);
    expect(verify(unit, "llmgw-serve.service")).toEqual({ code: 0, out: "" });
  });

  test("agent --print with flags after --: passed through, quoted; GPUs stay reachable (no PrivateDevices)", () => {
    const r = run(BINARY, ["install", "agent", "--print", "--user", "root", "--", "--server", "http://10.0.0.1:8001", "--fabric", "ib-a", "--label", "rack=a b"], { cwd: tmpdir() });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`ExecStart=${BINARY} agent --state-dir /var/lib/llmgw-agent --models-dir /var/lib/llmgw/models --server http://10.0.0.1:8001 --fabric ib-a --label "rack=a b"`);
    expect(r.stdout).not.toContain("PrivateDevices=yes");
    // The router thread's priority is serve's: the agent is given no capability.
    expect(r.stdout).not.toContain("AmbientCapabilities");
    expect(verify(r.stdout, "llmgw-agent.service")).toEqual({ code: 0, out: "" });
  });

  test("agent with --keep-replicas: systemd stops the agent alone (KillMode=process), so a restart leaves its engines to be adopted", () => {
    const keep = run(BINARY, ["install", "agent", "--print", "--user", "root", "--", "--server", "http://10.0.0.1:8001", "--keep-replicas"], { cwd: tmpdir() });
    expect(keep.code).toBe(0);
    expect(keep.stdout).toContain("KillMode=process");
    expect(keep.stdout).not.toContain("KillMode=mixed");
    expect(verify(keep.stdout, "llmgw-agent.service")).toEqual({ code: 0, out: "" });
    const plain = run(BINARY, ["install", "agent", "--print", "--user", "root", "--", "--server", "http://10.0.0.1:8001"], { cwd: tmpdir() });
    expect(plain.stdout).toContain("KillMode=mixed");
  });

  test("tokens on the command line are refused", () => {
    const r = run(BINARY, ["install", "agent", "--print", "--", "--token", "secret-secret-secret"], { cwd: tmpdir() });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("keep tokens off the command line");
  });

  test("install writes the unit where told; uninstall removes it", () => {
    const unitDir = scratchDir("llmgw-units-");
    const data = scratchDir("llmgw-data-");
    const w = run(BINARY, ["install", "serve", "--unit-dir", unitDir, "--user", "root", "--data-dir", data], { cwd: tmpdir() });
    expect(w.code).toBe(0);
    expect(w.stdout).toContain(`wrote ${unitDir}/llmgw-serve.service`);
    expect(readFileSync(join(unitDir, "llmgw-serve.service"), "utf8")).toContain(`--data-dir ${data}`);
    const u = run(BINARY, ["uninstall", "serve", "--unit-dir", unitDir], { cwd: tmpdir() });
    expect(u.code).toBe(0);
    expect(existsSync(join(unitDir, "llmgw-serve.service"))).toBe(false);
    expect(run(BINARY, ["uninstall", "serve", "--unit-dir", unitDir], { cwd: tmpdir() }).code).toBe(1);
  });
});

describe("completion", () => {
  test("bash and zsh scripts name every command and their flags; bash accepts the script", () => {
    const bash = run(BINARY, ["completion", "bash"], { cwd: tmpdir() }).stdout;
    for (const c of ["serve", "status", "drain", "keys", "install", "completion"]) expect(bash).toContain(c);
    expect(bash).toContain("--data-dir");
    const check = Bun.spawnSync(["bash", "-n"], { stdin: new TextEncoder().encode(bash), stderr: "pipe" });
    expect(check.exitCode).toBe(0);
    const zsh = run(BINARY, ["completion", "zsh"], { cwd: tmpdir() }).stdout;
    expect(zsh).toContain("#compdef llmgw");
    expect(zsh).toContain("'status:");
  });
});

describe("llmgw install prometheus|grafana", () => {
  test("--conf FILE writes the file; without --print or --conf, or with another command's flags, it is refused naming why", () => {
    const dir = scratchDir("llmgw-monitoring-");
    const conf = join(dir, "llmgw.yml");
    const w = run(BINARY, ["install", "prometheus", "--router", "https://10.0.0.1:8000", "--ca", "/etc/llmgw/ca.pem", "--conf", conf], { cwd: dir });
    expect(w.code).toBe(0);
    expect(w.stdout).toContain(`wrote ${conf}`);
    const text = readFileSync(conf, "utf8");
    for (const line of ["scheme: https", 'ca_file: "/etc/llmgw/ca.pem"', '- "10.0.0.1:8000"', "type: Bearer", 'credentials_file: "/etc/prometheus/llmgw-admin.token"']) expect(text).toContain(line);
    const g = join(dir, "dash.json");
    expect(run(BINARY, ["install", "grafana", "--conf", g], { cwd: dir }).code).toBe(0);
    expect(JSON.parse(readFileSync(g, "utf8")).uid).toBe("llmgw-fleet");

    const none = run(BINARY, ["install", "grafana"], { cwd: dir });
    expect([none.code, none.stderr]).toEqual([2, expect.stringContaining("needs --print")]);
    const mixed = run(BINARY, ["install", "grafana", "--print", "--router", "http://x:1"], { cwd: dir });
    expect([mixed.code, mixed.stderr]).toEqual([2, expect.stringContaining("--router is not a flag of install grafana")]);
    const serveFlag = run(BINARY, ["install", "serve", "--print", "--token-file", "/x"], { cwd: dir });
    expect([serveFlag.code, serveFlag.stderr]).toEqual([2, expect.stringContaining("--token-file is for install prometheus")]);
    for (const bad of [["--router", "http://10.0.0.1:8000/metrics"], ["--interval", "soon"], ["--ca", "/ca.pem"], ["--router", "http://a:1", "--router", "https://b:2"]]) {
      const r = run(BINARY, ["install", "prometheus", ...bad, "--print"], { cwd: dir });
      expect([bad, r.code, r.stdout]).toEqual([bad, 2, ""]);
      expect(r.stderr).toContain(`--${bad[0]!.slice(2)}`);
    }
    rmSync(dir, { recursive: true, force: true });
  });
});
