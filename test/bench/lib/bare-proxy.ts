// A reference proxy for the network benches: the least a Bun.serve + fetch proxy can do (no
// parsing, no balancing, no metrics, no timers), so the router's figures can be read against
// Bun's own floor. Several upstreams are taken in turn. Flags add, one at a time, pieces of
// per-request work the router does, so their cost can be measured apart (ablation):
//   --buffer   read the whole upstream body before answering (the router does, for small bodies)
//   --signal   an AbortController on the upstream fetch, listeners on req.signal and a
//              first-byte setTimeout, cleared at the end (the router's per-attempt bookkeeping)
//   --headers  copy request and response headers through new Headers objects (forwardHeaders)
//   --wrap     hand the client a JS ReadableStream that reads the upstream body (first chunk
//              before answering, then one pull per chunk with an idle setTimeout around it)
//   BUN_CONFIG_MAX_HTTP_REQUESTS=65535 bun test/bench/lib/bare-proxy.ts UPSTREAM_URL[,URL…] [flags]

const upstreams = process.argv[2]!.split(",").map((u) => u.replace(/\/+$/, ""));
const has = (f: string) => process.argv.includes(f);
const BUFFER = has("--buffer");
const SIGNAL = has("--signal");
const HEADERS = has("--headers");
const WRAP = has("--wrap");
const SKIP = new Set(["connection", "keep-alive", "transfer-encoding", "content-length", "host"]);
let next = 0;

function copy(h: Headers): Headers {
  const out = new Headers();
  h.forEach((v, k) => {
    if (!SKIP.has(k)) out.set(k, v);
  });
  return out;
}

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(req, srv) {
    srv.timeout(req, 0);
    const u = req.url;
    const path = u.slice(u.indexOf("/", u.indexOf("//") + 2));
    const upstream = upstreams[next++ % upstreams.length]!;
    let ac: AbortController | undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onAbort: (() => void) | undefined;
    if (SIGNAL) {
      const c = (ac = new AbortController());
      onAbort = () => c.abort();
      req.signal.addEventListener("abort", onAbort);
      timer = setTimeout(() => c.abort(), 300_000);
    }
    const cleanup = () => {
      if (timer) clearTimeout(timer);
      if (onAbort) req.signal.removeEventListener("abort", onAbort);
    };
    const reqHeaders = HEADERS ? copy(req.headers) : { "content-type": "application/json" };
    const res = await fetch(upstream + path, { method: req.method, headers: reqHeaders, body: await req.arrayBuffer(), signal: ac?.signal });
    const headers = HEADERS ? copy(res.headers) : { "content-type": res.headers.get("content-type") ?? "application/json" };
    if (BUFFER) {
      const data = await res.arrayBuffer();
      cleanup();
      return new Response(data, { status: res.status, headers });
    }
    if (!WRAP) {
      cleanup();
      return new Response(res.body, { status: res.status, headers });
    }
    const reader = res.body!.getReader();
    const first = await reader.read();
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        if (first.value) c.enqueue(first.value);
        if (first.done) {
          c.close();
          cleanup();
        }
      },
      async pull(c) {
        const idle = setTimeout(() => ac?.abort(), 120_000);
        const { value, done } = await reader.read();
        clearTimeout(idle);
        if (done) {
          c.close();
          cleanup();
          return;
        }
        c.enqueue(value);
      },
    });
    return new Response(body, { status: res.status, headers });
  },
});
const flags = [BUFFER && "buffer", SIGNAL && "signal", HEADERS && "headers", WRAP && "wrap"].filter(Boolean).join(",") || "none";
console.log(`bare proxy listening on http://127.0.0.1:${server.port} (${upstreams.length} upstreams, flags ${flags})`);
const stop = () => {
  server.stop(true);
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);

export {};
