// The router's HTTP/1.1 server lives in src/http/server.ts (the wire module, shared with the
// admin/agent listener and the engine client); this path keeps its importers working.
export * from "../http/server";
