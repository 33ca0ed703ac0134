// The logger's two formats: JSON lines as before, and text lines for a terminal (time, level,
// message, key=value fields), with every outsider's byte escaped and colour only on a terminal
// and never under NO_COLOR; auto picks between them by whether stdout is a terminal.

import { describe, expect, test } from "bun:test";
import { createLogger, formatRecord, logOutput } from "../../src/log";

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

function capture() {
  const lines: string[] = [];
  return { lines, stream: { write: (s: string) => void lines.push(...s.split("\n").filter(Boolean)) } };
}

describe("text format", () => {
  test("time, level, message, then key=value fields; pid, role and hostname left out", () => {
    const at = new Date(2026, 11, 2, 14, 3, 7).toISOString();
    const line = formatRecord(JSON.stringify({ level: 30, time: at, role: "serve", pid: 42, hostname: "h", node: "gpu-01", gpus: 8, ok: true, none: null, msg: "node registered" }), false);
    expect(line).toBe("14:03:07 INFO  node registered node=gpu-01 gpus=8 ok=true none=null");
    expect(formatRecord(JSON.stringify({ level: 50, time: at, msg: "x" }), false)).toBe("14:03:07 ERROR x");
    expect(formatRecord(JSON.stringify({ level: 40, time: at, msg: "x" }), false)).toStartWith("14:03:07 WARN  x");
  });

  test("values with spaces or quotes are quoted; nested objects flatten; errors show type and message", () => {
    const line = formatRecord(JSON.stringify({ level: 30, time: 0, msg: "m", reason: "no node has H100", req: { method: "GET", url: "/v1/models" }, list: ["a", "b"], err: { type: "TypeError", message: "bad thing", stack: "TypeError: bad thing\n    at x" } }), false);
    expect(line).toEndWith(' m reason="no node has H100" req.method=GET req.url=/v1/models list=["a","b"] err="TypeError: bad thing"');
  });

  test("control characters and bidi overrides in the message, keys and values are escaped, never raw", () => {
    const hostile = "10.0.0.9\u001b]0;pwned\u0007\r\n\u009b2J\u202eevil";
    const line = formatRecord(JSON.stringify({ level: 30, time: 0, msg: `from ${hostile}`, address: hostile, [`k\u001b[31m`]: 1 }), true);
    // Colour codes of our own aside, nothing that drives a terminal is left.
    const plain = line.replace(/\x1b\[(\d+)m/g, "");
    expect(CONTROL.exec(plain)).toBeNull();
    expect(plain).toContain("from 10.0.0.9\\x1b]0;pwned\\x07\\r\\n\\x9b2J\\u202eevil");
    expect(plain).toContain('address="10.0.0.9\\u001b]0;pwned\\u0007\\r\\n\\x9b2J\\u202eevil"');
    expect(plain).toContain('"k\\u001b[31m"=1');
    // One record, one line.
    expect(line).not.toContain("\n");
  });

  test("a line that is not a JSON record is passed on escaped", () => {
    expect(formatRecord("not json \u001b[2J", false)).toBe("not json \\x1b[2J");
  });

  test("colour: level and time painted when asked, none otherwise", () => {
    const rec = JSON.stringify({ level: 50, time: 0, msg: "boom" });
    expect(formatRecord(rec, true)).toContain("\x1b[31mERROR\x1b[0m");
    expect(formatRecord(rec, false)).not.toContain("\x1b");
  });

  test("a text logger writes text lines, with secrets redacted as in JSON", () => {
    const out = capture();
    const log = createLogger({ level: "debug", role: "serve", format: { format: "text", color: false }, destination: out.stream });
    log.child({ component: "router" }).info({ token: "s3cret-token-value", model: "llama" }, "started");
    log.debug("quiet");
    expect(out.lines).toHaveLength(2);
    expect(out.lines[0]).toMatch(/^\d\d:\d\d:\d\d INFO  started component=router token="\[redacted\]" model=llama$/);
    expect(out.lines[1]).toMatch(/^\d\d:\d\d:\d\d DEBUG quiet$/);
  });

  test("a JSON logger writes JSON lines, as before", () => {
    const out = capture();
    const log = createLogger({ level: "info", role: "agent", destination: out.stream });
    log.info({ node: "gpu-01" }, "hello");
    const rec = JSON.parse(out.lines[0]!) as Record<string, unknown>;
    expect(rec).toMatchObject({ level: 30, role: "agent", node: "gpu-01", msg: "hello" });
    expect(typeof rec.time).toBe("string");
  });
});

describe("choosing the format", () => {
  const tty = { isTTY: true };
  const pipe = { isTTY: false };
  test("auto: text with colour on a terminal, JSON on a pipe", () => {
    expect(logOutput("auto", tty, {})).toEqual({ format: "text", color: true });
    expect(logOutput("auto", pipe, {})).toEqual({ format: "json", color: false });
  });
  test("NO_COLOR and TERM=dumb take the colour away, not the text", () => {
    expect(logOutput("auto", tty, { NO_COLOR: "1" })).toEqual({ format: "text", color: false });
    expect(logOutput("auto", tty, { TERM: "dumb" })).toEqual({ format: "text", color: false });
  });
  test("text and json are what they say; text on a pipe has no colour", () => {
    expect(logOutput("text", pipe, {})).toEqual({ format: "text", color: false });
    expect(logOutput("json", tty, {})).toEqual({ format: "json", color: false });
  });
});
