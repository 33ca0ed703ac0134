// The Hugging Face Hub's HTTP API as huggingface_hub uses it, for what llmgw needs of it: the
// commit a branch or tag is at (GET /api/models/{repo}/revision/{rev}), the files of a commit
// with their sizes and checksums (GET /api/models/{repo}/tree/{commit}?recursive=true, paged by
// its Link header), and the URL of a file's bytes (/{repo}/resolve/{commit}/{path}, which
// redirects LFS files to their storage). Every answer is checked with protocol/weights.ts; an
// error says which repository, what the Hub answered and what to do about it. The token goes
// only to the endpoint itself, never to another host a redirect leads to.

import { type WeightFile, HubRevisionInfo, HubTree } from "../protocol/weights";

/** The default endpoint, and the environment variable huggingface_hub reads to change it. */
export const HF_ENDPOINT_DEFAULT = "https://huggingface.co";
export const HF_ENDPOINT_ENV = "HF_ENDPOINT";

/** Why the Hub could not answer: `kind` tells what the operator can do about it. */
export class HubError extends Error {
  constructor(
    message: string,
    readonly kind: "auth" | "not_found" | "unavailable" | "invalid",
    readonly status?: number,
  ) {
    super(message);
    this.name = "HubError";
  }
}

export interface HubClientOptions {
  /** Scheme and host (and a path prefix for a mirror), without a trailing slash. */
  endpoint: string;
  /** For gated and private repositories. */
  token?: string | undefined;
  /** Each API call's limit (the bytes of a file are not an API call). */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

/** Pages of a tree listing followed at most: 100,000 files at the Hub's page size of 1,000. */
const MAX_PAGES = 100;
/** An API answer larger than this is refused before it is parsed. */
const MAX_API_BYTES = 64 * 1024 * 1024;

/** Each segment of a path in a URL, its slashes kept. */
export function encodePath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

export class HubClient {
  readonly endpoint: string;
  /** For the transfers that need it (gated and private repositories); never logged. */
  readonly token: string | undefined;
  private readonly timeoutMs: number;
  private readonly fetcher: typeof fetch;

  constructor(o: HubClientOptions) {
    this.endpoint = o.endpoint.replace(/\/+$/, "");
    this.token = o.token;
    this.timeoutMs = o.timeoutMs ?? 30_000;
    this.fetcher = o.fetch ?? fetch;
  }

  /** The commit a branch, tag or commit of `repo` is at. */
  async resolve(repo: string, revision: string): Promise<string> {
    const body = await this.api(repo, `/api/models/${repo}/revision/${encodeURIComponent(revision)}`, `revision "${revision}"`);
    const info = HubRevisionInfo.safeParse(body);
    if (!info.success) throw new HubError(`${this.endpoint} answered for ${repo} at revision "${revision}" without a commit hash (sha): not the Hub's API?`, "invalid");
    return info.data.sha;
  }

  /** Whether the bytes of `repo` need a token: gated (its terms to accept) or private. */
  async needsToken(repo: string, commit: string): Promise<boolean> {
    const body = await this.api(repo, `/api/models/${repo}/revision/${commit}`, `commit ${commit.slice(0, 12)}`);
    const info = HubRevisionInfo.safeParse(body);
    if (!info.success) throw new HubError(`${this.endpoint} answered for ${repo} without a commit hash (sha): not the Hub's API?`, "invalid");
    return (info.data.gated !== undefined && info.data.gated !== false) || info.data.private === true;
  }

