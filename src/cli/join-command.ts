// `llmgw join-command`: the exact `llmgw agent …` line to run on each GPU node, with an address
// this head node's admin listener really accepts (or, with several control planes, the list the
// operator names), reading the join token from a file, and the node's --fabric to fill in.
// `serve` prints it on first start too.

import { type NetworkInterfaceInfo, networkInterfaces } from "node:os";
import { resolve } from "node:path";
import { DEFAULT_DATA_DIR, readServerInfo, readTokenFile, type ServerInfo } from "../config/datadir";
import { bracketHost, isLoopbackHost } from "../lib/net";
import { Name } from "../protocol/common";
import { CliError } from "./client";
import type { Command } from "./command";

type Interfaces = NodeJS.Dict<NetworkInterfaceInfo[]>;

/** The first non-internal address of an interface (IPv4 unless `v6`), with the interface's name. */
export function primaryInterface(interfaces: Interfaces = networkInterfaces(), v6 = false): { address: string; name: string } | undefined {
  for (const family of v6 ? ["IPv4", "IPv6"] : ["IPv4"])
    for (const [name, list] of Object.entries(interfaces))
      for (const a of list ?? []) if (a.family === family && !a.internal && !a.address.startsWith("fe80:")) return { address: a.address, name };
  return undefined;
}

/** The first non-internal IPv4 address, which other machines are most likely to reach. */
export function primaryAddress(): string | undefined {
  return primaryInterface()?.address;
}

/** The interface an address is on, if it is one of this machine's. */
function interfaceOf(address: string, interfaces: Interfaces): string | undefined {
  const a = address.replace(/^\[|\]$/g, "").toLowerCase();
  for (const [name, list] of Object.entries(interfaces)) for (const x of list ?? []) if (x.address.toLowerCase() === a) return name;
  return undefined;
}

/** host and port of "host:port" / "[v6]:port". */
function splitListen(listen: string): { host: string; port: string } | undefined {
  const m = /^\[?(.*?)\]?:(\d+)$/.exec(listen);
  return m ? { host: m[1]!, port: m[2]! } : undefined;
}

/** Where an agent is to reach the admin listener, and a line saying why that address. */
export interface JoinAddress {
  url: string;
  note: string;
}

/**
 * The admin URL to give GPU nodes: one the admin listener accepts. Its --advertise-url when set;
 * when it listens on one address, that one (a loopback one is said to reach this machine only);
 * when it listens on all, `address` or an address of an interface that exists, named. An
 * `address` the listener refuses is an error. A server.json from before admin_listen was kept is
 * read by its admin_url's host.
 */
export function joinAddress(info: Pick<ServerInfo, "admin_url" | "admin_listen" | "advertise_url">, address: string | undefined, interfaces: Interfaces): JoinAddress {
  const url = new URL(info.admin_url);
  const listen = (info.admin_listen ? splitListen(info.admin_listen) : undefined) ?? { host: url.hostname.replace(/^\[|\]$/g, ""), port: url.port };
  const at = (host: string) => {
    const u = new URL(info.admin_url);
    u.hostname = bracketHost(host);
    u.port = listen.port;
    return u.origin;
  };
  const wildcard = listen.host === "" || listen.host === "0.0.0.0" || listen.host === "::";
  if (address === undefined && info.advertise_url) return { url: info.advertise_url.replace(/\/+$/, ""), note: "the --advertise-url serve was started with" };
  if (isLoopbackHost(listen.host)) {
    const fix = `restart serve with --admin-listen 0.0.0.0:${listen.port} (or this machine's address) for GPU nodes elsewhere`;
    if (address !== undefined && !isLoopbackHost(address))
      throw new CliError(`serve's admin listener accepts connections on ${bracketHost(listen.host)}:${listen.port} only, so an agent cannot join at ${address}: ${fix}`);
    return { url: at(address ?? listen.host), note: `serve listens on ${bracketHost(listen.host)}:${listen.port} only: an agent on this machine can join, no other; ${fix}` };
  }
  if (!wildcard) {
    const host = address ?? listen.host;
    if (host.replace(/^\[|\]$/g, "").toLowerCase() !== listen.host.toLowerCase())
      throw new CliError(`serve's admin listener accepts connections on ${bracketHost(listen.host)}:${listen.port} only, not at ${address}: leave --address out, or restart serve with --admin-listen ${bracketHost(address!)}:${listen.port}`);
    return { url: at(listen.host), note: `the address serve's admin listener is on (${bracketHost(listen.host)}:${listen.port})` };
  }
  if (address !== undefined) {
    const on = interfaceOf(address, interfaces);
    return { url: at(address), note: on ? `--address, on interface ${on}; serve listens on all addresses` : `--address, not an address of this machine: it must lead here (NAT, DNS) to port ${listen.port}` };
  }
  const primary = primaryInterface(interfaces, listen.host === "::");
  if (!primary) return { url: at(listen.host === "::" ? "::1" : "127.0.0.1"), note: "this machine has no network interface but loopback: only an agent on this machine can join" };
  return { url: at(primary.address), note: `the address of interface ${primary.name} (serve listens on all addresses; another interface's address works too, or give --address)` };
}

/**
 * Why a serve's data dir may hold no join token, and what to do: it was given to serve by flag,
 * or (several control planes on one store, which keeps only its digest) this one was never given
 * a copy, or the token was rotated on another control plane since.
 */
