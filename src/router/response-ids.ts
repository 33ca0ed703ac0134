// The Responses API's stored responses, as the router sees them. An engine (vLLM, SGLang) keeps
// the responses it produced in its own memory, and a request naming one as its
// `previous_response_id` continues that conversation: it can only be served by the replica that
// holds it, and only its creator should reach it (anyone else holding the id would read the
// conversation through the engine). The router learns each id from the engine's answer (the
// first `"id"` of the response object, or of the response.created event of a stream) and keeps,
// per id, the API key that created it and the replica that produced it: bounded, oldest out.
//
// A request with a previous_response_id is then pinned to that replica when its key is the
// creator's; another key's id, or one the router does not know (forgotten, or made before a
// restart or through another router), is refused as not found when API keys are required, so an
// id never steers another key's request or reaches an engine for it. Without API keys there is
// no owner to check: a known id is pinned, an unknown one goes on unpinned.

import { openAIError, type Reply } from "./errors";

/** Responses remembered at most (about 150 bytes each); past it the least recently used go first. */
export const MAX_RESPONSES = 100_000;
/** Bytes of an answer's start searched for its id. */
const SNIFF_BYTES = 4096;
/** What an id may be: visible ASCII without quotes or backslashes, as engines make them (resp_…). */
const ID = /"id"\s*:\s*"([\x21\x23-\x5b\x5d-\x7e]{1,256})"/;

interface Made {
  /** The creating key's SHA-256, or "" without API keys. */
  owner: string;
  endpoint: string;
}

export class ResponseIds {
  private readonly made = new Map<string, Made>();

  constructor(private readonly max = MAX_RESPONSES) {}

  /** Response `id` was produced by replica `endpoint` for the key `owner`. */
  remember(id: string, owner: string, endpoint: string): void {
    this.made.delete(id);
    this.made.set(id, { owner, endpoint });
    // A Map iterates in insertion order: the first key is the least recently remembered or used.
    if (this.made.size > this.max) this.made.delete(this.made.keys().next().value!);
  }

  get size(): number {
    return this.made.size;
  }

  /**
   * Where a request continuing `previous` goes: `{ pin }`, the replica holding it; `{}`, anywhere
   * (no API keys and an id the router does not know); or the refusal.
   */
  route(previous: string, owner: string, keysRequired: boolean): { pin?: string } | Reply {
    const m = this.made.get(previous);
    if (m !== undefined && m.owner === owner) {
      // Used: kept as recent as a new one.
      this.made.delete(previous);
      this.made.set(previous, m);
      return { pin: m.endpoint };
    }
    if (m === undefined && !keysRequired) return {};
    // Another key's and unknown look the same: the answer tells nobody whose an id is.
    return openAIError(404, `Previous response with id '${previous.slice(0, 200)}' not found: a response can be continued only with the API key that created it, through the router that served it`, {
      param: "previous_response_id",
      code: "previous_response_not_found",
    });
  }
}

/** Finds a response's id in the first bytes of the engine's answer, read by read. */
export class IdSniffer {
  private text = "";
  /** true once it found the id or gave up. */
  done = false;

  /** Bytes d[a, b) of the answer; the id once found, else undefined. */
  feed(d: Uint8Array, a: number, b: number): string | undefined {
    if (this.done) return undefined;
    const take = Math.min(b - a, SNIFF_BYTES - this.text.length);
    this.text += Buffer.from(d.buffer, d.byteOffset + a, take).toString("latin1");
    const m = ID.exec(this.text);
    if (m !== null || this.text.length >= SNIFF_BYTES) {
      this.done = true;
      this.text = "";
    }
    return m?.[1];
  }
}
