// The process logger: pino JSON on stdout, with secrets redacted wherever they could appear.

import pino, { type Logger } from "pino";

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

export function createLogger(opts: { level: string; role: string; destination?: pino.DestinationStream }): Logger {
  return pino(
    {
      level: opts.level,
      base: { role: opts.role, pid: process.pid },
      redact: { paths: REDACT_PATHS, censor: "[redacted]" },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    opts.destination ?? pino.destination({ dest: 1, sync: true }),
  );
}
