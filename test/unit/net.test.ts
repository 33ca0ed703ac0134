import { describe, expect, test } from "bun:test";
import { isLoopbackHost } from "../../src/lib/net";

describe("isLoopbackHost", () => {
  test("loopback spellings", () => {
    for (const h of ["127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "::1", "[::1]", "::ffff:127.0.0.1"]) expect(isLoopbackHost(h)).toBe(true);
  });
  test("anything else reaches beyond this machine", () => {
    for (const h of ["0.0.0.0", "::", "[::]", "10.0.0.1", "128.0.0.1", "127.0.0.1.example.com", "::ffff:10.0.0.1", "localhost.example.com", ""]) expect(isLoopbackHost(h)).toBe(false);
  });
});
