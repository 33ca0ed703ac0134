// Small facts about addresses, shared by the roles that listen and the CLI that reports on them.

import { isIP } from "node:net";

/** Whether a listen host only accepts connections from this machine (127.0.0.0/8, ::1, localhost). */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost" || h === "::1" || h === "0:0:0:0:0:0:0:1") return true;
  if (h.startsWith("::ffff:")) return isLoopbackHost(h.slice(7));
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** A host as it goes in a URL or host:port: IPv6 literals in brackets, once. */
export function bracketHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

/** host:port with IPv6 bracketing. */
export function hostPort(host: string, port: number): string {
  return `${bracketHost(host)}:${port}`;
}

/**
 * An address in one spelling: IPv4-mapped IPv6 as IPv4, IPv6 compressed and lower-case, no
 * brackets; a host name lower-case. Two spellings of one address compare equal after this.
 */
export function canonicalAddress(raw: string): string {
  let a = raw.trim().replace(/^\[|\]$/g, "").toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (mapped) return mapped[1]!;
  if (isIP(a) === 6) {
    try {
      a = new URL(`http://[${a}]/`).hostname.replace(/^\[|\]$/g, "");
    } catch {
      // Not parseable after all: compared as given.
    }
    const m2 = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(a);
    if (m2) {
      const hi = parseInt(m2[1]!, 16);
      const lo = parseInt(m2[2]!, 16);
      return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
    }
  }
  return a;
}
