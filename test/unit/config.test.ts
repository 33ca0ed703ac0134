// Configuration layering and errors: defaults < file < environment < flags, and every problem
// named at once with its key and source.

import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { AgentConfig, ConfigError, ServeConfig, defaultText, loadConfig, parseByteSize } from "../../src/config";
import { UsageError, parseFlags } from "../../src/config/flags";
import { SERVE_FLAGS } from "../../src/cli/serve";
import { AGENT_FLAGS } from "../../src/cli/agent";
import { routerSettings } from "../../src/app/router-settings";
import { scratchDir } from "../helpers/tmp";

const dir = scratchDir("llmgw-cfg-");
const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};

describe("serve configuration", () => {
  test("defaults", async () => {
    const c = await loadConfig(ServeConfig, { flags: {}, env: {} });
    expect(c.data_dir).toBe("./llmgw-data");
    expect(c.listen).toEqual({ host: "0.0.0.0", port: 8000 });
    expect(c.admin_listen).toEqual({ host: "0.0.0.0", port: 8001 });
    expect(c.node_timeout).toBe(15_000);
    expect(c.admin_token).toBeUndefined();
  });

  test("precedence: flags over environment over file over defaults", async () => {
    const toml = file("a.toml", 'data_dir = "/from/file"\nnode_timeout = "20s"\nheartbeat_interval = "3s"\nlog_level = "warn"\n');
    const c = await loadConfig(ServeConfig, {
      flags: { config: toml, "data-dir": "/from/flag" },
      env: { LLMGW_DATA_DIR: "/from/env", LLMGW_NODE_TIMEOUT: "30s" },
    });
    expect(c.data_dir).toBe("/from/flag");
    expect(c.node_timeout).toBe(30_000);
    expect(c.heartbeat_interval).toBe(3_000);
    expect(c.log_level).toBe("warn");
  });

  test("YAML and JSON files, kebab-case keys accepted, LLMGW_CONFIG names the file", async () => {
    const yaml = file("b.yaml", "admin-listen: 127.0.0.1:9001\nnode_timeout: 45s\n");
    const c = await loadConfig(ServeConfig, { flags: {}, env: { LLMGW_CONFIG: yaml } });
    expect(c.admin_listen).toEqual({ host: "127.0.0.1", port: 9001 });
    expect(c.node_timeout).toBe(45_000);
    const json = file("c.json", JSON.stringify({ node_timeout: 7 }));
    expect((await loadConfig(ServeConfig, { flags: { config: json }, env: {} })).node_timeout).toBe(7_000);
  });

  test("every problem at once, each naming its key and where it came from", async () => {
    const toml = file("bad.toml", 'node_timeout = "soon"\nlisten_port = 3\n');
    const err = await loadConfig(ServeConfig, {
      flags: { config: toml, "admin-listen": "nope" },
      env: { LLMGW_ADMIN_TOKEN: "short", LLMGW_LOG_LEVEL: "loud" },
    }).catch((e) => e);
    expect(err).toBeInstanceOf(ConfigError);
    const text = (err as ConfigError).message;
    expect(text).toContain(`node_timeout (from config file ${toml}): "soon" is not a duration`);
    expect(text).toContain("listen_port (from config file");
    expect(text).toContain("unknown key");
    expect(text).toContain('admin_listen (from flag --admin-listen): "nope" is not host:port');
    expect(text).toContain("admin_token (from environment LLMGW_ADMIN_TOKEN): must be at least 16 characters");
    expect(text).toContain("log_level (from environment LLMGW_LOG_LEVEL)");
    expect((err as ConfigError).problems.length).toBe(5);
  });

  test("a broken or missing file is named", async () => {
    const broken = file("broken.toml", "data_dir = [unclosed");
    expect((await loadConfig(ServeConfig, { flags: { config: broken }, env: {} }).catch((e) => e)).message).toContain(broken);
    expect((await loadConfig(ServeConfig, { flags: { config: join(dir, "none.toml") }, env: {} }).catch((e) => e)).message).toContain("not found");
    const list = file("list.yaml", "- a\n- b\n");
    expect((await loadConfig(ServeConfig, { flags: { config: list }, env: {} }).catch((e) => e)).message).toContain("mapping");
  });
});

