// Digests and secret comparison, in one place: SHA-256 of tokens and credentials (all a store
// keeps of them), HMAC-derived keys, and constant-time comparison of a presented secret with an
// expected one. The architecture test allows node:crypto's hashing nowhere else, so a new caller
// cannot compare secrets with `===` or hash them some other way by accident.

import { createHash, createHmac, timingSafeEqual } from "node:crypto";

/**
 * SHA-256 of a UTF-8 string, hex (64 characters). Bun's one-shot hash: the router hashes every
 * request's key, and this takes about 0.2 µs where createHash's object takes 0.5.
 */
export function sha256hex(s: string): string {
  return Bun.SHA256.hash(s, "hex");
}

/** SHA-256 of a UTF-8 string or bytes, raw (32 bytes). */
export function sha256(s: string | Uint8Array): Buffer {
  return createHash("sha256").update(s).digest();
}

/** SHA-256 of a UTF-8 string, base64url (43 characters): short enough for a map key or cookie index. */
export function sha256base64url(s: string): string {
  return createHash("sha256").update(s).digest("base64url");
}

/** HMAC-SHA256 of `message` under `key`, hex. */
export function hmacSha256hex(key: string, message: string): string {
  return createHmac("sha256", key).update(message).digest("hex");
}

/**
 * Whether two secrets are equal, in constant time over their digests: neither content nor
 * length leaks through timing. Both are hashed even when one is empty.
 */
export function sameSecret(presented: string, expected: string): boolean {
  return timingSafeEqual(sha256(presented), sha256(expected));
}

/** Whether `presented` hashes to `digest` (32 raw bytes), in constant time. */
export function matchesDigest(presented: string, digest: Uint8Array): boolean {
  return digest.length === 32 && timingSafeEqual(sha256(presented), digest);
}

/** Constant-time equality of two byte strings of any lengths (unequal lengths are unequal, found in constant time over the digests). */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return timingSafeEqual(sha256(a), sha256(b));
}

/** The token of an `Authorization: Bearer <token>` header (the scheme case-insensitive), or undefined. */
export function bearerToken(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return m?.[1];
}

/** A digest of a file's bytes fed as they arrive (weights checked against their listed sha256 or git blob sha1), hex at the end. */
export interface ContentHash {
  update(bytes: Uint8Array | string): void;
  hex(): string;
}

export function contentHash(algo: "sha256" | "sha1"): ContentHash {
  const h = createHash(algo);
  return {
    update(bytes) {
      h.update(bytes);
    },
    hex: () => h.digest("hex"),
  };
}
