// The listeners' settings: connection caps fitted under the open-file limit
// (src/config/limits.ts), and their defaults as the schema has them and `serve --help` says.

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { SERVE_FLAGS } from "../../src/cli/serve";
import { ServeConfig } from "../../src/config";
import { fitCaps, openFileLimit, reserveFor } from "../../src/config/limits";

const defaults = ServeConfig.parse({});
const wanted = {
  router: { total: defaults.max_connections, perAddress: defaults.max_connections_per_address },
  admin: { total: defaults.admin_max_connections, perAddress: defaults.admin_max_connections_per_address },
};

describe("connection caps and the open-file limit", () => {
  test("caps that fit are kept as given; a per-address cap is never over its listener's total", () => {
    expect(fitCaps(wanted, 1_048_576)).toEqual({ ...wanted, lowered: false });
    expect(fitCaps({ router: { total: 10, perAddress: 50 }, admin: { total: 5, perAddress: 2 } }, undefined)).toEqual({
      router: { total: 10, perAddress: 10 },
      admin: { total: 5, perAddress: 2 },
      lowered: false,
    });
  });

  test("on a 1,024-file limit the defaults are lowered so both listeners' worst case (a router connection holds an engine socket too) stays under it", () => {
    const c = fitCaps(wanted, 1024);
    expect(c.lowered).toBe(true);
    expect(2 * c.router.total + c.admin.total).toBeLessThanOrEqual(1024 - reserveFor(1024));
    // Each keeps a share of its own: the admin listener is never squeezed out by the router's.
    expect(c.admin.total).toBeGreaterThanOrEqual(64);
    expect(c.router.total).toBeGreaterThanOrEqual(256);
    expect(c.router.perAddress).toBeLessThanOrEqual(c.router.total);
    expect(c.admin.perAddress).toBeLessThanOrEqual(c.admin.total);
  });

  test("lowered caps keep each per-address cap its share of the total, so one address cannot take every connection", () => {
    for (const limit of [256, 1024, 4096]) {
      const c = fitCaps(wanted, limit);
      expect(c.lowered).toBe(true);
      for (const l of ["router", "admin"] as const) {
        // The defaults' share: a quarter.
        expect(c[l].perAddress).toBe(Math.max(1, Math.floor((c[l].total * wanted[l].perAddress) / wanted[l].total)));
        expect(c[l].perAddress).toBeLessThanOrEqual(Math.ceil(c[l].total / 4));
        expect(c[l].perAddress).toBeGreaterThanOrEqual(1);
      }
    }
    // Other shares are kept as given, within the lowered total; a cap of 1 stays 1.
    const c = fitCaps({ router: { total: 10_000, perAddress: 5_000 }, admin: { total: 10_000, perAddress: 20_000 } }, 1024);
    expect(c.router.perAddress).toBe(Math.floor(c.router.total / 2));
    expect(c.admin.perAddress).toBe(c.admin.total);
    expect(fitCaps({ router: { total: 100_000, perAddress: 1 }, admin: { total: 10, perAddress: 1 } }, 1024).router.perAddress).toBe(1);
  });

  test("the defaults fit the common hard limits with room to spare", () => {
    for (const limit of [20_000, 65_536, 524_288]) expect(fitCaps(wanted, limit).lowered).toBe(false);
  });

  // Linux only: there the limit is in /proc, and the test reads it the same way to compare.
  test.if(process.platform === "linux")("the open-file limit is read", () => {
    const want = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync("/proc/self/limits", "utf8"))![1]!;
    expect(openFileLimit()).toBe(want === "unlimited" ? undefined : Number(want));
  });
});

describe("listener settings", () => {
  test("defaults a real cluster never trips, each listed with its value in serve --help", () => {
    expect(defaults.head_timeout).toBe(30_000);
    expect(defaults.body_timeout).toBe(30_000);
    expect(defaults.body_min_rate).toBe(8192);
    const help: Record<string, string> = {
      "head-timeout": "30s",
      "body-timeout": "30s",
      "body-min-rate": String(defaults.body_min_rate),
      "max-connections": String(defaults.max_connections),
      "max-connections-per-address": String(defaults.max_connections_per_address),
      "admin-max-connections": String(defaults.admin_max_connections),
      "admin-max-connections-per-address": String(defaults.admin_max_connections_per_address),
    };
    for (const [flag, value] of Object.entries(help)) expect(SERVE_FLAGS[flag]?.help).toContain(`(default ${value})`);
  });

  test("bad values name the key", () => {
    expect(() => ServeConfig.parse({ max_connections: 0 })).toThrow("max_connections");
    expect(() => ServeConfig.parse({ body_min_rate: -1 })).toThrow("body_min_rate");
    expect(ServeConfig.parse({ body_min_rate: "0" }).body_min_rate).toBe(0);
  });
});
