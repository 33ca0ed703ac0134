// Starts a real head node in-process on 127.0.0.1 with a fresh data dir and a manual clock,
// plus small fetch helpers that carry the right token.

import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { startServer, type RunningServer } from "../../src/api/server";
import { ServeConfig } from "../../src/config";
import { ManualClock } from "../../src/control/clock";
import { T0 } from "./fleet";

export interface TestServer extends RunningServer {
  clock: ManualClock;
  admin(path: string, init?: RequestInit): Promise<Response>;
  agent(body: unknown, token?: string): Promise<Response>;
}

export async function testServer(overrides: Record<string, unknown> = {}, log: pino.Logger = pino({ level: "silent" })): Promise<TestServer> {
  const dataDir = mkdtempSync(join(tmpdir(), "llmgw-test-"));
  const config = ServeConfig.parse({ data_dir: dataDir, admin_listen: "127.0.0.1:0", listen: "127.0.0.1:0", ...overrides });
  const clock = new ManualClock(T0);
  const server = await startServer({ config, log, clock, loop: false });
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
    agent: (body: unknown, token = server.joinToken) =>
      fetch(`${server.adminUrl}/agent/v1/heartbeat`, {
        ...tls,
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: typeof body === "string" ? body : JSON.stringify(body),
      }),
  });
}
