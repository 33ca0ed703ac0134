// The byte and text helpers the server and the engine client share live in the wire module
// (src/http/wire.ts); this path keeps its importers working.
export { concat, digits, headEnd, isToken, latin1Bytes, latin1Slice, latin1Write, TCHAR, BAD_HEAD_BYTE, trimOws } from "../http/wire";
