// Small facts about addresses, shared by the roles that listen and the CLI that reports on them.

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
