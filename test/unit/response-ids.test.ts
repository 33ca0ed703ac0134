// The Responses API's ids as the router keeps them (src/router/response-ids.ts): an id is pinned
// to the replica that made it for the key that made it alone; another key's id and an unknown id
// look alike (404) when keys are required; memory is bounded, least recently used out; and the
// id is found in the first bytes of an answer, whole or streamed, however the reads split it.

import { describe, expect, test } from "bun:test";
import { IdSniffer, ResponseIds } from "../../src/router/response-ids";

describe("ResponseIds", () => {
  test("the creating key is pinned to the replica; another key and an unknown id get the same 404", () => {
    const ids = new ResponseIds();
    ids.remember("resp_1", "keyA", "r1");
    expect(ids.route("resp_1", "keyA", true)).toEqual({ pin: "r1" });
    const other = ids.route("resp_1", "keyB", true);
    const unknown = ids.route("resp_2", "keyB", true);
    expect("status" in other && other.status).toBe(404);
    const body = (r: typeof other) => JSON.parse((r as { body: string }).body).error;
    expect(body(other).code).toBe("previous_response_not_found");
    expect(body(other).param).toBe("previous_response_id");
    expect(body(other).message.replace("resp_1", "ID")).toBe(body(unknown).message.replace("resp_2", "ID"));
  });

  test("without API keys: a known id is pinned, an unknown one goes anywhere", () => {
    const ids = new ResponseIds();
    ids.remember("resp_1", "", "r2");
    expect(ids.route("resp_1", "", false)).toEqual({ pin: "r2" });
    expect(ids.route("resp_9", "", false)).toEqual({});
  });

  test("bounded: the least recently remembered or used goes first", () => {
    const ids = new ResponseIds(3);
    ids.remember("a", "", "r");
    ids.remember("b", "", "r");
    ids.remember("c", "", "r");
    expect(ids.route("a", "", true)).toEqual({ pin: "r" });
    ids.remember("d", "", "r");
    expect(ids.size).toBe(3);
    expect("status" in ids.route("b", "", true)).toBe(true);
    for (const id of ["a", "c", "d"]) expect(ids.route(id, "", true)).toEqual({ pin: "r" });
  });
});

describe("IdSniffer", () => {
  const enc = new TextEncoder();
  const sniff = (parts: string[]) => {
    const s = new IdSniffer();
    for (const p of parts) {
      const d = enc.encode(`..${p}..`);
      const id = s.feed(d, 2, d.byteLength - 2);
      if (id !== undefined || s.done) return id;
    }
    return undefined;
  };

  test("a whole response, and a stream's response.created event split across reads", () => {
    expect(sniff(['{"id":"resp_abc","object":"response","output":[{"id":"msg_1"}]}'])).toBe("resp_abc");
    const event = 'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id" : "resp_xyz","object":"response"}}\n\n';
    for (let cut = 1; cut < event.length; cut += 7) expect(sniff([event.slice(0, cut), event.slice(cut)])).toBe("resp_xyz");
  });

  test("gives up after the first 4 KiB, and takes no id with quotes, spaces or control characters", () => {
    expect(sniff(["x".repeat(5000), '"id":"late"'])).toBeUndefined();
    expect(sniff(['{"id":"a b"}'])).toBeUndefined();
    expect(sniff(['{"id":"a\\"b"}'])).toBeUndefined();
  });
});
