// Network namespaces for tests that need real hosts on one network: a bridge in the root
// namespace (the "switch", which also gives the test itself an address on that network) and one
// namespace per host, joined to the bridge by a veth pair whose inner end is `veth0`. Every name
// carries a unique prefix, and destroy() removes all of it (and kills what still runs inside),
// so a failed test leaves nothing behind. Needs root and iproute2.

import { randomBytes } from "node:crypto";

export interface NetnsHost {
  /** The namespace's name, for `ip netns exec NAME …`. */
  ns: string;
  /** Its address on the bridge's network (on `veth0`). */
  address: string;
}

export interface NetnsLab {
  prefix: string;
  bridge: string;
  /** The root namespace's address on the network (the bridge's). */
  gateway: string;
  /** The network's first three octets, e.g. "10.231.7". */
  net: string;
  hosts: NetnsHost[];
  /** argv that runs `cmd` inside host i's namespace. */
  exec(i: number, cmd: string[]): string[];
  /** The IPv4 addresses on host i's veth0. */
  addresses(i: number): string[];
  destroy(): void;
}

function ip(args: string[], opts: { allowFail?: boolean } = {}): string {
  const p = Bun.spawnSync(["ip", ...args], { stdout: "pipe", stderr: "pipe" });
  if (p.exitCode !== 0 && !opts.allowFail) throw new Error(`ip ${args.join(" ")} failed (${p.exitCode}): ${p.stderr.toString().trim()}`);
  return p.stdout.toString();
}

/** Creates `count` namespaces on one bridge, with addresses NET.1, NET.2, … and NET.254 on the bridge. */
export function createLab(count: number, opts: { net?: string } = {}): NetnsLab {
  if (!Bun.which("ip")) throw new Error("the ip command (Debian package iproute2) is missing: it makes the network namespaces");
  if (process.getuid?.() !== 0) throw new Error("network namespaces need root");
  // Interface names have at most 15 characters: "lg" + 6 hex + a suffix.
  const prefix = `lg${randomBytes(3).toString("hex")}`;
  const net = opts.net ?? `10.231.${1 + Math.floor(Math.random() * 250)}`;
  const bridge = `${prefix}br`;
  const hosts: NetnsHost[] = [];
  const lab: NetnsLab = {
    prefix,
    bridge,
    gateway: `${net}.254`,
    net,
    hosts,
    exec: (i, cmd) => ["ip", "netns", "exec", hosts[i]!.ns, ...cmd],
    addresses: (i) =>
      [...ip(["-n", hosts[i]!.ns, "-4", "-o", "addr", "show", "dev", "veth0"], { allowFail: true }).matchAll(/inet (\d+\.\d+\.\d+\.\d+)\//g)].map((m) => m[1]!),
    destroy() {
      for (const h of hosts) {
        // Whatever still runs inside (a test that failed half-way) goes first, then the namespace.
        for (const pid of ip(["netns", "pids", h.ns], { allowFail: true }).split(/\s+/).filter(Boolean))
          try {
            process.kill(Number(pid), "SIGKILL");
          } catch {
            // Already gone.
          }
        ip(["netns", "del", h.ns], { allowFail: true });
      }
      // Deleting a namespace deletes its veth pairs, but not always before we look again.
      for (let i = 0; i < hosts.length; i++) ip(["link", "del", `${prefix}v${i}`], { allowFail: true });
      ip(["link", "del", bridge], { allowFail: true });
    },
  };
  try {
    ip(["link", "add", bridge, "type", "bridge"]);
    ip(["addr", "add", `${lab.gateway}/24`, "dev", bridge]);
    ip(["link", "set", bridge, "up"]);
    for (let i = 0; i < count; i++) {
      const ns = `${prefix}-${i}`;
      hosts.push({ ns, address: `${net}.${i + 1}` });
      ip(["netns", "add", ns]);
      const outer = `${prefix}v${i}`;
      ip(["link", "add", outer, "type", "veth", "peer", "name", `${prefix}p${i}`]);
      ip(["link", "set", `${prefix}p${i}`, "netns", ns]);
      ip(["link", "set", outer, "master", bridge, "up"]);
      ip(["-n", ns, "link", "set", `${prefix}p${i}`, "name", "veth0"]);
      ip(["-n", ns, "addr", "add", `${net}.${i + 1}/24`, "dev", "veth0"]);
      ip(["-n", ns, "link", "set", "veth0", "up"]);
      ip(["-n", ns, "link", "set", "lo", "up"]);
    }
  } catch (e) {
    lab.destroy();
    throw e;
  }
  return lab;
}

/** Namespaces and links left by this helper (any prefix), for a test to assert it cleaned up. */
export function leftovers(prefix: string): string[] {
  const ns = ip(["netns", "list"], { allowFail: true }).split("\n").map((l) => l.split(" ")[0]!).filter((n) => n.startsWith(prefix));
  const links = [...ip(["-o", "link", "show"], { allowFail: true }).matchAll(/^\d+: ([^:@]+)/gm)].map((m) => m[1]!).filter((n) => n.startsWith(prefix));
  return [...ns, ...links];
}
