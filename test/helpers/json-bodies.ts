// Request bodies that are costly to parse, for the router's body limits: the ones a red team
// sent (megabytes of nesting, one very wide object) and the costliest ones the router still
// accepts (as deep, as many values, as large as its limits allow). Shared by the body tests
// and test/bench/body-flood.ts, so both send the same bytes.

const enc = new TextEncoder();

/** `[[[…]]]` nested `levels` deep (2 bytes a level). */
export function deepArrays(levels: number): Uint8Array {
  return enc.encode("[".repeat(levels) + "]".repeat(levels));
}

/** A chat body whose first message's content is nested `levels` deep. */
export function deepChat(levels: number, model = "m"): Uint8Array {
  return enc.encode(`{"model":${JSON.stringify(model)},"messages":[{"role":"user","content":${"[".repeat(levels)}${"]".repeat(levels)}}]}`);
}

/** One object with `keys` distinct members, each key padded to `keyChars` characters. */
export function wideObject(keys: number, keyChars = 8, model?: string): Uint8Array {
  const parts: string[] = model === undefined ? [] : [`"model":${JSON.stringify(model)}`];
  const more = keys - parts.length;
  for (let i = 0; i < more; i++) {
    const k = String(i);
    parts.push(`"${"k".repeat(Math.max(1, keyChars - k.length))}${k}":1`);
  }
  return enc.encode(`{${parts.join(",")}}`);
}

/** A wide object of about `bytes` bytes (distinct keys of 8 characters). */
export function wideObjectOfSize(bytes: number): Uint8Array {
  return wideObject(Math.floor(bytes / 13));
}

/** A chat body with one image as a base64 data URL, `bytes` long in all. */
export function imageChat(bytes: number, model = "m"): Uint8Array {
  const shell = (img: string) => JSON.stringify({ model, messages: [{ role: "user", content: [{ type: "text", text: "What is in this picture?" }, { type: "image_url", image_url: { url: `data:image/png;base64,${img}` } }] }] });
  const fixed = shell("").length;
  return enc.encode(shell("iVBORw0K".repeat(Math.ceil((bytes - fixed) / 8)).slice(0, bytes - fixed)));
}

/**
 * Arrays nested `depth` deep (the body's own object and the member holding them counted), side
 * by side until `values` values: as deep as a limit allows, as many times as the other allows.
 */
export function deepMany(depth: number, values: number, model = "m"): Uint8Array {
  const inner = depth - 2;
  const one = "[".repeat(inner) + "]".repeat(inner);
  const n = Math.max(1, Math.floor(values / inner) - 1);
  return enc.encode(`{"model":${JSON.stringify(model)},"x":[${Array(n).fill(one).join(",")}]}`);
}

/**
 * What the router's body scan should count in a parsed value: array elements and object members
 * at every level, and the deepest level of arrays and objects (the value itself is level 1).
 * Without recursion: a fuzzed body may nest deeper than the stack.
 */
export function jsonShape(v: unknown): { values: number; depth: number } {
  let values = 0;
  let depth = 0;
  const todo: [unknown, number][] = [[v, 1]];
  while (todo.length > 0) {
    const [x, level] = todo.pop()!;
    if (x === null || typeof x !== "object") continue;
    depth = Math.max(depth, level);
    const kids = Array.isArray(x) ? x : Object.values(x as object);
    values += kids.length;
    for (const k of kids) todo.push([k, level + 1]);
  }
  return { values, depth };
}
