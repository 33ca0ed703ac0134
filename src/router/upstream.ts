// The router's HTTP/1.1 client to engines lives in src/http/client.ts (the wire module, shared
// with the server); this path keeps its importers working.
export * from "../http/client";
