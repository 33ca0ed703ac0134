// The one logger shape of the agent. Every part takes an AgentLogger (pino's Logger is one; a
// test may pass a stand-in) and the loops hand each part a child bound to `component`
// ("runner", "logs"). Field conventions, the same in every file: `replica` (a replica id),
// `engine_pid`, `port`, `path`, `url`, and `err` as one line of text (lib/format errorText),
// never an Error object.

type LogFn = (obj: object, msg?: string) => void;

export interface AgentLogger {
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
}

/** For a part constructed without a logger (unit tests). */
export const silentLogger: AgentLogger = { debug() {}, info() {}, warn() {}, error() {} };
