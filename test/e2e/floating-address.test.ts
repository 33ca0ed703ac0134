// The floating address, for real: two head nodes in network namespaces on one bridge, each
// running the compiled `llmgw serve` and Debian's keepalived with the configuration
// `llmgw install keepalived --print` wrote (its check runs `llmgw healthz --leader` by the
// binary's absolute path, as user nobody). From the root namespace the address answers as the
// leader; kill -9 the serve holding it and the address moves to the other namespace and answers
// there. With SHARED_STORE (on) the two serve share one SQLite file (`--store FILE --ha`, short lease):
// one leads, the other stands by and its check fails, and after the kill the standby takes the
// lease, its check passes and the address follows. Without it each serve runs its own store, so
// each leads and the address follows the first whose check passes.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { keepalivedTest } from "../../src/cli/install";
import { run, scratchWithBinary, until } from "../helpers/binary";
import { type NetnsLab, createLab, leftovers } from "../helpers/netns";

const ADMIN_PORT = 8001;
/** The two serve share one store and elect a leader by lease (several control planes). */
const SHARED_STORE = true;
const LEASE = { ttl: "3s", renew: "1s" };
/** Control planes on one store share one admin token (the store keeps only its digest). */
const ADMIN_TOKEN = "llmgw_admin_floating_address_test_0123";
const KEEPALIVED = Bun.which("keepalived") ?? Bun.which("keepalived", { PATH: "/usr/sbin:/sbin" });

let lab: NetnsLab | undefined;
let scratch: { dir: string; bin: string };
let binDir: string | undefined;
const serves: (Bun.Subprocess | undefined)[] = [];
const keepaliveds: Bun.Subprocess<"ignore", "pipe", "pipe">[] = [];
const keepalivedLogs: string[] = [];

async function stop(p: Bun.Subprocess | undefined, graceMs: number): Promise<void> {
  if (!p || p.exitCode !== null || p.signalCode !== null) return;
  p.kill("SIGTERM");
  const gone = await Promise.race([p.exited.then(() => true), Bun.sleep(graceMs).then(() => false)]);
  if (!gone) p.kill("SIGKILL");
  await p.exited;
}

function collect(p: Bun.Subprocess<"ignore", "pipe", "pipe">, i: number): void {
  keepalivedLogs[i] = "";
  for (const stream of [p.stdout, p.stderr])
    void (async () => {
      const dec = new TextDecoder();
      for await (const chunk of stream) keepalivedLogs[i] += dec.decode(chunk);
    })();
}

async function leaderAnswer(url: string): Promise<{ status: number; leading: boolean; name?: string; epoch?: number } | undefined> {
  try {
    const r = await fetch(`${url}/healthz?leader=1`, { signal: AbortSignal.timeout(800) });
    const body = (await r.json()) as { leading?: boolean; name?: string; epoch?: number };
    return { status: r.status, leading: body.leading === true, ...(body.name ? { name: body.name } : {}), ...(body.epoch !== undefined ? { epoch: body.epoch } : {}) };
  } catch {
    return undefined;
  }
}

const vipOf = (l: NetnsLab) => `${l.net}.100`;
const holders = (l: NetnsLab) => l.hosts.map((_, i) => i).filter((i) => l.addresses(i).includes(vipOf(l)));
const tail = (path: string) => {
  try {
    return readFileSync(path, "utf8").slice(-2000);
  } catch {
    return "";
  }
};
const logs = () =>
  keepalivedLogs.map((l, i) => `--- keepalived in namespace ${i}:\n${l.slice(-3000)}\n--- serve in namespace ${i}:\n${tail(join(scratch.dir, `data-${i}.err`))}${tail(join(scratch.dir, `data-${i}.log`))}`).join("\n");

