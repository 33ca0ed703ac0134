// utf8Text (src/router/router.ts): the request body as text for JSON.parse, which must be
// exactly what TextDecoder's default decode gives (one leading BOM dropped, what is not UTF-8
// replaced by U+FFFD as WHATWG says), through a decoder JSON.parse reads faster.

import { describe, expect, test } from "bun:test";
import { utf8Text } from "../../src/router/request-body";

const dec = new TextDecoder();
const b = (...x: number[]) => new Uint8Array(x);

describe("utf8Text reads a body as TextDecoder does", () => {
  test("BOMs, truncated and overlong sequences, surrogates, code points past U+10FFFF", () => {
    const cases = [
      b(),
      b(0xef, 0xbb, 0xbf),
      b(0xef, 0xbb, 0xbf, 0x7b, 0x7d),
      b(0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf, 0x7b),
      b(0xef, 0xbb),
      b(0xc0, 0x80),
      b(0xed, 0xa0, 0x80),
      b(0xf4, 0x90, 0x80, 0x80),
      b(0xe2, 0x82),
      b(0xf0, 0x9f, 0x98),
      b(0xff, 0x41),
      new TextEncoder().encode('{"model":"mé","x":"日本 😀"}'),
    ];
    for (const c of cases) expect(utf8Text(c)).toBe(dec.decode(c));
    expect(utf8Text(b(0xef, 0xbb, 0xbf, 0x41))).toBe("A");
  });

  test("a view into a bigger buffer is read from its own start", () => {
    const big = new Uint8Array(64).fill(0x41);
    big.set([0xef, 0xbb, 0xbf], 10);
    for (const [a, z] of [[10, 20], [11, 20], [0, 64], [10, 13]] as const) expect(utf8Text(big.subarray(a, z))).toBe(dec.decode(big.subarray(a, z)));
  });

  test("random bytes, mostly the ones UTF-8 is made of", () => {
    // A fixed seed: a failure can be replayed.
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
    const alphabet = [0x22, 0x41, 0x7b, 0x80, 0x9f, 0xa0, 0xbb, 0xbf, 0xc2, 0xc0, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff, 0x90];
    for (let i = 0; i < 20000; i++) {
      const n = 1 + Math.floor(rnd() * 10);
      const c = new Uint8Array(n);
      for (let j = 0; j < n; j++) c[j] = rnd() < 0.8 ? alphabet[Math.floor(rnd() * alphabet.length)]! : Math.floor(rnd() * 256);
      const want = dec.decode(c);
      const got = utf8Text(c);
      if (got !== want) expect({ bytes: [...c], got }).toEqual({ bytes: [...c], got: want });
    }
  });
});
