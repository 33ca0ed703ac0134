// join-command's address: one the admin listener accepts, and why; the --fabric placeholder.

import { describe, expect, test } from "bun:test";
import type { NetworkInterfaceInfo } from "node:os";
import { FABRIC_PLACEHOLDER, joinAddress, joinInstructions } from "../../src/cli/join-command";

const iface = (address: string, family: "IPv4" | "IPv6", internal = false) => ({ address, family, internal, netmask: "", mac: "", cidr: null, scopeid: 0 }) as NetworkInterfaceInfo;
const IFS = { lo: [iface("127.0.0.1", "IPv4", true)], docker0: [iface("fe80::1", "IPv6")], ens5: [iface("10.1.2.3", "IPv4"), iface("fd00::9", "IPv6")] };

describe("joinAddress", () => {
  test("a serve on 127.0.0.1 only: the loopback URL, never a LAN address, and how to open it", () => {
    const w = joinAddress({ admin_url: "http://127.0.0.1:8001", admin_listen: "127.0.0.1:8001" }, undefined, IFS);
    expect(w.url).toBe("http://127.0.0.1:8001");
    expect(w.note).toContain("127.0.0.1:8001 only");
    expect(w.note).toContain("--admin-listen 0.0.0.0:8001");
    expect(() => joinAddress({ admin_url: "http://127.0.0.1:8001", admin_listen: "127.0.0.1:8001" }, "10.1.2.3", IFS)).toThrow(/accepts connections on 127\.0\.0\.1:8001 only/);
  });

  test("a serve on all addresses: an interface that exists, named; --address taken and checked against the interfaces", () => {
    const info = { admin_url: "http://127.0.0.1:8001", admin_listen: "0.0.0.0:8001" };
    const w = joinAddress(info, undefined, IFS);
    expect(w.url).toBe("http://10.1.2.3:8001");
    expect(w.note).toContain("interface ens5");
    expect(joinAddress(info, "10.1.2.3", IFS).note).toContain("on interface ens5");
    expect(joinAddress(info, "203.0.113.7", IFS)).toEqual({ url: "http://203.0.113.7:8001", note: expect.stringContaining("not an address of this machine") });
    // No interface but loopback: loopback, said so.
    expect(joinAddress(info, undefined, { lo: IFS.lo }).url).toBe("http://127.0.0.1:8001");
    // IPv6 wildcard: IPv4 first, else a global IPv6 address (not link-local).
    expect(joinAddress({ admin_url: "http://[::1]:8001", admin_listen: "[::]:8001" }, undefined, { docker0: IFS.docker0, x: [iface("fd00::9", "IPv6")] }).url).toBe("http://[fd00::9]:8001");
  });

  test("a serve on one address: that one; another --address is refused; --advertise-url wins when set", () => {
    const info = { admin_url: "https://10.1.2.3:9001", admin_listen: "10.1.2.3:9001" };
    expect(joinAddress(info, undefined, IFS).url).toBe("https://10.1.2.3:9001");
    expect(() => joinAddress(info, "10.9.9.9", IFS)).toThrow(/10\.1\.2\.3:9001 only, not at 10\.9\.9\.9/);
    expect(joinAddress({ ...info, advertise_url: "https://head.example:9001/" }, undefined, IFS)).toEqual({ url: "https://head.example:9001", note: expect.stringContaining("--advertise-url") });
  });

  test("a server.json without admin_listen is read by its admin_url", () => {
    expect(joinAddress({ admin_url: "http://127.0.0.1:8001" }, undefined, IFS).url).toBe("http://127.0.0.1:8001");
  });
});

describe("joinInstructions", () => {
  test("the command carries --fabric FABRIC with a comment line saying what to put there, or the fabric given", () => {
    const where = { url: "http://10.1.2.3:8001", note: "the address of interface ens5" };
    const text = joinInstructions(where, "/d/join.token");
    expect(text).toContain(`llmgw agent --server http://10.1.2.3:8001 --token-file /d/join.token --fabric ${FABRIC_PLACEHOLDER}\n`);
    expect(text).toContain(`# ${FABRIC_PLACEHOLDER}: replace it`);
    expect(text).toContain("# server: the address of interface ens5");
    const given = joinInstructions(where, "/d/join.token", { fabric: "ib-a" });
    expect(given).toContain("--fabric ib-a\n");
    expect(given).not.toContain(FABRIC_PLACEHOLDER);
  });
});
