// Starts a real head node in-process on 127.0.0.1 with a fresh data dir and a manual clock,
// plus small fetch helpers that carry the right token.

import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { startServer, type RunningServer } from "../../src/api/server";
import { ServeConfig } from "../../src/config";
import { SegmentName } from "../../src/protocol/common";
import { ManualClock } from "../../src/control/clock";
import { T0 } from "./fleet";

export interface TestServer extends RunningServer {
  clock: ManualClock;
  admin(path: string, init?: RequestInit): Promise<Response>;
  /**
   * A heartbeat through HTTP. Without a token it speaks as the node it names, the way an agent
   * does: the join token the first time, that node's credential after (kept in `credentials`),
   * with the node's reported address allowed (tests report made-up addresses from 127.0.0.1).
   * With a token, exactly that token and nothing else.
   */
  agent(body: unknown, token?: string): Promise<Response>;
  /** Credentials the helper's heartbeats got, by node. */
  credentials: Map<string, string>;
}

export async function testServer(overrides: Record<string, unknown> = {}, log: pino.Logger = pino({ level: "silent" })): Promise<TestServer> {
  const dataDir = mkdtempSync(join(tmpdir(), "llmgw-test-"));
  const config = ServeConfig.parse({ data_dir: dataDir, admin_listen: "127.0.0.1:0", listen: "127.0.0.1:0", ...overrides });
  const clock = new ManualClock(T0);
  const server = await startServer({ config, log, clock, loop: false });
  const credentials = new Map<string, string>();
  // A server with tls_cert: the helpers trust that certificate.
  const tls = config.tls_cert ? { tls: { ca: readFileSync(config.tls_cert, "utf8") } } : {};
  return Object.assign(server, {
    clock,
    admin: (path: string, init: RequestInit = {}) =>
      fetch(`${server.adminUrl}${path}`, {
        ...tls,
        ...init,
        headers: { authorization: `Bearer ${server.adminToken}`, "content-type": "application/json", ...(init.headers as Record<string, string>) },
      }),
    credentials,
    agent: async (body: unknown, token?: string) => {
      const hb = typeof body === "object" && body !== null ? (body as { node?: unknown; address?: unknown }) : {};
      const node = typeof hb.node === "string" ? hb.node : undefined;
      if (token === undefined && node !== undefined && typeof hb.address === "string" && SegmentName.safeParse(node).success && hb.address.length <= 255)
        try {
          if ((await server.store.nodeTrust(node)).allowedAddress !== hb.address) await server.store.setAllowedAddress(node, hb.address, clock.now());
        } catch {
          // A store that cannot take the write (a test of a locked or full disk) refuses the heartbeat too.
        }
      const presented = token ?? (node !== undefined ? credentials.get(node) : undefined) ?? server.joinToken;
      const res = await fetch(`${server.adminUrl}/agent/v1/heartbeat`, {
        ...tls,
        method: "POST",
        headers: { authorization: `Bearer ${presented}`, "content-type": "application/json" },
        body: typeof body === "string" ? body : JSON.stringify(body),
      });
      if (res.ok && node !== undefined) {
        const answer = (await res.clone().json()) as { credential?: string };
        if (answer.credential) credentials.set(node, answer.credential);
      }
      return res;
    },
  });
}
