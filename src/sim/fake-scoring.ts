// The fake engine's embeddings (a unit vector from the text), and its rerank and score answers, shaped as vLLM's (RerankResponse: id, model,
// usage, results; ScoreResponse: id, object, created, model, data, usage): what a ledger test
// needs from every inference path is a usage the engine also counts in its own prompt token
// counter. The scores are a deterministic function of the texts; nothing is ranked for real.

import { openAIErrorBody } from "../router/errors";

/** What an answer says, or what was wrong with the request (the field and the problem). */
export type Scored = { answer: Record<string, unknown>; promptTokens: number } | { error: string; param: string };

/** vLLM counts a pair's prompt as the query and the document together. */
function pairTokens(a: string, b: string): number {
  return Math.ceil((a.length + b.length) / 4);
}

/** A score in [0, 1) from the two texts: the same pair always scores the same. */
function pairScore(a: string, b: string): number {
  return (Bun.hash.xxHash32(`${a}\u0000${b}`) >>> 0) / 4294967296;
}

function texts(v: unknown): string[] | undefined {
  if (typeof v === "string") return [v];
  if (!Array.isArray(v) || v.length === 0) return undefined;
  const out: string[] = [];
  for (const d of v) {
    // Cohere's and Jina's documents may also be objects with a text.
    if (typeof d === "string") out.push(d);
    else if (typeof d === "object" && d !== null && typeof (d as { text?: unknown }).text === "string") out.push((d as { text: string }).text);
    else return undefined;
  }
  return out;
}

/** POST /v1/rerank and /rerank: {model, query, documents, top_n?}. */
export function rerank(body: Record<string, unknown>, id: string): Scored {
  const query = body.query;
  if (typeof query !== "string") return { error: "`query` is required and must be a string", param: "query" };
  const docs = texts(body.documents);
  if (docs === undefined) return { error: "`documents` is required and must be a non-empty array of strings", param: "documents" };
  const topN = body.top_n;
  if (topN !== undefined && (typeof topN !== "number" || !Number.isInteger(topN) || topN < 0)) return { error: "`top_n` must be a whole number ≥ 0", param: "top_n" };
  let promptTokens = 0;
  const results = docs.map((text, index) => {
    promptTokens += pairTokens(query, text);
    return { index, document: { text }, relevance_score: pairScore(query, text) };
  });
  results.sort((x, y) => y.relevance_score - x.relevance_score);
  const kept = topN !== undefined && topN > 0 ? results.slice(0, topN) : results;
  return { answer: { id, model: body.model, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens }, results: kept }, promptTokens };
}

/** POST /v1/score and /score: {model, text_1, text_2}, one against many or pairwise. */
export function score(body: Record<string, unknown>, id: string, created: number): Scored {
  const a = texts(body.text_1);
  if (a === undefined) return { error: "`text_1` is required and must be a string or a non-empty array of strings", param: "text_1" };
  const b = texts(body.text_2);
  if (b === undefined) return { error: "`text_2` is required and must be a string or a non-empty array of strings", param: "text_2" };
  if (a.length !== 1 && a.length !== b.length) return { error: "`text_1` must hold one text or as many as `text_2`", param: "text_1" };
  let promptTokens = 0;
  const data = b.map((t, index) => {
    const q = a.length === 1 ? a[0]! : a[index]!;
    promptTokens += pairTokens(q, t);
    return { index, object: "score", score: pairScore(q, t) };
  });
  return { answer: { id, object: "list", created, model: body.model, data, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 } }, promptTokens };
}

/** The paths answered here, as vLLM serves them. */
export const SCORED_PATHS: ReadonlySet<string> = new Set(["/v1/rerank", "/rerank", "/v1/score", "/score"]);

/** The answer to a rerank or score request (its body parsed, or the engine's refusal of it); `counted` gets its prompt tokens. */
export function scoredResponse(body: Record<string, unknown> | Response, path: string, id: string, counted: (promptTokens: number) => void): Response {
  if (body instanceof Response) return body;
  const out = path.endsWith("rerank") ? rerank(body, `rerank-${id}`) : score(body, `score-${id}`, Math.floor(Date.now() / 1000));
  if ("error" in out) return new Response(openAIErrorBody(400, out.error, { param: out.param }), { status: 400, headers: { "content-type": "application/json" } });
  counted(out.promptTokens);
  return new Response(JSON.stringify(out.answer), { headers: { "content-type": "application/json" } });
}

/** A unit vector derived from the text, so equal inputs embed equally across runs. */
export function embed(text: string, dim: number): number[] {
  let s = Bun.hash.xxHash32(text) | 0;
  const v = new Array<number>(dim);
  let norm = 0;
  for (let i = 0; i < dim; i++) {
    // mulberry32
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    const x = ((t ^ (t >>> 14)) >>> 0) / 4294967296 - 0.5;
    v[i] = x;
    norm += x * x;
  }
  norm = Math.sqrt(norm) || 1;
  for (let i = 0; i < dim; i++) v[i] = Math.fround(v[i]! / norm);
  return v;
}
