// Teams and keys through the compiled binary: `llmgw teams` and `llmgw keys` against a serve that
// requires API keys. A key made with a team, models, an expiry and limits is listed with them
// (table and -o json); its router refuses a model outside its list (404 model_not_found) and,
// once it has expired, the key itself (401 invalid_api_key); `keys update` clears a limit given
// `none`; a team with keys is deleted only with --force, which revokes them.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;
const cli = (...args: string[]) => run(bin, args, { cwd: dir });

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  serve = await startServe(bin, dir, ["--require-api-key", "--log-level", "warn"]);
}, 30_000);

afterAll(async () => {
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
  rmSync(dir, { recursive: true, force: true });
});

const chat = (key: string, model: string) =>
  fetch(`${serve.routerUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }) });
const listModels = (key: string) => fetch(`${serve.routerUrl}/v1/models`, { headers: { authorization: `Bearer ${key}` } });

describe("llmgw teams and keys", () => {
  test("a team and its keys: created with limits, listed, held to their models and expiry, changed, and the team deleted only when forced", async () => {
    const team = cli("teams", "create", "search", "--rpm", "1200", "--budget-gpu-hours", "2.5", "--budget-period", "week", "-o", "json");
    expect(team.code).toBe(0);
    expect(JSON.parse(team.stdout)).toMatchObject({ name: "search", rpm: 1200, budget_gpu_hours: 2.5, budget_period: "week", priority: null, keys: [] });

    const created = cli("keys", "create", "web", "--team", "search", "--models", "m1,m2", "--rpm", "60", "--tpm", "20000", "--max-concurrent", "4", "--budget-tokens", "5000000", "--priority", "batch", "--expires", "30d");
    expect(created.code).toBe(0);
    const web = created.stdout.trim();
    expect(web).toStartWith("sk-llmgw-");
    expect(created.stderr).toContain("key/web created");
    const short = cli("keys", "create", "short", "--team", "search", "--expires", "3s", "-o", "json");
    expect(short.code).toBe(0);
    const shortKey = (JSON.parse(short.stdout) as { key: string; expires_at: string }).key;

    // Refusals name the field: an unknown team, a bad limit.
    const noTeam = cli("keys", "create", "x", "--team", "nope");
    expect(noTeam.code).not.toBe(0);
    expect(noTeam.stderr).toContain('team "nope" not found');
    const badLimit = cli("keys", "create", "x", "--rpm", "0");
    expect(badLimit.code).not.toBe(0);
    expect(badLimit.stderr).toContain("--rpm must be a positive whole number");

    const table = cli("keys", "list");
    expect(table.code).toBe(0);
    const [head, ...rows] = table.stdout.trim().split("\n");
    expect(head!.split(/\s+/)).toEqual(["NAME", "TEAM", "POOL", "TIER", "RPM", "TPM", "CONCURRENT", "BUDGET", "EXPIRES"]);
    const webRow = rows.find((r) => r.startsWith("web "))!;
    expect(webRow.split(/\s+/).slice(0, 7)).toEqual(["web", "search", "(any)", "batch", "60", "20000", "4"]);
    expect(webRow).toContain("5M tok/month");
    const wide = cli("keys", "list", "-o", "wide");
    expect(wide.stdout.split("\n")[0]).toContain("MODELS");
    expect(wide.stdout).toContain("m1,m2");
    const listed = JSON.parse(cli("keys", "list", "-o", "json").stdout) as Record<string, unknown>[];
    expect(listed.find((k) => k.name === "web")).toEqual({
      name: "web", pool: null, team: "search", models: ["m1", "m2"], expires_at: expect.any(String),
      rpm: 60, tpm: 20000, max_concurrent: 4, budget_tokens: 5000000, budget_gpu_hours: null, budget_period: null, priority: "batch",
      created_at: expect.any(String), updated_at: null,
    });
    expect(JSON.stringify(listed)).not.toContain(web);

    // At the router: a model outside the key's list does not exist for it.
    await until("the router to hold the key", async () => (await listModels(web)).status === 200);
    const denied = await chat(web, "other");
    expect(denied.status).toBe(404);
    expect(((await denied.json()) as { error: { code: string; message: string } }).error).toEqual(expect.objectContaining({ code: "model_not_found", message: "The model 'other' does not exist or you do not have access to it" }));

    // The short-lived key works, then is refused, saying it expired.
    const expired = await until("the short key to expire", async () => {
      const r = await listModels(shortKey);
      return r.status === 401 ? ((await r.json()) as { error: { code: string; message: string } }).error : (await r.arrayBuffer(), undefined);
    }, { timeoutMs: 15_000, everyMs: 100 });
    expect(expired.code).toBe("invalid_api_key");
    expect(expired.message).toContain("expired at");

    // A limit given none is cleared; the rest stays.
    const updated = cli("keys", "update", "web", "--rpm", "none", "--tpm", "30000", "-o", "json");
    expect(updated.code).toBe(0);
    expect(JSON.parse(updated.stdout)).toMatchObject({ name: "web", rpm: null, tpm: 30000, max_concurrent: 4, updated_at: expect.any(String) });

    const teams = JSON.parse(cli("teams", "list", "-o", "json").stdout) as { name: string; keys: string[] }[];
    expect(teams).toEqual([expect.objectContaining({ name: "search", keys: ["short", "web"] })]);

    // A team with keys: refused naming them, then forced, which revokes them.
    const refused = cli("teams", "delete", "search");
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain("short, web");
    const forced = cli("teams", "delete", "search", "--force", "-o", "json");
    expect(forced.code).toBe(0);
    expect(JSON.parse(forced.stdout)).toMatchObject({ name: "search", revoked: ["short", "web"] });
    expect(JSON.parse(cli("keys", "list", "-o", "json").stdout)).toEqual([]);
    await until("the router to refuse the revoked key", async () => (await listModels(web)).status === 401);
  }, 60_000);
});
