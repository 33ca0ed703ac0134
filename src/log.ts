// The process logger: pino on stdout, with secrets redacted wherever they could appear. JSON
// lines (for journald, a log shipper, `jq`), or, for a person at a terminal, one readable line
// per record: `14:03:07 INFO  message key=value …`. --log-format auto (the default) picks text
// when stdout, where the logs go, is a terminal, and JSON otherwise.
//
// JSON goes straight to pino's synchronous destination, as fast as pino is. Text is made from
// the JSON pino wrote (redaction already done), so it sees exactly the fields JSON would have;
// it costs a parse per record, which a terminal never notices. Every value is escaped: what a
// node, an engine or a client said reaches the log, and it must not drive the terminal.

import { writeSync } from "node:fs";
import pino, { type Logger } from "pino";
import { safeText } from "./lib/text";

export const REDACT_PATHS = [
  "req.headers.authorization",
  "headers.authorization",
  "authorization",
  "token",
  "*.token",
  "admin_token",
  "join_token",
  "*.admin_token",
  "*.join_token",
];

export type LogFormat = "auto" | "text" | "json";

/** How records are written: JSON lines, or text lines (coloured or not). */
export interface LogOutput {
  format: "text" | "json";
  color: boolean;
}

/** `auto` made concrete for a stream: text on a terminal, JSON otherwise; colour only on a terminal, never under NO_COLOR. */
export function logOutput(format: LogFormat = "auto", stream: { isTTY?: boolean } = process.stdout, env: Record<string, string | undefined> = process.env): LogOutput {
  const tty = !!stream.isTTY;
  const concrete = format === "auto" ? (tty ? "text" : "json") : format;
  const color = concrete === "text" && tty && !(env.NO_COLOR !== undefined && env.NO_COLOR !== "") && env.TERM !== "dumb";
  return { format: concrete, color };
}

export function createLogger(opts: {
  level: string;
  role: string;
  /** Default: auto, for stdout; JSON to a destination given (which, for text, gets the text lines). */
  format?: LogFormat | LogOutput;
  destination?: pino.DestinationStream;
}): Logger {
  const output = typeof opts.format === "object" ? opts.format : logOutput(opts.format ?? (opts.destination ? "json" : "auto"));
  const destination =
    output.format === "json"
      ? (opts.destination ?? pino.destination({ dest: 1, sync: true }))
      : textDestination(output.color, opts.destination ?? { write: (s: string) => void writeSync(1, s) });
  return pino(
    {
      level: opts.level,
      base: { role: opts.role, pid: process.pid },
      redact: { paths: REDACT_PATHS, censor: "[redacted]" },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}

/** A pino destination that turns each JSON line into a text line written to `out`. */
export function textDestination(color: boolean, out: { write(s: string): unknown }): pino.DestinationStream {
  return {
    write(line: string) {
      for (const one of line.split("\n")) if (one) out.write(`${formatRecord(one, color)}\n`);
    },
  };
}

const LEVELS: Record<number, [string, number]> = {
  10: ["TRACE", 90],
  20: ["DEBUG", 90],
  30: ["INFO", 32],
  40: ["WARN", 33],
  50: ["ERROR", 31],
  60: ["FATAL", 31],
};

/** Fields every record carries that a person reading one process's terminal does not need. */
const QUIET = new Set(["time", "level", "msg", "pid", "hostname", "role"]);

/** One record as text: `HH:MM:SS LEVEL message key=value …`, every part escaped. */
export function formatRecord(json: string, color: boolean): string {
  let rec: Record<string, unknown>;
  try {
    const v: unknown = JSON.parse(json);
    if (v === null || typeof v !== "object" || Array.isArray(v)) return escapeText(json);
    rec = v as Record<string, unknown>;
  } catch {
    return escapeText(json);
  }
  const paint = (code: number, s: string) => (color ? `\x1b[${code}m${s}\x1b[0m` : s);
  const [name, code] = LEVELS[rec.level as number] ?? [String(rec.level ?? "?").toUpperCase(), 0];
  const parts = [paint(2, clock(rec.time)), paint(code, escapeText(name).padEnd(5))];
  if (rec.msg !== undefined) parts.push(escapeText(String(rec.msg)));
  const fields: string[] = [];
  for (const [k, v] of Object.entries(rec)) if (!QUIET.has(k)) flatten(k, v, fields, 0);
  if (fields.length) parts.push(color ? fields.map((f) => f.replace(/^([^=]*=)/, (m) => paint(2, m))).join(" ") : fields.join(" "));
  return parts.join(" ");
}

function clock(time: unknown): string {
  const d = typeof time === "string" || typeof time === "number" ? new Date(time) : undefined;
  if (!d || Number.isNaN(d.getTime())) return "--:--:--";
  const p = (n: number) => String(n).padStart(2, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** `key=value` for each leaf, nested objects as `a.b=…` (two levels), an error as its type and message. */
function flatten(key: string, v: unknown, out: string[], depth: number): void {
  const k = escapeKey(key);
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    const o = v as Record<string, unknown>;
    if (typeof o.message === "string" && (typeof o.type === "string" || typeof o.stack === "string")) {
      out.push(`${k}=${value(`${typeof o.type === "string" && o.type !== "Error" ? `${o.type}: ` : ""}${o.message}`)}`);
      return;
    }
    if (depth < 2 && Object.keys(o).length > 0) {
      for (const [ck, cv] of Object.entries(o)) flatten(`${key}.${ck}`, cv, out, depth + 1);
      return;
    }
  }
  out.push(`${k}=${value(v)}`);
}

function value(v: unknown): string {
  if (typeof v === "string") return /^[A-Za-z0-9_.,:/@+%~-]+$/.test(v) ? v : safeText(JSON.stringify(v));
  if (v === undefined) return "undefined";
  if (typeof v === "number" || typeof v === "boolean" || v === null) return String(v);
  return safeText(JSON.stringify(v) ?? String(v));
}

function escapeKey(k: string): string {
  return /^[A-Za-z0-9_.-]+$/.test(k) ? k : safeText(JSON.stringify(k));
}

/** Line breaks and tabs spelled out as in JSON, every other control character and bidi override as \xHH/\uHHHH. */
function escapeText(s: string): string {
  return safeText(s.replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t"));
}
