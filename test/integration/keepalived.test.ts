// `llmgw healthz` against a real head node (leading, then standing by, then gone) through the
// compiled binary, and `llmgw install keepalived`: the configuration keepalived 2.2.7 accepts
// (`keepalived -t`), for the llmgw leader and for Patroni's primary, every flag checked by name.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keepalivedTest } from "../../src/cli/install";
import { BINARY, run } from "../helpers/binary";
import { type NetnsLab, createLab, leftovers } from "../helpers/netns";
import { type TestServer, testServer } from "../helpers/server";
import { scratchDir } from "../helpers/tmp";

/** Runs the binary without blocking this process's event loop (the server under test lives in it). */
async function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const p = Bun.spawn([BINARY, ...args], { cwd: tmpdir(), env: { PATH: process.env.PATH ?? "", NO_COLOR: "1" }, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code: await p.exited, stdout, stderr };
}

describe("llmgw healthz", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await testServer();
  });
  afterAll(async () => {
    await s?.stop();
  });

  test("a single head node leads: 0, with and without --leader; -o json carries the answer", async () => {
    const plain = await cli(["healthz", "--server", s.adminUrl]);
    expect(plain).toMatchObject({ code: 0, stderr: "" });
    expect(plain.stdout).toStartWith(`leading: ${s.adminUrl} leads, llmgw `);
    expect((await cli(["healthz", "--leader", "--server", s.adminUrl])).code).toBe(0);
    const json = await cli(["healthz", "--leader", "--server", s.adminUrl, "-o", "json"]);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ server: s.adminUrl, healthy: true, http_status: 200, health: { status: "ok", leading: true, epoch: 0 } });
  });

  test("a standby: healthy without --leader, 1 with it, saying it stands by", async () => {
    s.parts.control.leadership.set({ leading: false, epoch: 4, name: "head-b" });
    try {
      expect((await cli(["healthz", "--server", s.adminUrl])).code).toBe(0);
      const r = await cli(["healthz", "--leader", "--server", s.adminUrl]);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe("");
      expect(r.stderr).toBe(`standing by: ${s.adminUrl} (head-b) does not lead, llmgw ${JSON.parse((await cli(["healthz", "--server", s.adminUrl, "-o", "json"])).stdout).health.version}\n`);
      const json = await cli(["healthz", "--leader", "--server", s.adminUrl, "-o", "json"]);
      expect(json.code).toBe(1);
      expect(JSON.parse(json.stdout)).toMatchObject({ healthy: false, http_status: 503, health: { status: "standing by", leading: false, name: "head-b" } });
      s.parts.control.leadership.set({ leading: true, epoch: 5, name: "head-b" });
      const leads = await cli(["healthz", "--leader", "--server", s.adminUrl]);
      expect(leads.code).toBe(0);
      expect(leads.stdout).toContain("(head-b) leads");
      expect(leads.stdout).toContain("epoch 5");
    } finally {
      s.parts.control.leadership.set({ leading: true, epoch: 0 });
    }
  });

  test("nothing listening, something that is not llmgw, a hung server: 1 and one line, within the timeout", async () => {
    const gone = await cli(["healthz", "--leader", "--server", "http://127.0.0.1:9"]);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toBe("not answering: http://127.0.0.1:9: connection refused\n");
    const other = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("<html>ok</html>") });
    const hung = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Promise<Response>(() => undefined) });
    try {
      const r = await cli(["healthz", "--server", `http://127.0.0.1:${other.port}`]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain("not an llmgw health answer");
      const started = performance.now();
      const h = await cli(["healthz", "--leader", "--timeout", "300ms", "--server", `http://127.0.0.1:${hung.port}`]);
      expect(h.code).toBe(1);
      expect(h.stderr).toContain("no answer within 300ms");
      expect(performance.now() - started).toBeLessThan(3000);
    } finally {
      await other.stop(true);
      await hung.stop(true);
    }
  });

  test("usage errors exit 2; the server comes from the data dir's server.json otherwise", async () => {
    expect((await cli(["healthz", "--timeout", "soon", "--server", s.adminUrl])).code).toBe(2);
    expect((await cli(["healthz", "-o", "wide", "--server", s.adminUrl])).code).toBe(2);
    expect((await cli(["healthz", "--server", "ftp://x"])).code).toBe(2);
    expect((await cli(["healthz", "extra"])).code).toBe(2);
    const none = await cli(["healthz", "--data-dir", scratchDir("llmgw-empty-")]);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("server.json");
    const dataDir = JSON.parse(readFileSync(join(s.dataDir, "server.json"), "utf8")) as { admin_url: string };
    const local = await cli(["healthz", "--leader", "--data-dir", s.dataDir]);
    expect(local.code).toBe(0);
    expect(local.stdout).toContain(dataDir.admin_url);
  });
});

