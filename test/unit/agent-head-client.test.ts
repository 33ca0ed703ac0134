// The head-node client alone, against answers faked at the fetch: every way a request can fail
// sorted into the kind the agent's loops act on, and the request timeout on a ManualScheduler;
// with several servers, when and how it moves from one to the next.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { type FetchLike, HeadClient, worthFailover } from "../../src/agent/head-client";
import { ManualScheduler } from "../../src/lib/scheduler";

const S = "http://head.test:8001";
const OK = { assignments: [], heartbeat_interval_ms: 5_000, generation: 3 };

function client(fetch: FetchLike, over: { signal?: AbortSignal; scheduler?: ManualScheduler } = {}) {
  return new HeadClient({
    servers: ["http://head.test:8001"],
    serverCa: undefined,
    serverFingerprint: undefined,
    fetch,
    bearer: () => "the-token",
    signal: over.signal ?? new AbortController().signal,
    scheduler: over.scheduler ?? new ManualScheduler(),
  });
}

const answering = (status: number, body: string): FetchLike => async () => new Response(body, { status });

describe("HeadClient.request", () => {
  test("a heartbeat response is parsed; the request carries the bearer token and JSON", async () => {
    let seen: { url: string; auth: string | null; type: string | null } | undefined;
    const c = client(async (input, init) => {
      const h = new Headers(init?.headers);
      seen = { url: String(input), auth: h.get("authorization"), type: h.get("content-type") };
      return Response.json(OK);
    });
    expect(await c.request("/agent/v1/heartbeat", { method: "POST", body: "{}" }, 1_000)).toEqual({ ok: true, value: OK, server: S });
    expect(seen).toEqual({ url: "http://head.test:8001/agent/v1/heartbeat", auth: "Bearer the-token", type: "application/json" });
  });

  test.each([
    [400, "rejected"],
    [401, "unauthorized"],
    [403, "forbidden"],
    [404, "not_found"],
    [409, "taken"],
    [429, "limited"],
    [500, "http"],
    [502, "http"],
  ] as const)("status %i is the failure kind %s, quoting the server's message", async (status, kind) => {
    const r = await client(answering(status, JSON.stringify({ error: { message: "told so" } }))).request("/x", {}, 1_000);
    expect(r).toEqual({ ok: false, kind, message: `${status} told so`, status, server: S });
  });

  test("an error page that is not the API's JSON is quoted as text, at most 300 characters", async () => {
    const r = await client(answering(502, `<html>${"x".repeat(400)}</html>`)).request("/x", {}, 1_000);
    expect(r).toEqual({ ok: false, kind: "http", message: `502 ${`<html>${"x".repeat(400)}`.slice(0, 300)}`, status: 502, server: S });
  });

  test("an answer that is not JSON, or not a heartbeat response, is a bad answer", async () => {
    expect(await client(answering(200, "hello")).request("/x", {}, 1_000)).toEqual({ ok: false, kind: "bad_answer", message: "the answer is not JSON: hello", server: S });
    const r = await client(answering(200, JSON.stringify({ ...OK, generation: -1 }))).request("/x", {}, 1_000);
    expect(r).toMatchObject({ ok: false, kind: "bad_answer", message: expect.stringMatching(/^the answer is not a heartbeat response: generation: /) });
  });

  test("a refused connection is unreachable, with the fetch's own words", async () => {
    const r = await client(async () => {
      throw new TypeError("Unable to connect. Is the computer able to access the url?");
    }).request("/x", {}, 1_000);
    expect(r).toEqual({ ok: false, kind: "unreachable", message: "Unable to connect. Is the computer able to access the url?", server: S });
  });

  test("no answer within the timeout, as the scheduler counts it, is unreachable and says how long it waited", async () => {
    const clock = new ManualScheduler();
    const hanging: FetchLike = (_input, init) =>
      new Promise((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
    const pending = client(hanging, { scheduler: clock }).request("/x", {}, 10_000);
    clock.advance(9_999);
    expect(clock.pending).toBe(1);
    clock.advance(1);
    expect(await pending).toEqual({ ok: false, kind: "unreachable", message: "no answer within 10s", server: S });
  });

  test("a stop aborts the request in flight: aborted, which the loops do not log", async () => {
    const stop = new AbortController();
    const hanging: FetchLike = (_input, init) =>
      new Promise((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
    const pending = client(hanging, { signal: stop.signal }).request("/x", {}, 10_000);
    stop.abort();
    expect(await pending).toEqual({ ok: false, kind: "aborted", message: "stopped", server: S });
  });

  test("a request done leaves no timer behind", async () => {
    const clock = new ManualScheduler();
    await client(async () => Response.json(OK), { scheduler: clock }).request("/x", {}, 10_000);
    expect(clock.pending).toBe(0);
  });
});

describe("HeadClient with several servers", () => {
  const [A, B, C] = ["http://a.test:8001", "http://b.test:8001", "http://c.test:8001"];
  const lines: Array<{ level: number; msg: string; from?: string; to?: string; reason?: string }> = [];
  const several = (fetch: FetchLike) => {
    lines.length = 0;
    return new HeadClient({
      servers: [A, B, C],
      serverCa: undefined,
      serverFingerprint: undefined,
      fetch,
      bearer: () => "the-token",
      signal: new AbortController().signal,
      scheduler: new ManualScheduler(),
      log: pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s)) }),
    });
  };

  test("5xx and no connection are worth another server; refusals of the node and bad certificates are not", () => {
    expect(worthFailover({ ok: false, kind: "unreachable", message: "x" })).toBe(true);
    expect(worthFailover({ ok: false, kind: "http", message: "503 standing by", status: 503 })).toBe(true);
    expect(worthFailover({ ok: false, kind: "http", message: "500 x", status: 500 })).toBe(true);
    for (const kind of ["unauthorized", "forbidden", "taken", "rejected", "limited", "not_found", "untrusted", "bad_answer", "aborted"] as const)
      expect(worthFailover({ ok: false, kind, message: "x", ...(kind === "limited" ? { status: 429 } : {}) })).toBe(false);
  });

  test("a failure moves it once, whichever loop reports it; after every server failed it says so once and the loops back off", () => {
    const c = several(async () => Response.json(OK));
    expect(c.server).toBe(A);
    expect(c.failover(A, "did not answer")).toBe(true);
    // The other loop's request to A fails too: no second move.
    expect(c.failover(A, "did not answer")).toBe(true);
    expect(c.server).toBe(B);
    expect(c.failover(B, "answered 503 standing by")).toBe(true);
    expect(c.server).toBe(C);
    expect(c.failover(C, "did not answer")).toBe(false);
    expect(c.server).toBe(A);
    expect(c.failover(A, "did not answer")).toBe(false);
    expect(lines.filter((l) => l.level === 40).map((l) => [l.from, l.to, l.reason])).toEqual([
      [A, B, "did not answer"],
      [B, C, "answered 503 standing by"],
    ]);
    expect(lines.filter((l) => l.level === 50).map((l) => l.msg)).toEqual([`no server answers (${A}, ${B}, ${C}); trying each in turn, backing off; running replicas are left as they are`]);
    expect(lines.filter((l) => l.level === 20)).toHaveLength(1);
    // An answer forgets the failures: the next failure moves on at once again, logged again.
    c.answered(B);
    c.answered(A);
    expect(lines.at(-1)!.msg).toBe(`${B} answers again`);
    expect(c.failover(B, "did not answer")).toBe(true);
    expect(lines.at(-1)).toMatchObject({ level: 40, from: B, to: C });
  });

  test("a move aborts the requests still waiting on the server left; they come back as switched", async () => {
    const seen: string[] = [];
    const c = several((input, init) => {
      seen.push(String(input));
      return new Promise((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
    });
    const poll = c.request("/agent/v1/assignments", { method: "GET" }, 30_000);
    c.failover(A, "did not answer");
    expect(await poll).toEqual({ ok: false, kind: "switched", message: `moved to ${B}`, server: A });
    void c.request("/agent/v1/assignments", { method: "GET" }, 30_000);
    expect(seen).toEqual([`${A}/agent/v1/assignments`, `${B}/agent/v1/assignments`]);
  });

  test("with one server nothing moves and nothing is logged", () => {
    const c = client(async () => Response.json(OK));
    expect(c.failover(S, "did not answer")).toBe(false);
    expect(c.server).toBe(S);
  });
});
