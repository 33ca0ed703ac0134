// A load client for test/bench/streams.ts: opens N streamed chat requests from a given
// wall-clock time on, spread evenly over RAMP_MS (0: all at once), reads every body to its end,
// and prints one JSON line with what happened. Needs BUN_CONFIG_MAX_HTTP_REQUESTS above N (else
// Bun's fetch runs only 256 at a time).
//   BUN_CONFIG_MAX_HTTP_REQUESTS=65535 bun test/bench/lib/stream-client.ts URL N START_EPOCH_MS MAX_TOKENS [RAMP_MS]

const [url, nRaw, startRaw, tokensRaw, rampRaw] = process.argv.slice(2);
const rampMs = Number(rampRaw ?? 0);
const n = Number(nRaw);
const startAt = Number(startRaw);
const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "Stream slowly, please." }], stream: true, max_tokens: Number(tokensRaw) });
const DONE = new TextEncoder().encode("data: [DONE]\n\n");

const durations: number[] = [];
const errors = new Map<string, number>();
let ok = 0;
let bytes = 0;
let reads = 0;
let firstByteMax = 0;

function endsWith(a: Uint8Array | undefined, b: Uint8Array): boolean {
  if (!a || a.length < b.length) return false;
  for (let i = 0; i < b.length; i++) if (a[a.length - b.length + i] !== b[i]) return false;
  return true;
}

async function one(_: unknown, i: number): Promise<void> {
  if (rampMs > 0) await Bun.sleep(Math.max(0, startAt + (i * rampMs) / n - Date.now()));
  const t0 = Date.now();
  try {
    const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    if (res.status !== 200) throw new Error(`status ${res.status}: ${(await res.text()).slice(0, 120)}`);
    const reader = res.body!.getReader();
    let last: Uint8Array | undefined;
    let first = true;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (first) {
        first = false;
        firstByteMax = Math.max(firstByteMax, Date.now() - t0);
      }
      reads++;
      bytes += value.length;
      last = value;
    }
    if (!endsWith(last, DONE)) throw new Error("stream ended without data: [DONE]");
    ok++;
    durations.push(Date.now() - t0);
  } catch (e) {
    const k = (e as Error).message.slice(0, 160);
    errors.set(k, (errors.get(k) ?? 0) + 1);
  }
}

await Bun.sleep(Math.max(0, startAt - Date.now()));
const started = Date.now();
await Promise.all(Array.from({ length: n }, one));
const ended = Date.now();
durations.sort((a, b) => a - b);
console.log(
  JSON.stringify({ n, ok, failed: n - ok, started, ended, cpu: (process.cpuUsage().user + process.cpuUsage().system) / 1e6, bytes, reads, firstByteMax, durations: [durations[0] ?? -1, durations[Math.floor(durations.length / 2)] ?? -1, durations[Math.max(0, Math.ceil(durations.length * 0.99) - 1)] ?? -1, durations[durations.length - 1] ?? -1], errors: Object.fromEntries(errors) }),
);
process.exit(0);

export {};
