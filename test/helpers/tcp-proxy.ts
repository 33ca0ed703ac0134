// A small TCP proxy on 127.0.0.1 between one process and a server (a control plane and its
// PostgreSQL), to cut that one connection while everything else keeps its own: stop() closes
// every connection and refuses new ones (a clean cut), freeze() keeps them open but forwards
// nothing in either direction (a partition: no error, only silence), and start()/thaw() heal it.

import type { Socket, TCPSocketListener } from "bun";

interface Pair {
  client: Socket<Pair>;
  upstream: Socket<Pair> | undefined;
  /** What the client sent before the upstream connection was open. */
  pending: Uint8Array[];
}

export class TcpProxy {
  private listener: TCPSocketListener<Pair> | undefined;
  private readonly pairs = new Set<Pair>();
  private frozen = false;

  constructor(
    private readonly target: { host: string; port: number },
    /** Where it listens; 0 = any free port (fixed after the first start). */
    public port = 0,
  ) {}

  get url(): string {
    return `127.0.0.1:${this.port}`;
  }

  start(): void {
    if (this.listener) return;
    const self = this;
    this.listener = Bun.listen<Pair>({
      hostname: "127.0.0.1",
      port: this.port,
      socket: {
        open(client) {
          const pair: Pair = { client, upstream: undefined, pending: [] };
          client.data = pair;
          self.pairs.add(pair);
          void Bun.connect<Pair>({
            hostname: self.target.host,
            port: self.target.port,
            socket: {
              open(up) {
                up.data = pair;
                pair.upstream = up;
                for (const chunk of pair.pending) up.write(chunk);
                pair.pending = [];
              },
              data(_up, chunk) {
                if (!self.frozen) pair.client.write(chunk);
              },
              close() {
                self.drop(pair);
              },
              error() {
                self.drop(pair);
              },
            },
          }).catch(() => self.drop(pair));
        },
        data(client, chunk) {
          const pair = client.data;
          if (self.frozen) return;
          if (pair.upstream) pair.upstream.write(chunk);
          else pair.pending.push(new Uint8Array(chunk));
        },
        close(client) {
          self.drop(client.data);
        },
        error(client) {
          self.drop(client.data);
        },
      },
    });
    this.port = this.listener.port;
  }

  /** Every connection closed, new ones refused. */
  stop(): void {
    this.listener?.stop(true);
    this.listener = undefined;
    for (const p of [...this.pairs]) this.drop(p);
  }

  /** Connections stay open; nothing passes either way. */
  freeze(): void {
    this.frozen = true;
  }

  /** Forwarding again; the connections frozen (whose bytes were lost) are closed, so their ends reconnect. */
  thaw(): void {
    for (const p of [...this.pairs]) this.drop(p);
    this.frozen = false;
  }

  private drop(p: Pair | undefined): void {
    if (!p || !this.pairs.has(p)) return;
    this.pairs.delete(p);
    p.client.end();
    p.upstream?.end();
  }
}
