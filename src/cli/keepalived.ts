// The keepalived configuration `llmgw install keepalived` writes: a floating address that
// follows the llmgw leader (a check running `llmgw healthz --leader` against the local serve), or,
// with --for database, the database's address following Patroni's primary (a check on Patroni's
// `GET /primary`). The check's failure puts the instance in FAULT (weight 0), so the address sits
// only where the check passes: on the one control plane that holds the lease.

import { UsageError } from "../config/flags";

export type KeepalivedFor = "llmgw" | "database";

export interface KeepalivedOptions {
  for: KeepalivedFor;
  /** The interface the address goes on (and VRRP adverts go out of). */
  interface: string;
  /** The floating address with its prefix, e.g. 10.0.0.100/24. */
  address: string;
  routerId: number;
  priority: number;
  /** The other head nodes' addresses: adverts go to them by unicast; none means multicast. */
  peers: string[];
  /** llmgw: the local serve's admin URL the check asks. */
  server: string;
  /** database: the local Patroni's REST API the check asks. */
  patroni: string;
  /** The llmgw binary the check runs (absolute). */
  binary: string;
  /** curl, for the database check (absolute). */
  curl: string;
  authPass: string;
  scriptUser: string;
}

export const KEEPALIVED_DEFAULTS = {
  server: "http://127.0.0.1:8001",
  patroni: "http://127.0.0.1:8008",
  priority: 100,
  routerId: { llmgw: 51, database: 52 },
  scriptUser: "nobody",
  confPath: "/etc/keepalived/keepalived.conf",
} as const;

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

export function isIpv4(s: string): boolean {
  return IPV4.test(s);
}

function integer(flag: string, text: string | undefined, fallback: number, min: number, max: number): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) throw new UsageError(`--${flag} must be a whole number from ${min} to ${max}, not "${text}"`);
  return Number(text);
}

