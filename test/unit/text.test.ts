// The one sanitiser (lib/text.ts) and the printable-text schemas built on it: what is replaced
// by what, that the output is printable and stable under a second pass, that a stream split
// anywhere reads as the whole, and that a refused field is named with the character found.

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { SafeTextStream, editDistance, firstUnsafe, nearest, safeDeep, safeText } from "../../src/lib/text";
import { Labels, Printable, PrintableMultiline } from "../../src/protocol/common";
import { HeartbeatRequest } from "../../src/protocol/heartbeat";
import { ModelSpec } from "../../src/protocol/catalog";

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]/;
// eslint-disable-next-line no-control-regex
const CONTROL_BUT_NL_TAB = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]/;
/** Every bidi and invisible format character the sanitiser spells out (besides the line separators, which become spaces). */
const FORMAT_CHARS = [0x061c, 0x200b, 0x200c, 0x200d, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x2066, 0x2067, 0x2068, 0x2069, 0x206a, 0x206f, 0xfeff];

describe("safeText", () => {
  test("the issue's sequences are spelled out, visible and inert", () => {
    expect(safeText("\u001b[2J\u001b[41m FAKE BANNER")).toBe("\\x1b[2J\\x1b[41m FAKE BANNER");
    expect(safeText("0.1\u001b]0;pwned\u0007")).toBe("0.1\\x1b]0;pwned\\x07");
    expect(safeText("a\u0000b\u007fc\u009bd")).toBe("a\\x00b\\x7fc\\x9bd");
    expect(safeText("\u202eevil\u2066x\u2069")).toBe("\\u202eevil\\u2066x\\u2069");
    expect(safeText("line\nnext\ttab\r\u000b\u2028")).toBe("line next tab   ");
    expect(safeText("lone \ud800 surrogate")).toBe("lone \ufffd surrogate");
  });

  test("printable text, any script, emoji and markup, is left exactly as it is", () => {
    for (const s of ["NVIDIA H100 80GB HBM3", "A100-80GB/3g.40gb", "مرحبا بالعالم", "👩👍🏽", "<script>alert(1)</script>", "café ü ß", ""]) expect(safeText(s)).toBe(s);
  });

  test("bidi marks (LRM, RLM, ALM) and invisible format characters are spelled out on one line and in multi-line text, and refused by Printable", () => {
    // The issue's case: a right-to-left mark reorders what a terminal shows, and is drawn as nothing.
    expect(safeText("gpu-01\u200f\u200e")).toBe("gpu-01\\u200f\\u200e");
    for (const c of FORMAT_CHARS) {
      const ch = String.fromCharCode(c);
      const hex = c.toString(16).padStart(4, "0");
      expect(safeText(`a${ch}b`)).toBe(`a\\u${hex}b`);
      expect(safeText(`a${ch}b\nc`, { multiline: true })).toBe(`a\\u${hex}b\nc`);
      expect(firstUnsafe(`ab${ch}`)).toEqual({ at: 2, code: `U+${hex.toUpperCase()}` });
      expect(Printable(16).safeParse(`x${ch}`).success).toBe(false);
    }
    // An emoji sequence joined by U+200D shows as its parts, the joiners spelled out.
    expect(safeText("👩\u200d👩")).toBe("👩\\u200d👩");
  });

  test("multi-line keeps newline and tab, turns CR and CRLF into newlines, spells out the rest", () => {
    expect(safeText("a\r\nb\rc\nd\te\u001b[31m\u000b\u2028", { multiline: true })).toBe("a\nb\nc\nd\te\\x1b[31m  ");
  });

  test("for any string: no control left, and a second pass changes nothing", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 60 }), (s) => {
        const one = safeText(s);
        expect(CONTROL.test(one)).toBe(false);
        expect(safeText(one)).toBe(one);
        const multi = safeText(s, { multiline: true });
        expect(CONTROL_BUT_NL_TAB.test(multi)).toBe(false);
        expect(multi).not.toContain("\r");
        expect(safeText(multi, { multiline: true })).toBe(multi);
        expect(firstUnsafe(one)).toBeUndefined();
      }),
      { numRuns: 2000, seed: 11 },
    );
  });

  test("safeDeep sanitises every string and key at any depth and keeps everything else", () => {
    const v = JSON.parse('{"a\\u001bk":["x\\u0007",{"n":1,"b":true,"z":null,"__proto__":"\\u009b"}]}');
    const out = safeDeep(v) as Record<string, unknown>;
    expect(JSON.stringify(out)).toBe('{"a\\\\x1bk":["x\\\\x07",{"n":1,"b":true,"z":null,"__proto__":"\\\\x9b"}]}');
    expect(Object.getPrototypeOf((out["a\\x1bk"] as unknown[])[1])).toBe(Object.prototype);
  });
});

