// A router that has just started holds requests until its control plane's first catalog and
// endpoints have come (src/router/first-tables.ts): dispatched in order then, or answered 503 when
// the wait, the cap or the router's stop comes first; a client gone meanwhile is skipped.

import { expect, test } from "bun:test";
import type { ClientExchange } from "../../src/http/exchange";
import { ManualScheduler } from "../../src/lib/scheduler";
import { FirstTables, MAX_WAITING } from "../../src/router/first-tables";

function exchange(name: string) {
  const ex = { name, answered: false, status: 0, body: "", headers: {} as Record<string, string>, respond(status: number, headers: Record<string, string>, body: string) {
    ex.answered = true;
    ex.status = status;
    ex.headers = headers;
    ex.body = body;
  } };
  return ex;
}

function tables(waitMs = 5000) {
  const scheduler = new ManualScheduler(0);
  const dispatched: string[] = [];
  const t = new FirstTables({ scheduler, waitMs, dispatch: (ex) => dispatched.push((ex as unknown as { name: string }).name) });
  return { t, scheduler, dispatched };
}

test("held until both tables came, then dispatched in arrival order; after that at once", () => {
  const { t, dispatched } = tables();
  const [a, b, gone] = ["a", "b", "gone"].map(exchange);
  for (const ex of [a, gone, b]) t.handle(ex as unknown as ClientExchange);
  gone!.answered = true; // its client went away
  t.endpointsCame();
  expect(dispatched).toEqual([]);
  expect(t.open).toBe(false);
  t.catalogCame();
  expect(t.open).toBe(true);
  expect(dispatched).toEqual(["a", "b"]);
  t.handle(exchange("c") as unknown as ClientExchange);
  expect(dispatched).toEqual(["a", "b", "c"]);
});

test("tables that do not come within the wait: 503 router_starting with Retry-After, and the next request waits again", () => {
  const { t, scheduler, dispatched } = tables(5000);
  const a = exchange("a");
  t.handle(a as unknown as ClientExchange);
  scheduler.advance(4999);
  expect(a.answered).toBe(false);
  scheduler.advance(1);
  expect(a.status).toBe(503);
  expect(a.headers["retry-after"]).toBe("1");
  expect(JSON.parse(a.body).error.code).toBe("router_starting");
  const b = exchange("b");
  t.handle(b as unknown as ClientExchange);
  t.catalogCame();
  t.endpointsCame();
  expect(dispatched).toEqual(["b"]);
});

test("past MAX_WAITING a request is answered at once; the router's stop answers every one waiting", () => {
  const { t } = tables();
  const waiting = Array.from({ length: MAX_WAITING }, (_, i) => exchange(`w${i}`));
  for (const ex of waiting) t.handle(ex as unknown as ClientExchange);
  const over = exchange("over");
  t.handle(over as unknown as ClientExchange);
  expect(over.status).toBe(503);
  expect(waiting.some((w) => w.answered)).toBe(false);
  t.close();
  expect(waiting.every((w) => w.status === 503)).toBe(true);
});
