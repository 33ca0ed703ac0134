// The store contract (test/contract/store.ts) on the store's in-memory image (src/control/image/),
// the store production runs on: an image over a fresh SQLite file per test; "another instance"
// is a second image over a second Store on the same file, as a second control plane would open it.
// The image learns of another writer's commits from the store's watch (LISTEN, or SQLite's
// data_version polled); here the notice is delivered as each of the other's calls settles, so
// the contract's reads right after the other's writes are the image's reads after a notice.

import { afterAll } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { StoreImage } from "../../src/control/image";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Store } from "../../src/store";
import { storeContract } from "../contract/store";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";
import { T0 } from "../helpers/fleet";
import { scratchDir } from "../helpers/tmp";

const root = scratchDir("llmgw-contract-image-");
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

storeContract("in-memory image over SQLite", async () => {
  const path = join(root, `s${++n}.db`);
  const stores: Store[] = [];
  const image = () => {
    const s = new Store({ path, ...SQLITE_DEFAULTS });
    stores.push(s);
    return new StoreImage(s, new ManualScheduler(T0));
  };
  const store = image();
  /** The other instance: every call it makes is followed by the notice the watch would deliver. */
  const noticed = (o: StoreImage): StoreImage =>
    new Proxy(o, {
      get(target, prop) {
        const v = Reflect.get(target, prop, target) as unknown;
        if (typeof v !== "function") return v;
        return (...args: unknown[]) => {
          const out = (v as (...a: unknown[]) => unknown).apply(target, args);
          if (out instanceof Promise) return out.finally(() => store.otherWriter());
          store.otherWriter();
          return out;
        };
      },
    });
  return {
    store,
    other: async () => noticed(image()),
    close: async () => {
      for (const s of stores) s.close();
    },
  };
});