function httpUrl(flag: string, text: string): string {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    throw new UsageError(`--${flag} must be a URL like ${flag === "patroni" ? KEEPALIVED_DEFAULTS.patroni : KEEPALIVED_DEFAULTS.server}, not "${text}"`);
  }
  if ((u.protocol !== "http:" && u.protocol !== "https:") || /[\s"'\\]/.test(text) || u.username || u.password || u.search || u.hash)
    throw new UsageError(`--${flag} must be a plain http(s) URL like ${flag === "patroni" ? KEEPALIVED_DEFAULTS.patroni : KEEPALIVED_DEFAULTS.server} (no credentials, query or spaces), not "${text}"`);
  return text.replace(/\/+$/, "");
}

/** Validates the flags of `install keepalived`, naming the flag at fault; fills in the defaults. */
export function keepalivedOptions(flags: Record<string, string | boolean | string[] | undefined>, binary: string, curl: string): KeepalivedOptions {
  const forText = (flags.for as string | undefined) ?? "llmgw";
  if (forText !== "llmgw" && forText !== "database") throw new UsageError(`--for must be llmgw or database, not "${forText}"`);
  const target: KeepalivedFor = forText;
  const iface = flags.interface as string | undefined;
  if (!iface) throw new UsageError("--interface is required: the network interface the floating address goes on, e.g. eth0");
  if (!/^[A-Za-z0-9_.:@-]{1,15}$/.test(iface)) throw new UsageError(`--interface must be an interface name like eth0 (at most 15 letters, digits, _ . : @ -), not "${iface}"`);
  if (iface === "lo") throw new UsageError("--interface lo is the loopback: VRRP needs the interface the head nodes share a network on, e.g. eth0");
  const address = flags.address as string | undefined;
  if (!address) throw new UsageError("--address is required: the floating address with its prefix length, e.g. 10.0.0.100/24");
  const m = /^([^/]+)\/(\d{1,2})$/.exec(address);
  if (!m || !isIpv4(m[1]!) || Number(m[2]) < 1 || Number(m[2]) > 32) throw new UsageError(`--address must be an IPv4 address with its prefix length like 10.0.0.100/24, not "${address}"`);
  const peers = ((flags.peer as string[] | undefined) ?? []).flatMap((p) => p.split(",")).map((p) => p.trim()).filter((p) => p !== "");
  for (const p of peers) {
    if (!isIpv4(p)) throw new UsageError(`--peer must be another head node's IPv4 address like 10.0.0.2, not "${p}"`);
    if (p === m[1]) throw new UsageError(`--peer ${p} is the floating address itself: give the other head nodes' own addresses`);
  }
  if (new Set(peers).size !== peers.length) throw new UsageError(`--peer lists an address twice: ${peers.join(", ")}`);
  if (target === "llmgw" && flags.patroni !== undefined) throw new UsageError("--patroni is for --for database (the database's address follows Patroni's primary)");
  if (target === "database" && flags.server !== undefined) throw new UsageError("--server is for --for llmgw (the llmgw leader's address); the database's follows --patroni");
  const routerId = integer("router-id", flags["router-id"] as string | undefined, KEEPALIVED_DEFAULTS.routerId[target], 1, 255);
  const authPass = (flags["auth-pass"] as string | undefined) ?? `llmgw${routerId}`;
  if (!/^[A-Za-z0-9_.+-]{1,8}$/.test(authPass)) throw new UsageError(`--auth-pass must be 1 to 8 letters, digits or _ . + - (VRRP sends at most 8), not "${authPass}"`);
  const scriptUser = (flags["script-user"] as string | undefined) ?? KEEPALIVED_DEFAULTS.scriptUser;
  if (!/^[a-z_][a-z0-9_-]{0,31}$/.test(scriptUser)) throw new UsageError(`--script-user must be a user name like nobody, not "${scriptUser}"`);
  for (const [what, path] of [["the llmgw binary", binary], ["curl", curl]] as const)
    if (!/^\/[A-Za-z0-9_@%+=:,./-]+$/.test(path)) throw new UsageError(`${what} is at "${path}": keepalived needs an absolute path without spaces or quotes (pass --binary)`);
  return {
    for: target,
    interface: iface,
    address,
    routerId,
    priority: integer("priority", flags.priority as string | undefined, KEEPALIVED_DEFAULTS.priority, 1, 254),
    peers,
    server: httpUrl("server", (flags.server as string | undefined) ?? KEEPALIVED_DEFAULTS.server),
    patroni: httpUrl("patroni", (flags.patroni as string | undefined) ?? KEEPALIVED_DEFAULTS.patroni),
    binary,
    curl,
    authPass,
    scriptUser,
  };
}

export function renderKeepalived(o: KeepalivedOptions): string {
  const llmgw = o.for === "llmgw";
  const name = llmgw ? "llmgw_leader" : "patroni_primary";
  const instance = llmgw ? "LLMGW" : "LLMGW_DATABASE";
  const script = llmgw ? `${o.binary} healthz --leader --server ${o.server} --timeout 1500ms` : `${o.curl} -fsS -o /dev/null --max-time 1.5 ${o.patroni}/primary`;
  const about = llmgw
    ? [
        "# The floating address follows the llmgw leader: the check asks the serve on this machine",
        "# whether it leads (GET /healthz?leader=1 answers 503 on a standby). Agents and clients",
        "# can use http://ADDRESS:PORT and reach whichever control plane leads.",
      ]
    : [
        "# The database's floating address follows Patroni's primary: the check asks the Patroni on",
        "# this machine (GET /primary answers 200 on the primary only). It needs curl (apt install curl).",
        "# Debian 12's vip-manager 1.0.2 would do the same, but it reads etcd's v2 API, which etcd 3.4",
        "# disables by default (--enable-v2): keepalived with this check is the simpler choice.",
      ];
  return `# Written by \`llmgw install keepalived${llmgw ? "" : " --for database"}\`. The same file goes on every head node,
# each listing the others as --peer (or none: multicast on ${o.interface}).
${about.join("\n")}
#
# A failing check puts this instance in FAULT (weight 0), which drops the address: it sits only
# where the check passes. nopreempt (with state BACKUP) keeps it where it is when a node with a
# higher priority comes back. The leader's check fails within 2 s of it no longer leading; the next
# leader's passes within 1 s of its taking the lease, and it holds the address about 3 s later.
global_defs {
    # Checks run as this user, never as root; refuse scripts a non-root user could change.
    script_user ${o.scriptUser}
    enable_script_security
}

vrrp_script ${name} {
    script "${script}"
    interval 1
    timeout 2
    fall 2
    rise 1
    weight 0
}

vrrp_instance ${instance} {
    state BACKUP
    nopreempt
    interface ${o.interface}
    virtual_router_id ${o.routerId}
    priority ${o.priority}
    advert_int 1
    # VRRP's password travels in clear: it only keeps another VRRP group on this network with
    # the same virtual_router_id from joining. Every head node needs the same one.
    authentication {
        auth_type PASS
        auth_pass ${o.authPass}
    }
${
  o.peers.length > 0
    ? `    unicast_peer {
${o.peers.map((p) => `        ${p}`).join("\n")}
    }
`
    : ""
}    virtual_ipaddress {
        ${o.address} dev ${o.interface}
    }
    track_script {
        ${name}
    }
}
`;
}