  /** Every file of `repo` at `commit`, with its size and checksum. */
  async files(repo: string, commit: string): Promise<WeightFile[]> {
    const out: WeightFile[] = [];
    let url: string | undefined = `${this.endpoint}/api/models/${repo}/tree/${commit}?recursive=true`;
    for (let page = 0; url !== undefined; page++) {
      if (page >= MAX_PAGES) throw new HubError(`the file list of ${repo} at ${commit.slice(0, 12)} has more than ${MAX_PAGES} pages`, "invalid");
      const { body, next } = await this.apiPage(repo, url, `commit ${commit.slice(0, 12)}`);
      const tree = HubTree.safeParse(body);
      if (!tree.success) {
        const i = tree.error.issues[0]!;
        throw new HubError(`${this.endpoint}'s file list of ${repo} is not the Hub's: at ${i.path.join(".") || "the top"}, ${i.message}`, "invalid");
      }
      for (const e of tree.data) if (e.type === "file") out.push({ path: e.path, size: e.lfs?.size ?? e.size, sha256: e.lfs?.oid ?? null, oid: e.oid });
      url = next;
    }
    out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    return out;
  }

  /** Where a file's bytes are (the Hub redirects LFS files to their storage). */
  fileUrl(repo: string, commit: string, path: string): string {
    return `${this.endpoint}/${repo}/resolve/${commit}/${encodePath(path)}`;
  }

  /** The headers a request to the endpoint itself carries. */
  headers(): Record<string, string> {
    return this.token !== undefined ? { authorization: `Bearer ${this.token}` } : {};
  }

  private async api(repo: string, path: string, what: string): Promise<unknown> {
    return (await this.apiPage(repo, `${this.endpoint}${path}`, what)).body;
  }

  private async apiPage(repo: string, url: string, what: string): Promise<{ body: unknown; next: string | undefined }> {
    let res: Response;
    try {
      res = await this.fetcher(url, { headers: { ...this.headers(), accept: "application/json" }, signal: AbortSignal.timeout(this.timeoutMs), redirect: "follow" });
    } catch (e) {
      throw new HubError(`the Hub at ${this.endpoint} did not answer for ${repo} (${(e as Error).message}); check --hf-endpoint and the head node's network`, "unavailable");
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw this.refusal(res, repo, what);
    }
    const size = Number(res.headers.get("content-length") ?? "0");
    if (size > MAX_API_BYTES) {
      await res.body?.cancel();
      throw new HubError(`${this.endpoint} answered ${size} bytes for ${repo}: more than an API answer can be`, "invalid");
    }
    let body: unknown;
    try {
      body = await res.json();
    } catch {
      throw new HubError(`${this.endpoint} answered for ${repo} with something that is not JSON: not the Hub's API?`, "invalid");
    }
    return { body, next: nextLink(res.headers.get("link"), this.endpoint) };
  }

  private refusal(res: Response, repo: string, what: string): HubError {
    const code = res.headers.get("x-error-code");
    if (res.status === 401 || res.status === 403 || code === "GatedRepo") {
      const hint = this.token === undefined ? "give serve a token that may read it (--hf-token-file)" : "the token given (--hf-token-file) may not read it: accept the model's terms on the Hub, or use another token";
      return new HubError(`${repo} is gated or private (the Hub answered ${res.status}${code ? ` ${code}` : ""}): ${hint}`, "auth", res.status);
    }
    if (res.status === 404) {
      const which = code === "RevisionNotFound" ? `${what} of ${repo} does not exist` : code === "EntryNotFound" ? `${what} of ${repo} was not found` : `${repo} (${what}) was not found on ${this.endpoint}`;
      return new HubError(`${which}: check the catalog's source and revision`, "not_found", 404);
    }
    return new HubError(`the Hub at ${this.endpoint} answered ${res.status} for ${repo} (${what}); try again later`, "unavailable", res.status);
  }
}

/** The URL of a Link header's rel="next", only on the endpoint's own host. */
export function nextLink(header: string | null, endpoint: string): string | undefined {
  if (header === null) return undefined;
  for (const part of header.split(",")) {
    const m = /<([^>]+)>\s*;\s*rel="?next"?/.exec(part);
    if (m === null) continue;
    let url: URL;
    try {
      url = new URL(m[1]!, `${endpoint}/`);
    } catch {
      return undefined;
    }
    return url.origin === new URL(endpoint).origin ? url.href : undefined;
  }
  return undefined;
}