export function noJoinToken(path: string): string {
  return (
    `no join token in ${path}: this serve holds no copy of it. It was given to serve with --join-token (or LLMGW_JOIN_TOKEN), or, with several control planes on one store, ` +
    "it was made or last rotated on another control plane (the store keeps only its digest): run join-command there, or copy that control plane's join.token here (mode 0600); " +
    "`llmgw join-token rotate` here makes a new one instead (the old one then stops admitting nodes on every control plane)"
  );
}

/** What the printed command has for --fabric until the operator fills it in. */
export const FABRIC_PLACEHOLDER = "FABRIC";

/**
 * The agent command line, reading the join token from a file on the node: a token on a command
 * line ends up in shell history and in `ps`.
 */
export function joinCommand(serverUrl: string, tokenFile: string, o: { servers?: readonly string[]; fabric?: string } = {}): string {
  const server = o.servers && o.servers.length > 0 ? o.servers.join(",") : serverUrl;
  return `llmgw agent --server ${server} --token-file ${tokenFile} --fabric ${o.fabric ?? FABRIC_PLACEHOLDER}`;
}

/** What `serve` prints on first start and `join-command` prints: where the token is, the address and why, and the command. */
export function joinInstructions(where: JoinAddress, tokenPath: string, o: { servers?: readonly string[]; fabric?: string } = {}): string {
  const list = o.servers && o.servers.length > 0;
  return [
    `To add a GPU node: the join token is in ${tokenPath} on this head node. Copy that file to the node (same path, mode 0600), then run there:`,
    "",
    `  # server: ${list ? "the control planes given with --server-list" : where.note}`,
    ...(o.fabric === undefined
      ? [`  # ${FABRIC_PLACEHOLDER}: replace it with the name of the node's network fabric (its InfiniBand/NVLink island; nodes of one multi-node replica share one), or pass --fabric NAME to join-command`]
      : []),
    `  ${joinCommand(where.url, tokenPath, o)}`,
    "",
    `(or LLMGW_TOKEN="$(cat ${tokenPath})" llmgw agent --server …). The token admits new nodes only; each node then gets its own credential and no longer needs it. Keep it secret; \`llmgw join-token rotate\` replaces it.`,
    "",
  ].join("\n");
}

export const command: Command = {
  name: "join-command",
  summary: "Print the command that joins a GPU node to this head node.",
  usage: "llmgw join-command [--address HOST | --server-list URL,URL…] [--fabric NAME] [--data-dir DIR]",
  flags: {
    address: {
      kind: "string",
      value: "HOST",
      help: "address GPU nodes reach this head node at; refused when serve's admin listener does not accept it (default: --advertise-url, else the address serve listens on, else, listening on all, the first non-loopback IPv4 interface's)",
    },
    "server-list": {
      kind: "string",
      value: "URL,URL…",
      help: "several control planes: the admin URLs (or the floating address) the agent is to fail over between, comma-separated, printed instead of this head node's",
    },
    fabric: { kind: "string", value: "NAME", help: `the node's network fabric, put in the command (default: the placeholder ${FABRIC_PLACEHOLDER}, explained in a comment line)` },
    "data-dir": { kind: "string", value: "DIR", help: `the server's data dir (default ${DEFAULT_DATA_DIR})` },
    help: { kind: "boolean", short: "h", help: "show this help" },
  },
  details:
    "Run it on the head node, beside `llmgw serve`. It says where the join token is (the data dir's join.token) and prints the agent command that reads it from a file (--token-file), never the token itself: a token on a command line ends up in shell history and `ps`. The --server address is one serve's admin listener accepts, and a comment line says why that one: a serve listening on 127.0.0.1 only is reachable from this machine alone, and the line says how to open it.",
  examples: ["./llmgw join-command", "./llmgw join-command --address 10.0.0.1 --fabric ib-a", "./llmgw join-command --server-list http://10.0.0.1:8001,http://10.0.0.2:8001,http://10.0.0.3:8001"],
  async run({ flags }) {
    const list = flags["server-list"] as string | undefined;
    if (list !== undefined && flags.address !== undefined) throw new CliError("give --address or --server-list, not both: the list names every address itself");
    const fabric = flags.fabric as string | undefined;
    if (fabric !== undefined) {
      const ok = Name.safeParse(fabric);
      if (!ok.success) throw new CliError(`--fabric: ${ok.error.issues.map((i) => i.message).join("; ")}`);
    }
    let servers: string[] | undefined;
    if (list !== undefined) {
      const { ServerList } = await import("../config");
      const parsed = ServerList.safeParse(list);
      if (!parsed.success) throw new CliError(`--server-list: ${parsed.error.issues.map((i) => i.message).join("; ")}`);
      servers = parsed.data;
    }
    const dataDir = (flags["data-dir"] as string | undefined) ?? process.env.LLMGW_DATA_DIR ?? DEFAULT_DATA_DIR;
    const info = readServerInfo(dataDir);
    const token = readTokenFile(dataDir, "join.token");
    if (!info) throw new CliError(`no server data in ${dataDir}: run this beside \`llmgw serve\` (or pass --data-dir)`);
    if (!token) throw new CliError(noJoinToken(resolve(dataDir, "join.token")));
    const where = servers ? { url: info.admin_url, note: "" } : joinAddress(info, flags.address as string | undefined, networkInterfaces());
    process.stdout.write(joinInstructions(where, resolve(dataDir, "join.token"), { ...(servers ? { servers } : {}), ...(fabric !== undefined ? { fabric } : {}) }));
  },
};