describe("agent configuration", () => {
  const base = { server: "http://10.0.0.1:8001", token: "abcdefghijklmnopqrstuvwxyz" };
  test("--engine-auth is on by default; off from the flag, the environment or a file", async () => {
    expect((await loadConfig(AgentConfig, { flags: base, env: {} })).engine_auth).toBe(true);
    expect((await loadConfig(AgentConfig, { flags: { ...base, "engine-auth": "off" }, env: {} })).engine_auth).toBe(false);
    expect((await loadConfig(AgentConfig, { flags: { ...base, "engine-auth": "on" }, env: { LLMGW_ENGINE_AUTH: "off" } })).engine_auth).toBe(true);
    expect((await loadConfig(AgentConfig, { flags: base, env: { LLMGW_ENGINE_AUTH: "off" } })).engine_auth).toBe(false);
    expect((await loadConfig(AgentConfig, { flags: base, env: {}, configPath: file("agent.toml", "engine_auth = false\n") })).engine_auth).toBe(false);
  });

  test("--models-max-bytes, --weights-max-rate and --weights-max-transfers: sizes with SI or binary units, from a flag, the environment or a file", async () => {
    const none = await loadConfig(AgentConfig, { flags: base, env: {} });
    expect([none.models_max_bytes, none.weights_max_rate, none.weights_max_transfers]).toEqual([undefined, undefined, 4]);
    const set = await loadConfig(AgentConfig, { flags: { ...base, "models-max-bytes": "1.5T", "weights-max-rate": "500M/s", "weights-max-transfers": "8" }, env: {} });
    expect([set.models_max_bytes, set.weights_max_rate, set.weights_max_transfers]).toEqual([1.5e12, 500e6, 8]);
    expect((await loadConfig(AgentConfig, { flags: base, env: { LLMGW_MODELS_MAX_BYTES: "64GiB" } })).models_max_bytes).toBe(64 * 2 ** 30);
    expect((await loadConfig(AgentConfig, { flags: base, env: {}, configPath: file("sizes.toml", "models_max_bytes = 1000000000\nweights_max_rate = \"1Gi\"\n") })).weights_max_rate).toBe(2 ** 30);
    expect([parseByteSize("500G"), parseByteSize("500 GB"), parseByteSize("12345"), parseByteSize("2k"), parseByteSize("1.5Ti")]).toEqual([500e9, 500e9, 12345, 2000, 1.5 * 2 ** 40]);
    expect([parseByteSize("500G/s"), parseByteSize("500G/s", true), parseByteSize("0"), parseByteSize("-5G"), parseByteSize("5X"), parseByteSize("0.1")]).toEqual([undefined, 500e9, undefined, undefined, undefined, undefined]);
    const err = (await loadConfig(AgentConfig, { flags: { ...base, "models-max-bytes": "lots", "weights-max-rate": "10k/s", "weights-max-transfers": "0" }, env: {} }).catch((e) => e)) as ConfigError;
    expect(err.problems).toEqual([
      'models_max_bytes (from flag --models-max-bytes): "lots" is not a size in bytes (use e.g. 500G, 1.5T or 64GiB: K M G T are powers of 1000, Ki Mi Gi Ti of 1024)',
      "weights_max_rate (from flag --weights-max-rate): must be at least 1M/s: weights are gigabytes",
      expect.stringContaining("weights_max_transfers (from flag --weights-max-transfers)"),
    ]);
  });

  test("--server takes one URL or several: comma-separated from a flag, the environment or a file, or a list in a file", async () => {
    const token = base.token;
    expect((await loadConfig(AgentConfig, { flags: { server: "http://10.0.0.1:8001/", token }, env: {} })).server).toEqual(["http://10.0.0.1:8001"]);
    const three = ["http://10.0.0.1:8001", "http://10.0.0.2:8001", "http://10.0.0.3:8001"];
    expect((await loadConfig(AgentConfig, { flags: { server: three.join(","), token }, env: {} })).server).toEqual(three);
    expect((await loadConfig(AgentConfig, { flags: { token }, env: { LLMGW_SERVER: three.join(", ") } })).server).toEqual(three);
    const toml = file("servers.toml", `server = "${three.join(",")}"\ntoken = "${token}"\n`);
    expect((await loadConfig(AgentConfig, { flags: {}, env: {}, configPath: toml })).server).toEqual(three);
    const yaml = file("servers.yaml", `server:\n${three.map((u) => `  - ${u}/`).join("\n")}\ntoken: ${token}\n`);
    expect((await loadConfig(AgentConfig, { flags: {}, env: {}, configPath: yaml })).server).toEqual(three);
    // The flag wins over the file, as for every key.
    expect((await loadConfig(AgentConfig, { flags: { server: three[1]! }, env: {}, configPath: yaml })).server).toEqual([three[1]!]);
  });

  test("each bad URL of the list is named, with where the list came from", async () => {
    const problems = async (server: unknown, from: "flag" | "file" = "flag") => {
      const opts: Parameters<typeof loadConfig>[1] =
        from === "flag" ? { flags: { server: server as string, token: base.token }, env: {} } : { flags: { token: base.token }, env: {}, configPath: file("bad.json", JSON.stringify({ server })) };
      const err = await loadConfig(AgentConfig, opts).catch((e) => e);
      expect(err).toBeInstanceOf(ConfigError);
      return (err as ConfigError).problems;
    };
    expect(await problems("http://10.0.0.1:8001,10.0.0.2:8001")).toEqual(['server (from flag --server): "10.0.0.2:8001" (URL 2 of 2) is not a URL like http://10.0.0.1:8001']);
    expect(await problems("nope")).toEqual(['server (from flag --server): "nope" is not a URL like http://10.0.0.1:8001']);
    expect(await problems("http://a:1,,http://b:1")).toEqual(["server (from flag --server): URL 2 of 3 is empty: give URLs separated by single commas"]);
    expect(await problems("http://a:1,http://b:1,http://a:1/")).toEqual(['server (from flag --server): "http://a:1/" (URL 3 of 3) is given twice']);
    expect(await problems("http://a:1,https://b:1")).toEqual(["server (from flag --server): mixes http:// and https:// URLs: every control plane serves the agent API the same way"]);
    expect(await problems(["http://a:1", "ftp://b"], "file")).toEqual([expect.stringMatching(/^server \(from config file .*bad\.json\): "ftp:\/\/b" \(URL 2 of 2\) is not a URL like/)]);
    expect(await problems(8001, "file")).toEqual([expect.stringMatching(/: must be a URL, a comma-separated list of URLs, or a list of URLs$/)]);
    const missing = await loadConfig(AgentConfig, { flags: { token: base.token }, env: {} }).catch((e) => e);
    expect((missing as ConfigError).problems).toEqual(['server: required (give --server, LLMGW_SERVER or "server" in a config file)']);
    // A pin applies to every server, so it needs every one to be https.
    const pin = await loadConfig(AgentConfig, { flags: { server: "http://a:1,http://b:1", token: base.token, "server-fingerprint": "AA".repeat(32) }, env: {} }).catch((e) => e);
    expect((pin as ConfigError).problems).toEqual(["server_fingerprint (from flag --server-fingerprint): only applies to an https:// server, and server is http://a:1,http://b:1"]);
  });

  test("a bad --engine-auth names the flag and the values it takes", async () => {
    const err = await loadConfig(AgentConfig, { flags: { ...base, "engine-auth": "maybe" }, env: {} }).catch((e) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toContain('engine_auth (from flag --engine-auth): must be "on" or "off"');
  });
});

describe("flags", () => {
  test("values, --flag=value, booleans, repeatable lists and positionals", () => {
    const { flags, positionals } = parseFlags(["--data-dir", "/d", "--listen=:9000", "-h", "x"], SERVE_FLAGS);
    expect(flags).toEqual({ "data-dir": "/d", listen: ":9000", help: true });
    expect(positionals).toEqual(["x"]);
    const l = parseFlags(["--label", "a=1", "--label", "b=2"], { label: { kind: "list" } });
    expect(l.flags.label).toEqual(["a=1", "b=2"]);
  });

  test("unknown flags and missing values are usage errors naming the flag", () => {
    expect(() => parseFlags(["--data-dri", "x"], SERVE_FLAGS)).toThrow(new UsageError("unknown flag --data-dri"));
    expect(() => parseFlags(["--data-dir"], SERVE_FLAGS)).toThrow("--data-dir needs a value");
    expect(() => parseFlags(["--data-dir", "--listen", "x"], SERVE_FLAGS)).toThrow("--data-dir needs a value");
  });
});

describe("defaults in one place", () => {
  test("defaultText states a schema default as help writes it", () => {
    expect(defaultText(ServeConfig, "first_byte_timeout")).toBe("5m");
    expect(defaultText(ServeConfig, "listen")).toBe("0.0.0.0:8000");
    expect(defaultText(ServeConfig, "max_body_bytes")).toBe("4194304");
    expect(defaultText(ServeConfig, "balance_load_factor")).toBe("1.25");
    expect(defaultText(ServeConfig, "require_api_key")).toBe("off");
    expect(defaultText(ServeConfig, "data_dir")).toBe("./llmgw-data");
    expect(defaultText(AgentConfig, "engine_auth")).toBe("on");
    expect(defaultText(AgentConfig, "logs_listen")).toBe("0.0.0.0:8002");
    expect(() => defaultText(ServeConfig, "admin_token")).toThrow("admin_token has no default");
  });

  test("the router's balancer and metrics settings come from the schema, as the router is given them", () => {
    expect(routerSettings(ServeConfig.parse({}))).toMatchObject({
      metricsIntervalMs: 1000,
      balancer: { loadFactor: 1.25, stickyLoadFactor: 2, stickySlots: 65536, vnodesPerWeight: 40, saturation: { inflight: 64, queue: 8 }, kvHigh: 0.95, queueHigh: 4 },
    });
    const set = routerSettings(ServeConfig.parse({ balance_load_factor: 1.5, balance_sticky_slots: 1024, balance_kv_high: 0.9, engine_metrics_interval: "0s" }));
    expect(set.balancer).toMatchObject({ loadFactor: 1.5, stickyLoadFactor: 2, stickySlots: 1024, kvHigh: 0.9 });
    expect(set.metricsIntervalMs).toBe(0);
    // A conversation is never held to a bound tighter than placement's.
    expect(routerSettings(ServeConfig.parse({ balance_load_factor: 3 })).balancer.stickyLoadFactor).toBe(3);
    expect(ServeConfig.safeParse({ balance_sticky_slots: 1000 }).error?.issues[0]?.message).toBe("must be a power of two");
  });

  test("every serve flag of a key with a default states that default, read from the schema", async () => {
    const defaults = await loadConfig(ServeConfig, { flags: {}, env: {} });
    let checked = 0;
    for (const [flag, spec] of Object.entries(SERVE_FLAGS)) {
      const key = flag.replace(/-/g, "_") as keyof typeof ServeConfig.shape;
      if (!(key in ServeConfig.shape) || defaults[key] === undefined) continue;
      expect(spec.help, flag).toContain(`(default ${defaultText(ServeConfig, key)}`);
      checked++;
    }
    expect(checked).toBe(47);
  });
  test("every agent flag of a key with a scalar default states that default, read from the schema", () => {
    const stated: string[] = [];
    for (const [flag, spec] of Object.entries(AGENT_FLAGS)) {
      const key = flag.replace(/-/g, "_") as keyof typeof AgentConfig.shape & string;
      if (!(key in AgentConfig.shape) || spec.kind === "boolean") continue; // a switch is off unless given
      let text: string;
      try {
        text = defaultText(AgentConfig, key);
      } catch {
        continue; // no default, or a list (empty by default)
      }
      expect({ flag, help: (spec.help ?? "").includes(`default ${text}`) || (spec.help ?? "").includes(`default: ${text} on PATH`) }).toEqual({ flag, help: true });
      stated.push(flag);
    }
    expect(stated.sort()).toEqual(["engine-auth", "engine-host", "health-interval", "inventory-interval", "llama-server", "log-format", "log-level", "logs-listen", "models-dir", "nvidia-smi", "sglang-python", "start-timeout", "state-dir", "stop-grace", "vllm", "weights-max-transfers"].sort());
  });
});