beforeAll(async () => {
  if (!KEEPALIVED) throw new Error("keepalived is missing (Debian package keepalived): apt-get install keepalived; this test runs it for real");
  scratch = scratchWithBinary();
  // keepalived (enable_script_security) runs no check whose path a non-root user could change,
  // and /tmp is anyone's: the check's binary lives in a directory of root's under /run, open to
  // nobody, whom the check runs as.
  binDir = mkdtempSync("/run/llmgw-keepalived-");
  chmodSync(binDir, 0o755);
  copyFileSync(scratch.bin, join(binDir, "llmgw"));
  chmodSync(join(binDir, "llmgw"), 0o755);
  scratch = { dir: scratch.dir, bin: join(binDir, "llmgw") };
  lab = createLab(2);
  const routerId = String(1 + Math.floor(Math.random() * 250));
  for (let i = 0; i < 2; i++) {
    const data = join(scratch.dir, `data-${i}`);
    const shared = SHARED_STORE
      ? ["--store", join(scratch.dir, "shared.db"), "--ha", "--lease-ttl", LEASE.ttl, "--lease-renew", LEASE.renew, "--advertise-url", `http://${lab.hosts[i]!.address}:${ADMIN_PORT}`, "--admin-token", ADMIN_TOKEN]
      : [];
    const serve = Bun.spawn(
      lab.exec(i, [scratch.bin, "serve", "--data-dir", data, "--admin-listen", `0.0.0.0:${ADMIN_PORT}`, "--listen", "127.0.0.1:8000", "--name", `head-${i}`, ...shared]),
      // To files: a pipe nobody reads would fill and stall the server.
      { cwd: scratch.dir, env: { PATH: process.env.PATH ?? "" }, stdin: "ignore", stdout: Bun.file(`${data}.log`), stderr: Bun.file(`${data}.err`) },
    );
    serves.push(serve);
    const url = `http://${lab.hosts[i]!.address}:${ADMIN_PORT}`;
    // Answering at all (a standby answers 503 to ?leader=1).
    await until(() => `serve in ${lab!.hosts[i]!.ns} answering at ${url}\n${logs()}`, async () => (await leaderAnswer(url)) !== undefined, 20_000);

    const peer = lab.hosts[1 - i]!.address;
    const args = ["install", "keepalived", "--print", "--interface", "veth0", "--address", `${vipOf(lab)}/24`, "--peer", peer, "--router-id", routerId, "--server", `http://127.0.0.1:${ADMIN_PORT}`];
    const printed = run(scratch.bin, args, { cwd: scratch.dir });
    expect(printed.stderr).toBe("");
    expect(printed.code).toBe(0);
    expect(printed.stdout).toContain(`script "${scratch.bin} healthz --leader --server http://127.0.0.1:${ADMIN_PORT} --timeout 1500ms"`);
    const conf = join(scratch.dir, `keepalived-${i}`);
    mkdirSync(conf);
    writeFileSync(join(conf, "keepalived.conf"), printed.stdout);
    expect(keepalivedTest(printed.stdout, (argv) => lab!.exec(i, argv))).toEqual({ ok: true, output: expect.any(String) });
    const ka = Bun.spawn(
      lab.exec(i, [KEEPALIVED, "--dont-fork", "--log-console", "--log-detail", "--vrrp", "--use-file", join(conf, "keepalived.conf"), "--pid", join(conf, "keepalived.pid"), "--vrrp_pid", join(conf, "vrrp.pid")]),
      { stdin: "ignore", stdout: "pipe", stderr: "pipe" },
    );
    keepaliveds.push(ka);
    collect(ka, i);
  }
}, 60_000);

afterAll(async () => {
  await Promise.all(keepaliveds.map((k) => stop(k, 3000)));
  await Promise.all(serves.map((s) => stop(s, 3000)));
  if (binDir) rmSync(binDir, { recursive: true, force: true });
  if (scratch) rmSync(scratch.dir, { recursive: true, force: true });
  if (lab) {
    const prefix = lab.prefix;
    lab.destroy();
    expect(leftovers(prefix)).toEqual([]);
  }
});

