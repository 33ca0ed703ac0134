// Defaults of the admin API that a client outside zod states too: the CLI's quick commands do
// not load zod, so they read these constants, and the schemas default to the same ones.
// A leaf: imports nothing.

/** Log lines from the end a replica's log starts with (`GET …/logs?tail=`, `llmgw logs --tail`). */
export const LOG_TAIL_DEFAULT = 200;