describe("llmgw install keepalived", () => {
  // keepalived -t checks that the interface exists and is not the loopback: a namespace of this
  // test's own has one, veth0, wherever the test runs.
  let lab: NetnsLab;
  beforeAll(() => {
    if (!Bun.which("keepalived") && !Bun.which("keepalived", { PATH: "/usr/sbin:/sbin" }))
      throw new Error("keepalived is missing (Debian package keepalived): apt-get install keepalived; this test checks the configuration with keepalived -t");
    lab = createLab(1);
  });
  afterAll(() => {
    const prefix = lab?.prefix;
    lab?.destroy();
    if (prefix) expect(leftovers(prefix)).toEqual([]);
  });
  const inLab = (argv: string[]) => lab.exec(0, argv);
  const base = ["install", "keepalived", "--print", "--interface", "veth0", "--binary", BINARY];

  test("the llmgw leader's address: keepalived -t accepts it; the check runs healthz --leader by absolute path", () => {
    const r = run(BINARY, [...base, "--address", "10.0.0.100/24", "--peer", "10.0.0.2", "--peer", "10.0.0.3", "--router-id", "60", "--priority", "90", "--server", "http://127.0.0.1:8101"], { cwd: tmpdir() });
    expect(r).toMatchObject({ code: 0, stderr: "" });
    const conf = r.stdout;
    expect(conf).toContain(`script "${BINARY} healthz --leader --server http://127.0.0.1:8101 --timeout 1500ms"`);
    for (const line of ["state BACKUP", "nopreempt", "virtual_router_id 60", "priority 90", "interval 1", "fall 2", "rise 1", "weight 0", "script_user nobody", "enable_script_security", "auth_type PASS", "auth_pass llmgw60", "10.0.0.100/24 dev veth0"])
      expect(conf).toContain(line);
    expect(conf).not.toContain("10.0.0.100/24 dev lo");
    expect(conf).toMatch(/unicast_peer \{\n\s+10\.0\.0\.2\n\s+10\.0\.0\.3\n\s+\}/);
    expect(keepalivedTest(conf, inLab)).toMatchObject({ ok: true });
    // The test can fail: keepalived refuses what is wrong.
    expect(keepalivedTest(conf.replace("virtual_router_id 60", "virtual_router_id 300"), inLab)).toMatchObject({ ok: false, output: expect.stringContaining("300") });
    expect(keepalivedTest(conf.replaceAll("veth0", "nosuchif0"), inLab)).toMatchObject({ ok: false, output: expect.stringContaining("nosuchif0") });
  });

  test("--for database: the address follows Patroni's GET /primary, with the vip-manager note; multicast without peers", () => {
    const r = run(BINARY, [...base, "--for", "database", "--address", "10.0.0.200/24", "--patroni", "http://127.0.0.1:8208"], { cwd: tmpdir() });
    expect(r).toMatchObject({ code: 0, stderr: "" });
    expect(r.stdout).toMatch(/script "\/\S*curl -fsS -o \/dev\/null --max-time 1\.5 http:\/\/127\.0\.0\.1:8208\/primary"/);
    expect(r.stdout).toContain("vip-manager 1.0.2");
    expect(r.stdout).toContain("etcd's v2 API");
    expect(r.stdout).toContain("virtual_router_id 52");
    expect(r.stdout).not.toContain("unicast_peer");
    expect(keepalivedTest(r.stdout, inLab)).toMatchObject({ ok: true });
  });

  test("every flag is checked, by name", () => {
    const bad: [string[], string][] = [
      [["--address", "10.0.0.100/24"], "--interface is required"],
      [["--interface", "eth0 x", "--address", "10.0.0.100/24"], "--interface must be"],
      [["--interface", "eth0"], "--address is required"],
      [["--interface", "lo", "--address", "10.0.0.100/24"], "--interface lo is the loopback"],
      [["--interface", "eth0", "--address", "10.0.0.100"], "--address must be an IPv4 address with its prefix"],
      [["--interface", "eth0", "--address", "10.0.0.300/24"], "--address must be"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--router-id", "0"], "--router-id must be a whole number from 1 to 255"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--priority", "255"], "--priority must be a whole number from 1 to 254"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--peer", "db2"], "--peer must be"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--peer", "10.0.0.100"], "is the floating address itself"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--peer", "10.0.0.2,10.0.0.2"], "lists an address twice"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--server", "http://u:p@127.0.0.1:8001"], "--server must be a plain http(s) URL"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--for", "postgres"], "--for must be llmgw or database"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--patroni", "http://127.0.0.1:8008"], "--patroni is for --for database"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--for", "database", "--server", "http://127.0.0.1:8001"], "--server is for --for llmgw"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--auth-pass", "much-too-long"], "--auth-pass must be 1 to 8"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--script-user", "Root User"], "--script-user must be"],
      [["--interface", "eth0", "--address", "10.0.0.100/24", "--user", "llmgw"], "--user is for install serve and agent"],
    ];
    for (const [flags, message] of bad) {
      const r = run(BINARY, ["install", "keepalived", "--print", ...flags], { cwd: tmpdir() });
      expect({ flags, code: r.code, has: r.stderr.includes(message) }).toEqual({ flags, code: 2, has: true });
    }
    const serveWithVip = run(BINARY, ["install", "serve", "--print", "--address", "10.0.0.100/24"], { cwd: tmpdir() });
    expect(serveWithVip.code).toBe(2);
    expect(serveWithVip.stderr).toContain("--address is for install keepalived");
  });

  test("without --print it writes the file where told and checks it", () => {
    const dir = scratchDir("llmgw-ka-");
    const path = join(dir, "keepalived.conf");
    const args = ["install", "keepalived", "--address", "10.0.0.100/24", "--binary", BINARY, "--conf", path];
    const r = run("ip", ["netns", "exec", lab.hosts[0]!.ns, BINARY, ...args, "--interface", "veth0"], { cwd: tmpdir() });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`wrote ${path}`);
    expect(readFileSync(path, "utf8")).toContain("vrrp_instance LLMGW {");
    const refused = run("ip", ["netns", "exec", lab.hosts[0]!.ns, BINARY, ...args, "--interface", "nosuchif0"], { cwd: tmpdir() });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("keepalived -t refuses");
  });

  test("healthz and install keepalived are in the help and the completion", async () => {
    const top = await cli(["--help"]);
    expect(top.stdout).toContain("healthz");
    const help = await cli(["healthz", "--help"]);
    expect(help.stdout).toContain("--leader");
    const bash = (await cli(["completion", "bash"])).stdout;
    expect(bash).toMatch(/healthz\) _llmgw_r="[^"]*--leader/);
    expect(bash).toMatch(/install\) _llmgw_r="[^"]*--interface[^"]*--address/);
    expect(bash).toContain("install/0/*) __llmgw_add \"$4\" serve agent keepalived");
  });
});
