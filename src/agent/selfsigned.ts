// A self-signed certificate for the agent's log listener, made without openssl: an ECDSA P-256
// key and a minimal X.509 v3 certificate (DER by hand) naming the node's address. The head
// node trusts exactly this certificate, which the agent reports in its heartbeats.

import { createPrivateKey, generateKeyPairSync, randomBytes, sign, X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { realScheduler } from "../lib/scheduler";

function len(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v >>= 8) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}
const tlv = (tag: number, ...parts: Buffer[]) => {
  const body = Buffer.concat(parts);
  return Buffer.concat([Buffer.from([tag]), len(body.length), body]);
};
const seq = (...p: Buffer[]) => tlv(0x30, ...p);
const oid = (dotted: string) => {
  const [a, b, ...rest] = dotted.split(".").map(Number);
  const out = [a! * 40 + b!];
  for (const v of rest) {
    const enc = [v & 0x7f];
    for (let x = v >> 7; x > 0; x >>= 7) enc.unshift((x & 0x7f) | 0x80);
    out.push(...enc);
  }
  return tlv(0x06, Buffer.from(out));
};
const utf8 = (s: string) => tlv(0x0c, Buffer.from(s, "utf8"));
const time = (d: Date) => {
  const s = d.toISOString().replace(/[-:T]/g, "").slice(0, 14) + "Z";
  // UTCTime until 2049, GeneralizedTime after (RFC 5280 §4.1.2.5).
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(s.slice(2))) : tlv(0x18, Buffer.from(s));
};

function ipBytes(ip: string): Buffer {
  if (isIP(ip) === 4) return Buffer.from(ip.split(".").map(Number));
  const [head, tail] = ip.split("::") as [string, string | undefined];
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  const groups = tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill("0"), ...t];
  return Buffer.from(groups.flatMap((g) => [parseInt(g, 16) >> 8, parseInt(g, 16) & 0xff]));
}

/**
 * A key and certificate (PEM) valid for `names` (IP addresses or host names) for ten years from
 * `now` (wall-clock ms; a day before it, against clock skew).
 */
export function selfSignedCertificate(names: string[], now: number = realScheduler.now()): { cert: string; key: string; fingerprint256: string } {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const ecdsaSha256 = seq(oid("1.2.840.10045.4.3.2"));
  const name = seq(tlv(0x31, seq(oid("2.5.4.3"), utf8("llmgw agent log listener"))));
  const alt = names.map((n) => {
    const bare = n.replace(/^\[|\]$/g, "");
    return isIP(bare) ? tlv(0x87, ipBytes(bare)) : tlv(0x82, Buffer.from(bare, "ascii"));
  });
  const notAfter = new Date(now + 10 * 365 * 86_400_000);
  const serial = randomBytes(16);
  serial[0]! &= 0x7f;
  const extensions = tlv(
    0xa3,
    seq(
      seq(oid("2.5.29.19"), tlv(0x01, Buffer.from([0xff])), tlv(0x04, seq())), // basicConstraints: critical, not a CA
      seq(oid("2.5.29.17"), tlv(0x04, seq(...alt))), // subjectAltName
    ),
  );
  const tbs = seq(
    tlv(0xa0, tlv(0x02, Buffer.from([2]))),
    tlv(0x02, serial),
    ecdsaSha256,
    name,
    seq(time(new Date(now - 86_400_000)), time(notAfter)),
    name,
    publicKey.export({ type: "spki", format: "der" }) as Buffer,
    extensions,
  );
  const signature = sign("sha256", tbs, privateKey);
  const der = seq(tbs, ecdsaSha256, tlv(0x03, Buffer.concat([Buffer.from([0]), signature])));
  const cert = `-----BEGIN CERTIFICATE-----\n${der.toString("base64").match(/.{1,64}/g)!.join("\n")}\n-----END CERTIFICATE-----\n`;
  const key = privateKey.export({ type: "pkcs8", format: "pem" }) as string;
  // Parsing it back checks the encoding before anyone relies on it.
  const x = new X509Certificate(cert);
  if (!x.checkPrivateKey(createPrivateKey(key))) throw new Error("generated certificate does not match its key");
  return { cert, key, fingerprint256: x.fingerprint256 };
}
