// Small, stable, non-cryptographic hashes (ring positions, simulated uuids, port spreading).
// A leaf: imports nothing.

export const FNV_OFFSET = 0x811c9dc5;
export const FNV_PRIME = 0x01000193;

/** One FNV-1a step: folds a 16-bit code unit (or any small integer) into h. */
export function fnvStep(h: number, c: number): number {
  return Math.imul(h ^ c, FNV_PRIME);
}

/** FNV-1a over a string's UTF-16 code units, unsigned 32 bits. */
export function fnv1a(s: string, seed = 0): number {
  let h = (FNV_OFFSET ^ seed) >>> 0;
  for (let i = 0; i < s.length; i++) h = fnvStep(h, s.charCodeAt(i));
  return h >>> 0;
}

/** murmur3's 32-bit finaliser: spreads look-alike inputs over the whole range. */
export function mix32(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

/** FNV-1a then murmur3's finaliser: a well-spread stable string hash. */
export function hash32(s: string, seed = 0): number {
  return mix32(fnv1a(s, seed));
}
