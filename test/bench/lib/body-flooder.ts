// The hostile clients of test/bench/body-flood.ts, in a process of their own so that writing
// megabytes never delays the bench's ordinary client: CLIENTS connections, each sending one
// costly body after another (a new connection each, as the router closes after a refusal) and
// reading the status line of the answer. Prints "flooding" once started; on SIGTERM prints one
// JSON line of answers by status and exits.
//   bun test/bench/lib/body-flooder.ts URL KIND[,KIND…] --cap BYTES --depth N --values N
// Kinds: deep8m, wide8m (what the red team sent: 8,000,000 bytes each), image (a chat with one
// base64 image, the size cap less 1 KiB), widemax (an object of values−1 distinct keys padded to
// the size cap), deepmax (nesting at the depth limit, repeated up to values−1), small (a chat of
// one short message: what any client costs, a connection each).

import { deepArrays, deepMany, imageChat, wideObject, wideObjectOfSize } from "../../helpers/json-bodies";

const [url, kindList, ...rest] = process.argv.slice(2);
if (!url || !kindList) {
  console.error("usage: body-flooder.ts URL KIND[,KIND…] --cap BYTES --depth N --values N");
  process.exit(2);
}
const flag = (name: string, dflt: number) => {
  const i = rest.indexOf(name);
  return i >= 0 ? Number(rest[i + 1]) : dflt;
};
const cap = flag("--cap", 8 * 1024 * 1024);
const depth = flag("--depth", 64);
const values = flag("--values", 100_000);
const { hostname, port } = new URL(url);

function body(kind: string): Uint8Array {
  switch (kind) {
    case "deep8m":
      return deepArrays(4_000_000);
    case "wide8m":
      return wideObjectOfSize(8_000_000);
    case "image":
      return imageChat(cap - 1024, "flood");
    case "widemax": {
      // Keys as long as fills the cap: longer distinct keys cost more to parse.
      const keyChars = Math.max(8, Math.floor((cap - 1024) / values) - 5);
      return wideObject(values - 1, keyChars, "flood");
    }
    case "deepmax":
      return deepMany(depth, values - 1, "flood");
    case "small":
      return new TextEncoder().encode(JSON.stringify({ model: "flood", messages: [{ role: "user", content: "hi" }] }));
    default:
      throw new Error(`unknown body kind ${kind}`);
  }
}

const enc = new TextEncoder();
const requests = kindList.split(",").map((kind) => {
  const b = body(kind);
  const head = enc.encode(`POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\nContent-Length: ${b.byteLength}\r\nConnection: close\r\n\r\n`);
  const req = new Uint8Array(head.byteLength + b.byteLength);
  req.set(head);
  req.set(b, head.byteLength);
  return { kind, req, bytes: b.byteLength };
});

const statuses: Record<string, number> = {};
let stopping = false;

/** One request on a new connection: resolves with the answer's status, 0 if closed before one, -1 on an error. */
function once(req: Uint8Array): Promise<number> {
  return new Promise((resolve) => {
    let off = 0;
    let head = "";
    let done = false;
    const finish = (status: number, s?: { end(): void }) => {
      if (done) return;
      done = true;
      resolve(status);
      s?.end();
    };
    const pump = (s: { write(d: Uint8Array): number }) => {
      while (off < req.byteLength) {
        const n = s.write(req.subarray(off));
        if (n <= 0) return;
        off += n;
      }
    };
    Bun.connect({
      hostname,
      port: Number(port),
      socket: {
        open: pump,
        drain: pump,
        data(s, d) {
          head += Buffer.from(d).toString("latin1", 0, Math.min(d.byteLength, 64));
          if (head.includes("\r\n")) finish(Number(head.slice(9, 12)), s);
        },
        close: () => finish(0),
        error: () => finish(-1),
        connectError: () => finish(-1),
      },
    }).catch(() => finish(-1));
  });
}

async function client(i: number): Promise<void> {
  const r = requests[i % requests.length]!;
  while (!stopping) {
    const status = await once(r.req);
    const k = `${r.kind} ${status}`;
    statuses[k] = (statuses[k] ?? 0) + 1;
  }
}

const CLIENTS = 4;
for (let i = 0; i < CLIENTS; i++) void client(i);
console.log(`flooding ${requests.map((r) => `${r.kind} (${r.bytes} bytes)`).join(", ")}`);
process.on("SIGTERM", () => {
  stopping = true;
  console.log(JSON.stringify(statuses));
  process.exit(0);
});