describe("SafeTextStream", () => {
  test("split at every position, a log reads as the whole sanitised at once", () => {
    const text = "loading 10%\rloading 50%\r\ndone\u001b[0m\nok ✓ \u00e9\r\n";
    const bytes = new TextEncoder().encode(text);
    const whole = safeText(text, { multiline: true });
    for (let i = 0; i <= bytes.length; i++) {
      for (let j = i; j <= bytes.length; j += 3) {
        const s = new SafeTextStream();
        const out = s.push(bytes.slice(0, i)) + s.push(bytes.slice(i, j)) + s.push(bytes.slice(j)) + s.end();
        expect(out).toBe(whole);
      }
    }
    expect(whole).toBe("loading 10%\nloading 50%\ndone\\x1b[0m\nok ✓ \u00e9\n");
  });
});

describe("printable schemas", () => {
  test("Printable refuses a control, naming the character and where it is", () => {
    const r = Printable(64).safeParse("ok\u001b[2J");
    expect(r.success).toBe(false);
    expect(r.error!.issues[0]!.message).toBe("must be printable text: control or bidi character U+001B at position 2");
    expect(Printable(4).safeParse("12345").error!.issues[0]!.message).toBe("must be at most 4 characters");
    expect(Printable(64).parse("NVIDIA H100 80GB HBM3")).toBe("NVIDIA H100 80GB HBM3");
  });

  test("PrintableMultiline neutralises instead of refusing, and keeps the end of an over-long text", () => {
    expect(PrintableMultiline(100).parse("Traceback\r\n  \u001b[31mError\u001b[0m")).toBe("Traceback\n  \\x1b[31mError\\x1b[0m");
    const long = PrintableMultiline(10).parse("\u001b\u001b\u001b\u001bEND");
    expect(long.length).toBe(10);
    expect(long.endsWith("END")).toBe(true);
  });

  test("a label key or value with a control is refused, the key named as it can be shown", () => {
    const k = Labels.safeParse({ "rack\u001b]0;x\u0007": "r1" });
    expect(k.error!.issues.map((i) => [i.path.join("."), i.message])).toEqual([["rack\\x1b]0;x\\x07", "label key must be printable text: control or bidi character U+001B at position 4"]]);
    const v = Labels.safeParse({ rack: "r1\u009b" });
    expect(v.error!.issues.map((i) => i.path.join("."))).toEqual(["rack"]);
    expect(Labels.safeParse({ "": "x" }).error!.issues[0]!.message).toBe("label key must not be empty");
  });

  test("the issue's heartbeat is refused naming gpus.0.class and agent_version", () => {
    const r = HeartbeatRequest.safeParse({
      node: "gpu-01",
      address: "10.0.0.7",
      agent_version: "\u001b]0;pwned\u0007",
      gpus: [{ index: 0, uuid: "GPU-0", name: "NVIDIA H100", class: "\u001b[2J\u001b[41m FAKE BANNER", memory_mib: 81559, healthy: true }],
    });
    expect(r.success).toBe(false);
    expect(r.error!.issues.map((i) => i.path.join(".")).sort()).toEqual(["agent_version", "gpus.0.class"]);
  });

  test("every node-reported string field is checked", () => {
    const base = { node: "n", address: "10.0.0.7", gpus: [{ index: 0, uuid: "GPU-0", name: "x", class: "c", memory_mib: 1, healthy: true, parent: "GPU-p" }], replicas: [{ id: "r-1", state: "failed", error: "e" }] };
    const bad = "x\u0085y";
    const cases: [string, (b: typeof base) => unknown][] = [
      ["address", (b) => ({ ...b, address: bad })],
      ["agent_version", (b) => ({ ...b, agent_version: bad })],
      ["gpus.0.uuid", (b) => ({ ...b, gpus: [{ ...b.gpus[0]!, uuid: bad }] })],
      ["gpus.0.name", (b) => ({ ...b, gpus: [{ ...b.gpus[0]!, name: bad }] })],
      ["gpus.0.class", (b) => ({ ...b, gpus: [{ ...b.gpus[0]!, class: bad }] })],
      ["gpus.0.parent", (b) => ({ ...b, gpus: [{ ...b.gpus[0]!, parent: bad }] })],
      ["replicas.0.id", (b) => ({ ...b, replicas: [{ ...b.replicas[0]!, id: bad }] })],
      ["labels.k", (b) => ({ ...b, labels: { k: bad } })],
      ["fabrics.0", (b) => ({ ...b, fabrics: [bad] })],
      ["models.0", (b) => ({ ...b, models: [bad] })],
    ];
    expect(HeartbeatRequest.safeParse(base).success).toBe(true);
    for (const [path, make] of cases) {
      const r = HeartbeatRequest.safeParse(make(base));
      expect({ path, refused: r.success ? [] : r.error.issues.map((i) => i.path.join(".")) }).toEqual({ path, refused: [path] });
    }
    // The engine's stderr tail is neutralised, not refused.
    const hb = HeartbeatRequest.parse({ ...base, replicas: [{ id: "r-1", state: "failed", error: "boom\u001b[2J\r\n" }] });
    expect(hb.replicas[0]!.error).toBe("boom\\x1b[2J\n");
  });

  test("catalog strings shown to operators are checked: gpu_class and pool", () => {
    const m = (p: Record<string, unknown>, extra: Record<string, unknown> = {}) => ModelSpec.safeParse({ name: "m", ...extra, profiles: [{ name: "p", engine: "vllm", gpu_class: "H100", ...p }] });
    expect(m({}).success).toBe(true);
    expect(m({ gpu_class: "H100\u001b[2J" }).error!.issues.map((i) => i.path.join("."))).toEqual(["profiles.0.gpu_class"]);
    expect(m({}, { pool: "team\u202ea" }).error!.issues.map((i) => i.path.join("."))).toEqual(["pool"]);
  });
});

describe("nearest word", () => {
  test("edit distance counts single-letter edits, ignoring case", () => {
    expect(editDistance("nods", "nodes")).toBe(1);
    expect(editDistance("idle_timout", "idle_timeout")).toBe(1);
    expect(editDistance("H100-80gb", "h100-80GB")).toBe(0);
    expect(editDistance("", "abc")).toBe(3);
    expect(editDistance("modles", "models")).toBe(1);
  });
  test("suggests only what is near enough to be meant", () => {
    const commands = ["nodes", "models", "status", "serve", "replicas"];
    expect(nearest("nods", commands)).toBe("nodes");
    expect(nearest("STATUS", commands)).toBe("status");
    expect(nearest("modles", commands)).toBe("models");
    expect(nearest("x", commands)).toBeUndefined();
    expect(nearest("frobnicate", commands)).toBeUndefined();
    expect(nearest("anything", [])).toBeUndefined();
  });
});
