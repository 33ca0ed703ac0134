// Key and team limits through the compiled binary: limits set with `llmgw keys` and `llmgw teams`
// reach the router, which holds a key to its own requests per minute and to its team's (shared
// by the team's keys): past either, 429 rate_limit_exceeded naming whose limit it is, with
// Retry-After; every answer to a limited key carries OpenAI's x-ratelimit-* headers; a key
// without limits is never refused; `keys list` and `teams list` show what the router counted
// beside each limit; a limit cleared with `none` is gone at the router too.

import { describe, expect, test } from "bun:test";
import { run, until } from "../helpers/binary";
import { withCluster } from "../helpers/cluster";

const H100 = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };

describe("limits set by the CLI, held by the router", () => {
  const c = withCluster(["--require-api-key"]);
  const cli = (...args: string[]) => run(c().bin, args, { cwd: c().dir });
  const chat = (key: string) =>
    fetch(`${c().serve.routerUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
    });
  const key = (...args: string[]) => {
    const r = cli("keys", "create", ...args);
    expect(r.code).toBe(0);
    return r.stdout.trim();
  };
  /** Sends until the first refusal (at most `most`); the statuses and the refusal. */
  async function untilRefused(k: string, most: number): Promise<{ ok: number; refused?: Response; first?: Response }> {
    let ok = 0;
    let first: Response | undefined;
    for (let i = 0; i < most; i++) {
      const r = await chat(k);
      if (r.status === 429) return { ok, refused: r, ...(first ? { first } : {}) };
      expect(r.status).toBe(200);
      first ??= r;
      await r.arrayBuffer();
      ok++;
    }
    return { ok, ...(first ? { first } : {}) };
  }

  test("a key's rpm and its team's, refused past either with the headers; a key without limits is not; a cleared limit is gone", async () => {
    expect(await c().putModel("m", { replicas: { min: 1 }, profiles: [H100] })).toBe(201);
    await until("a replica of m ready", async () => (await c().readyOf("m")).length === 1, 40_000);

    const free = key("free");
    const own = key("own", "--rpm", "3");
    expect(cli("teams", "create", "batch", "--rpm", "4").code).toBe(0);
    const t1 = key("t1", "--team", "batch");
    const t2 = key("t2", "--team", "batch");
    await until("the router to hold the keys", async () => (await chat(t2)).status === 200);

    // Its own limit: three a minute, then 429 naming the key's limit, with the headers.
    const mine = await untilRefused(own, 10);
    expect(mine.ok).toBe(3);
    expect(mine.first!.headers.get("x-ratelimit-limit-requests")).toBe("3");
    expect(mine.first!.headers.get("x-ratelimit-remaining-requests")).toBe("2");
    expect(mine.first!.headers.get("x-ratelimit-reset-requests")).toMatch(/^\d+(m\d+)?(\.\d+)?m?s$/);
    const refused = mine.refused!;
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(refused.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    const body = (await refused.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error).toMatchObject({ type: "rate_limit_exceeded", code: "rate_limit_exceeded" });
    expect(body.error.message).toContain("key 'own'");

    // The team's four a minute are shared: t2 already took one, t1 gets the other three.
    const shared = await untilRefused(t1, 10);
    expect(shared.ok).toBe(3);
    expect(((await shared.refused!.json()) as { error: { message: string } }).error.message).toContain("team 'batch'");
    expect((await chat(t2)).status).toBe(429);

    // No limits, no refusal, no rate headers.
    for (let i = 0; i < 8; i++) {
      const r = await chat(free);
      expect(r.status).toBe(200);
      expect(r.headers.get("x-ratelimit-limit-requests")).toBeNull();
      await r.arrayBuffer();
    }

    // What the router counted shows beside each limit: the key's own three, the team's four.
    const listed = await until("keys list to show the router's counts", () => {
      const keys = JSON.parse(cli("keys", "list", "-o", "json").stdout) as { name: string; use?: { rpm?: number; concurrent?: number } }[];
      const own = keys.find((k) => k.name === "own");
      return own?.use?.rpm !== undefined && own.use.rpm > 0 ? keys : undefined;
    });
    // A minute's three refill at one per 20 s: a slow moment may have given a third of one back.
    const ownUse = listed.find((k) => k.name === "own")!.use!;
    expect(ownUse.concurrent).toBe(0);
    expect([2, 3]).toContain(ownUse.rpm!);
    expect(listed.find((k) => k.name === "free")!.use).toBeUndefined();
    const table = cli("keys", "list").stdout.split("\n").find((l) => l.startsWith("own "))!;
    expect(table.split(/\s+/)[4]).toMatch(/^[23]\/3$/);
    const teams = JSON.parse(cli("teams", "list", "-o", "json").stdout) as { name: string; use?: { rpm?: number; concurrent?: number } }[];
    const teamUse = teams.find((t) => t.name === "batch")!.use!;
    expect(teamUse.concurrent).toBe(0);
    expect([3, 4]).toContain(teamUse.rpm!);

    // Cleared on the key: the router lets it through again.
    expect(cli("keys", "update", "own", "--rpm", "none").code).toBe(0);
    await until("the cleared limit to reach the router", async () => (await chat(own)).status === 200);
  }, 90_000);
});