describe("the floating address follows the leader between two namespaces", () => {
  test("it sits on one head node, answers as the leader, and moves when that serve is killed", async () => {
    const l = lab!;
    const vipUrl = `http://${vipOf(l)}:${ADMIN_PORT}`;
    const first = await until(
      () => `the floating address ${vipOf(l)} on exactly one namespace, answering as the leader (holders: ${holders(l).join(",") || "none"})\n${logs()}`,
      async () => {
        const h = holders(l);
        return h.length === 1 && (await leaderAnswer(vipUrl))?.leading === true ? h[0]! : undefined;
      },
      { timeoutMs: 20_000, everyMs: 100 },
    );
    const other = 1 - first;
    const localCheck = (i: number) => Bun.spawnSync(l.exec(i, [scratch.bin, "healthz", "--leader", "--server", `http://127.0.0.1:${ADMIN_PORT}`]), { stdout: "pipe", stderr: "pipe" });
    if (SHARED_STORE) {
      // One leader: the holder's check passes, the standby's fails, saying it stands by.
      expect(localCheck(first).exitCode).toBe(0);
      const standby = localCheck(other);
      expect(standby.exitCode).toBe(1);
      expect(standby.stderr.toString()).toContain("standing by");
    }
    // Through the binary, as an operator would ask it from outside.
    const viaVip = run(scratch.bin, ["healthz", "--leader", "--server", vipUrl], { cwd: scratch.dir });
    expect(viaVip.code).toBe(0);
    expect(viaVip.stdout).toStartWith(SHARED_STORE ? `leading: ${vipUrl} (head-${first}) leads` : `leading: ${vipUrl} leads`);
    const epochBefore = (await leaderAnswer(vipUrl))?.epoch ?? 0;

    const killedAt = performance.now();
    let leadsAt: number | undefined;
    serves[first]!.kill("SIGKILL");
    await serves[first]!.exited;
    await until(
      () => `the floating address moving from namespace ${first} to ${other} (holders: ${holders(l).join(",") || "none"})\n${logs()}`,
      async () => {
        const h = holders(l);
        if (leadsAt === undefined && (await leaderAnswer(`http://${l.hosts[other]!.address}:${ADMIN_PORT}`))?.leading) leadsAt = performance.now();
        const a = await leaderAnswer(vipUrl);
        return h.length === 1 && h[0] === other && a?.leading === true && (!SHARED_STORE || a.name === `head-${other}`);
      },
      { timeoutMs: 20_000, everyMs: 50 },
    );
    const movedMs = performance.now() - killedAt;
    process.stderr.write(
      `floating address: moved from ${l.hosts[first]!.ns} to ${l.hosts[other]!.ns} ${(movedMs / 1000).toFixed(2)} s after kill -9 of the serve holding it${SHARED_STORE ? ` (one shared store, lease TTL ${LEASE.ttl}, renewal ${LEASE.renew}; the standby led after ${leadsAt === undefined ? "?" : ((leadsAt - killedAt) / 1000).toFixed(2)} s)` : " (a store each)"}\n`,
    );
    // The check on the dead one fails now; the address stays off it.
    const dead = localCheck(first);
    expect(dead.exitCode).toBe(1);
    expect(dead.stderr.toString()).toContain("not answering");
    expect(l.addresses(first)).not.toContain(vipOf(l));
    if (SHARED_STORE) {
      expect(localCheck(other).exitCode).toBe(0);
      // A new leader, under a higher fencing epoch.
      expect((await leaderAnswer(vipUrl))?.epoch ?? 0).toBeGreaterThan(epochBefore);
    }
    // The check's interval, fall and rise, about 3 adverts, and with one store the lease's lapse.
    expect(movedMs).toBeLessThan(SHARED_STORE ? 15_000 : 10_000);
    expect(keepalivedLogs[first]).toContain("llmgw_leader");
  }, 60_000);
});
