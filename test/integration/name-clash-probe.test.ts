// Whether an earlier run of a control plane still listens at the admin URL its row names: only a
// refused connection to an address of this machine says it is gone; a listener, or an address
// elsewhere, says nothing of the kind (the row is watched instead).

import { afterAll, describe, expect, test } from "bun:test";
import { nobodyListensHere } from "../../src/app/control-planes";
import { realScheduler } from "../../src/lib/scheduler";
import { freePort } from "../helpers/ports";

const listening = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
afterAll(() => listening.stop(true));

describe("nobodyListensHere", () => {
  test("a refused port on this machine is gone; a listener is not", async () => {
    expect(await nobodyListensHere(`http://127.0.0.1:${listening.port}`, realScheduler)).toBe(false);
    expect(await nobodyListensHere(`https://127.0.0.1:${freePort()}`, realScheduler)).toBe(true);
    expect(await nobodyListensHere(`http://[::1]:${freePort()}`, realScheduler)).toBe(true);
  });

  test("an address that is not this machine's, or no URL at all, is never taken as gone", async () => {
    // TEST-NET-1 (RFC 5737): never an interface here; nothing is dialled.
    expect(await nobodyListensHere("http://192.0.2.1:8001", realScheduler)).toBe(false);
    expect(await nobodyListensHere("http://head.example:8001", realScheduler)).toBe(false);
    expect(await nobodyListensHere("not a url", realScheduler)).toBe(false);
  });
});
