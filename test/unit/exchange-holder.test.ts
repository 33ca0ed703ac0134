// What a request holds until it is over (http/exchange.ts, ClientExchange.holder: a limited
// key's in-flight slot) is released exactly once, whichever way the exchange ends: answered
// whole, streamed to its end, cut, or left by its client, and whatever is called after.

import { describe, expect, test } from "bun:test";
import { ClientExchange, type ExchangeConn, RequestHeaders } from "../../src/http/exchange";

class Conn implements ExchangeConn {
  keepAlive = true;
  readonly address = "127.0.0.1";
  readonly socket = { remotePort: 1, remoteFamily: "IPv4" as const };
  write(): boolean {
    return true;
  }
  writeString(): boolean {
    return true;
  }
  done(): void {}
  kill(): void {}
  authenticate(): void {}
}

/** An exchange holding a counter; returns it and how many times it was released. */
function held() {
  const ex = new ClientExchange(new Conn(), "POST", "/v1/chat/completions", "/v1/chat/completions", new RequestHeaders([], []), new Uint8Array(), false);
  const h = { n: 0, release: () => void h.n++ };
  ex.holder = h;
  return { ex, h };
}

describe("ClientExchange.holder", () => {
  const ends: [string, (ex: ClientExchange) => void][] = [
    ["answered whole", (ex) => ex.respond(200, { "content-type": "application/json" }, "{}")],
    ["streamed to its end", (ex) => (ex.stream(200, { "content-type": "text/event-stream" }, new Uint8Array([1])), ex.write(new Uint8Array([2])), ex.end())],
    ["streamed, then cut", (ex) => (ex.stream(200, { "content-type": "text/event-stream" }), ex.destroy())],
    ["cut before its head", (ex) => ex.destroy()],
    ["left by its client before its head", (ex) => ex.abort()],
    ["left by its client mid-stream", (ex) => (ex.stream(200, { "content-type": "text/event-stream" }), ex.abort())],
  ];
  for (const [what, end] of ends) {
    test(`released once: ${what}, and never again by whatever follows`, () => {
      const { ex, h } = held();
      expect(h.n).toBe(0);
      end(ex);
      expect(h.n).toBe(1);
      ex.respond(500, {}, "x");
      ex.end();
      ex.destroy();
      ex.abort();
      expect(h.n).toBe(1);
      expect(ex.holder).toBeUndefined();
    });
  }
});
