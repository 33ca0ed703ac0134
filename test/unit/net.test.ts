import { describe, expect, test } from "bun:test";
import { localUrl } from "../../src/config/datadir";
import { joinAddress, joinCommand } from "../../src/cli/join-command";
import { bracketHost, hostPort, isLoopbackHost } from "../../src/lib/net";

describe("isLoopbackHost", () => {
  test("loopback spellings", () => {
    for (const h of ["127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "::1", "[::1]", "::ffff:127.0.0.1"]) expect(isLoopbackHost(h)).toBe(true);
  });
  test("anything else reaches beyond this machine", () => {
    for (const h of ["0.0.0.0", "::", "[::]", "10.0.0.1", "128.0.0.1", "127.0.0.1.example.com", "::ffff:10.0.0.1", "localhost.example.com", ""]) expect(isLoopbackHost(h)).toBe(false);
  });
});

describe("IPv6 bracketing", () => {
  test("bracketHost brackets an IPv6 literal once and leaves names and IPv4 alone", () => {
    expect(bracketHost("::1")).toBe("[::1]");
    expect(bracketHost("[::1]")).toBe("[::1]");
    expect(bracketHost("fd00::2")).toBe("[fd00::2]");
    expect(bracketHost("10.0.0.1")).toBe("10.0.0.1");
    expect(bracketHost("gpu-1.example")).toBe("gpu-1.example");
    expect(hostPort("fd00::2", 8100)).toBe("[fd00::2]:8100");
    expect(hostPort("10.0.0.1", 8100)).toBe("10.0.0.1:8100");
  });

  test("a local client's URL for a listener: wildcard binds become loopback, IPv6 in brackets", () => {
    expect(localUrl("0.0.0.0", 8001)).toBe("http://127.0.0.1:8001");
    expect(localUrl("", 8001)).toBe("http://127.0.0.1:8001");
    expect(localUrl("::", 8001)).toBe("http://[::1]:8001");
    expect(localUrl("fd00::1", 8001, "https")).toBe("https://[fd00::1]:8001");
    expect(localUrl("10.0.0.1", 8001)).toBe("http://10.0.0.1:8001");
  });

  test("the join command names an IPv6 head node address in brackets", () => {
    const ifs = { eth0: [{ address: "fd00::1", family: "IPv6", internal: false, netmask: "", mac: "", cidr: null, scopeid: 0 } as const] };
    const where = joinAddress({ admin_url: "http://[::1]:8001", admin_listen: "[::]:8001" }, undefined, ifs);
    expect(joinCommand(where.url, "/t")).toContain("--server http://[fd00::1]:8001");
    // Several control planes: the list as given, whatever this head node's own address.
    expect(joinCommand(where.url, "/t", { servers: ["http://10.0.0.1:8001", "http://10.0.0.2:8001"] })).toBe("llmgw agent --server http://10.0.0.1:8001,http://10.0.0.2:8001 --token-file /t --fabric FABRIC");
  });
});
