// Reading an engine's /metrics answer without trusting it: the engine is a program the router
// does not control, and it shares a thread with every prompt. The answer must come uncompressed
// (the poller asks for identity; a gzip bomb is never inflated), it is read as it arrives and
// cut at a byte, line and line-length cap, and it is parsed a slice at a time with I/O let in
// between, so 300,000 series cost requests for other models nothing they can see.

export interface MetricsCaps {
  /** Body bytes read at most; one more and the read is cut. */
  maxBytes: number;
  /** Lines read at most (comments included). */
  maxLines: number;
  /** The longest line read; a longer one cuts the read (real ones are well under a kilobyte). */
  maxLineBytes: number;
}

/**
 * What a real engine stays far below: vLLM's exposition for one model is some 300 lines and
 * 22 KB, SGLang's with every scheduler of a 64-rank group reporting a few thousand lines.
 */
export const METRICS_CAPS: Readonly<MetricsCaps> = Object.freeze({ maxBytes: 4 * 1024 * 1024, maxLines: 50_000, maxLineBytes: 64 * 1024 });

/** Text parsed between two chances for I/O (characters). */
const STEP = 64 * 1024;

/** The answer broke a rule of the read: which one, and its limit, for the log. */
export class MetricsRefused extends Error {
  constructor(
    readonly cap: "encoding" | "bytes" | "lines" | "line length",
    readonly limit: number | string,
    message: string,
  ) {
    super(message);
    this.name = "MetricsRefused";
  }
}

/** Takes the line text[start, end), without its newline (engine-metrics.ts's LoadReader). */
export type LineSink = (text: string, start: number, end: number) => void;

/**
 * Hands each line of a /metrics answer to `line`, read within `caps`; `letIoIn` is awaited
 * between slices of text. Throws MetricsRefused (the body cancelled, so the engine stops
 * sending) when a rule is broken, and whatever the body's stream throws (an abort, a reset).
 */
export async function readLinesWithin(res: Response, caps: MetricsCaps, line: LineSink, letIoIn: () => Promise<void>): Promise<void> {
  const refuse = async (e: MetricsRefused): Promise<never> => {
    await res.body?.cancel().catch(() => {});
    throw e;
  };
  const encoding = res.headers.get("content-encoding")?.trim().toLowerCase();
  if (encoding && encoding !== "identity")
    await refuse(new MetricsRefused("encoding", "identity", `the engine compressed its metrics (content-encoding: ${encoding.slice(0, 40)}) though the router asked for identity`));
  const declared = Number(res.headers.get("content-length") ?? "");
  if (declared > caps.maxBytes) await refuse(new MetricsRefused("bytes", caps.maxBytes, `the engine's metrics are ${declared} bytes, over the router's cap of ${caps.maxBytes}`));
  if (res.body === null) return;
  const body = res.body.getReader();
  const cut = async (e: MetricsRefused): Promise<never> => {
    await body.cancel().catch(() => {});
    throw e;
  };
  const decoder = new TextDecoder();
  let bytes = 0;
  let lines = 0;
  let rest = "";
  for (;;) {
    const { done, value } = await body.read();
    let text: string;
    if (done) text = rest + decoder.decode();
    else {
      bytes += value.byteLength;
      if (bytes > caps.maxBytes) await cut(new MetricsRefused("bytes", caps.maxBytes, `the engine's metrics run over the router's cap of ${caps.maxBytes} bytes`));
      text = rest + decoder.decode(value, { stream: true });
    }
    let at = 0;
    let step = 0;
    for (;;) {
      let nl = text.indexOf("\n", at);
      if (nl < 0) {
        if (!done) break;
        // The last line, with no newline after it.
        if (at >= text.length) break;
        nl = text.length;
      }
      if (++lines > caps.maxLines) await cut(new MetricsRefused("lines", caps.maxLines, `the engine's metrics run over the router's cap of ${caps.maxLines} lines`));
      if (nl - at > caps.maxLineBytes) await cut(new MetricsRefused("line length", caps.maxLineBytes, `a line of the engine's metrics is over the router's cap of ${caps.maxLineBytes} characters`));
      line(text, at, nl);
      at = nl + 1;
      if (at - step >= STEP) {
        await letIoIn();
        step = at;
      }
    }
    if (done) return;
    rest = at >= text.length ? "" : text.slice(at);
    if (rest.length > caps.maxLineBytes) await cut(new MetricsRefused("line length", caps.maxLineBytes, `a line of the engine's metrics is over the router's cap of ${caps.maxLineBytes} characters`));
  }
}
