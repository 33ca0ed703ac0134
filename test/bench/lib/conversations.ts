// The conversation workload of the prefix-affinity benchmarks (affinity.ts, one router;
// affinity-routers.ts, several): groups of conversations opening with their group's system
// prompt, each turn a user message and the streamed reply, seeded so every run and every policy
// sees the same text; and the fake engines' cache geometry it is measured against.

export const ENGINES = 8;
export const GROUPS = 10;
export const CONVERSATIONS = 200;
export const TURNS = 10;
export const CONCURRENCY = 32;
export const USER_CHARS = 300;
export const BLOCK_CHARS = 64;
export const CACHE_SHARE = 1 / 5;
export const MODEL = "m";
export const ENGINE = { ttftMs: 40, tokenDelayMs: 2, tokens: 16, slots: 8, hitSpeedup: 0.8 };

// Seeded generator: every run and every policy sees the same text.
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
export const VOCAB = "cluster replica token prompt cache engine router latency request stream model weights node fabric placement budget queue slot prefix batch decode prefill kernel tensor shard memory bandwidth throughput policy affinity".split(" ");
export function text(seed: number, chars: number): string {
  const r = rng(seed);
  let s = "";
  while (s.length < chars) s += `${VOCAB[Math.floor(r() * VOCAB.length)]}${r() < 0.1 ? ". " : " "}`;
  return s.slice(0, chars);
}

export interface Message {
  role: string;
  content: string;
}
export interface Conversation {
  id: number;
  group: number;
  messages: Message[];
  turn: number;
  /** Engine index and router prefix key of the previous turn. */
  lastEngine: number;
  lastKey: number;
}

export function conversations(systemChars: number): Conversation[] {
  const systems = Array.from({ length: GROUPS }, (_, g) => `You are assistant ${g} of the benchmark. ${text(1000 + g, systemChars)}`);
  return Array.from({ length: CONVERSATIONS }, (_, id) => ({ id, group: id % GROUPS, messages: [{ role: "system", content: systems[id % GROUPS]! }], turn: 0, lastEngine: -1, lastKey: 0 }));
}

export function userMessage(conv: number, turn: number): string {
  return `[conversation ${conv} turn ${turn}] ${text(conv * 1000 + turn, USER_CHARS)}`;
}

/** The prompt as the fake engine's cache sees it. */
export function promptOf(messages: Message[]): string {
  let p = "";
  for (const m of messages) p += m.role + m.content;
  return p;
}

/** What the fake engine replies (deterministic): used only to size the caches before the run. */
export const REPLY = "The quick brown fox jumps over the lazy dog while a small cluster answers every request from a warm replica".split(" ").slice(0, ENGINE.tokens).join(" ");

/**
 * Distinct blocks of the whole workload, and the hit rate a single cache holding everything
 * would reach (every block seen before by anyone counts): the ceiling for any policy.
 */
export function workloadBlocks(systemChars: number): { distinct: number; ceiling: number } {
  const seen = new Set<string>();
  let queried = 0;
  let hits = 0;
  for (const c of conversations(systemChars)) {
    for (let t = 0; t < TURNS; t++) {
      c.messages.push({ role: "user", content: userMessage(c.id, t) });
      const p = promptOf(c.messages);
      const n = Math.floor(p.length / BLOCK_CHARS);
      let leading = true;
      for (let k = 0; k < n; k++) {
        const key = String(Bun.hash(p.slice(0, (k + 1) * BLOCK_CHARS)));
        queried++;
        if (leading && seen.has(key)) hits++;
        else leading = false;
        seen.add(key);
      }
      c.messages.push({ role: "assistant", content: REPLY });
    }
  }
  return { distinct: seen.size, ceiling: hits / queried };
}


/**
 * One streamed chat turn: posts the conversation, notes the time to first byte, and returns
 * the reply's text and the replica that answered (x-llmgw-replica "eN" → N; -1 when absent).
 */
export async function streamTurn(url: string, messages: Message[], onFirstByte: (ms: number) => void): Promise<{ reply: string; replica: number }> {
  const start = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, messages, stream: true }) });
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
  const replica = Number(res.headers.get("x-llmgw-replica")?.slice(1) ?? -1);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let reply = "";
  let first = true;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (first) {
      first = false;
      onFirstByte(performance.now() - start);
    }
    buf += value;
    let nl: number;
    while ((nl = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, nl);
      buf = buf.slice(nl + 2);
      if (!frame.startsWith("data: {")) continue;
      const delta = (JSON.parse(frame.slice(6)) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta?.content;
      if (delta) reply += delta;
    }
  }
  return { reply, replica };
}
