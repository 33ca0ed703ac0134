// Start timeouts as the head node's configuration states them: the serve default sized for a
// 70B cold start, and `serve --help` saying how it relates to a profile's start_timeout and to
// the router's cold-start hold.

import { describe, expect, test } from "bun:test";
import { SERVE_FLAGS } from "../../src/cli/serve";
import { ServeConfig, loadConfig } from "../../src/config";

describe("serve start timeouts", () => {
  test("--start-timeout defaults to 30m: a 70B cold start fits", async () => {
    const c = await loadConfig(ServeConfig, { flags: {}, env: {} });
    expect(c.start_timeout).toBe(30 * 60_000);
  });

  test("--help says --start-timeout is the default for profiles without start_timeout, and the server waits longer", () => {
    const help = SERVE_FLAGS["start-timeout"]!.help;
    expect(help).toContain("start_timeout");
    expect(help).toContain("2 heartbeat intervals + 1m");
    expect(help).toContain("(default 30m)");
  });

  test("--help says the cold-start hold stretches to the model's start timeout", () => {
    const help = SERVE_FLAGS["cold-start-timeout"]!.help;
    expect(help).toContain("start timeout");
    expect(help).toContain("(default 5m)");
  });
});
