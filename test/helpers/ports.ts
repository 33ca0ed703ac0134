// Ports for servers and engines that tests start. They come from below the kernel's ephemeral
// range: a port from that range (what port 0 hands out) can be taken at any moment as the local
// end of some outgoing connection, and then an engine, or a restarted server, cannot listen on it.

import { readFileSync } from "node:fs";

export const EPHEMERAL_LOW = (() => {
  try {
    return Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || 32_768;
  } catch {
    return 32_768;
  }
})();

function canListen(port: number): boolean {
  try {
    const probe = Bun.serve({ hostname: "127.0.0.1", port, fetch: () => new Response() });
    void probe.stop(true);
    return true;
  } catch {
    return false;
  }
}

/** A free port starting a block of `size` free-looking ports, all below the ephemeral range. */
export function freePort(size = 1): number {
  const low = 10_000;
  const high = Math.max(low + size + 1, EPHEMERAL_LOW - size);
  for (;;) {
    const p = low + Math.floor(Math.random() * (high - low));
    if (canListen(p) && (size === 1 || canListen(p + size - 1))) return p;
  }
}
