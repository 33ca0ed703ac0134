// Child processes for the network benches: each one started in its own process group (so a
// kill reaches anything it spawned), optionally pinned to CPUs with taskset, its URL read from
// its first line of output, and all of them killed when the bench ends — normally, on error,
// or on Ctrl-C.

import { readFileSync } from "node:fs";
import type { Subprocess } from "bun";
import { ROUTER_DEFAULTS } from "../../helpers/router-settings";

export const ROOT = new URL("../../../", import.meta.url).pathname.replace(/\/$/, "");
export const BUN = process.execPath;

export interface Child {
  name: string;
  pid: number;
  /** The first http://host:port the child printed, when waited for. */
  url: string;
  proc: Subprocess<"ignore", "pipe", "pipe">;
  /** Everything the child wrote to stderr so far (for error messages). */
  stderr(): string;
  /** Lines the child wrote to stdout after its URL line. */
  lines: string[];
  /** Resolves once stdout is closed (every line is in `lines`). */
  outputDone: Promise<void>;
  /** Resolves with the next stdout line matching re. */
  waitLine(re: RegExp, timeoutMs?: number): Promise<string>;
  kill(): Promise<void>;
}

const live = new Set<Child>();

export interface SpawnOptions {
  /** CPU list for taskset, e.g. "1" or "0,1"; absent: not pinned. */
  cpus?: string;
  env?: Record<string, string>;
  /** Raise the soft fd limit to this (a shell runs `ulimit -n` and then execs the command). */
  nofile?: number;
  /**
   * Run at this nice value (`nice -n`; below 0 needs root, else nice warns and runs it at 0): the
   * processes under measurement ahead of other people's on a shared machine.
   */
  nice?: number;
  /** Wait for a printed http URL (default true). */
  waitUrl?: boolean;
  timeoutMs?: number;
  cwd?: string;
}

export async function spawnChild(name: string, cmd: string[], o: SpawnOptions = {}): Promise<Child> {
  let argv = o.cpus !== undefined ? ["taskset", "-c", o.cpus, ...cmd] : cmd;
  if (o.nice !== undefined) argv = ["nice", "-n", String(o.nice), ...argv];
  // exec keeps one pid all the way down (sh → taskset → program), so /proc/<pid> is the program.
  if (o.nofile !== undefined) argv = ["sh", "-c", `ulimit -n ${o.nofile} && exec "$@"`, "sh", ...argv];
  const proc = Bun.spawn(argv, {
    cwd: o.cwd ?? ROOT,
    env: { ...process.env, ...o.env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    detached: true,
  });
  let errText = "";
  const lines: string[] = [];
  const waiters: { re: RegExp; resolve: (l: string) => void }[] = [];
  let ended = false;
  const onLine = (l: string) => {
    const i = waiters.findIndex((w) => w.re.test(l));
    if (i >= 0) waiters.splice(i, 1)[0]!.resolve(l);
    else lines.push(l);
  };
  const outputDone = (async () => {
    const dec = new TextDecoder();
    let buf = "";
    for await (const chunk of proc.stdout) {
      buf += dec.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        onLine(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    }
    if (buf) onLine(buf);
    ended = true;
  })().catch(() => {});
  void (async () => {
    const dec = new TextDecoder();
    for await (const chunk of proc.stderr) errText = (errText + dec.decode(chunk, { stream: true })).slice(-8000);
  })().catch(() => {});

  const waitLine = (re: RegExp, timeoutMs = o.timeoutMs ?? 15_000) =>
    new Promise<string>((resolve, reject) => {
      const have = lines.findIndex((l) => re.test(l));
      if (have >= 0) return resolve(lines.splice(have, 1)[0]!);
      const t = setTimeout(() => reject(new Error(`${name}: no line matching ${re} within ${timeoutMs} ms${ended ? " (it exited)" : ""}; stderr:\n${errText}`)), timeoutMs);
      const w = {
        re,
        resolve: (l: string) => {
          clearTimeout(t);
          resolve(l);
        },
      };
      waiters.push(w);
      void proc.exited.then(() =>
        setTimeout(() => {
          if (waiters.includes(w)) {
            clearTimeout(t);
            reject(new Error(`${name} exited with ${proc.exitCode} before printing ${re}; stderr:\n${errText}`));
          }
        }, 50),
      );
    });

  const child: Child = {
    name,
    pid: proc.pid,
    url: "",
    proc,
    lines,
    outputDone,
    stderr: () => errText,
    waitLine,
    kill: async () => {
      live.delete(child);
      await killGroup(proc);
    },
  };
  live.add(child);
  if (o.waitUrl !== false) {
    try {
      const line = await waitLine(/http:\/\/[\w.:[\]-]+/);
      child.url = /http:\/\/[\w.:[\]-]+/.exec(line)![0].replace(/\/$/, "");
    } catch (e) {
      await child.kill();
      throw e;
    }
  }
  return child;
}

async function killGroup(proc: Subprocess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(-proc.pid, s);
    } catch {
      try {
        proc.kill(s);
      } catch {
        // already gone
      }
    }
  };
  signal("SIGTERM");
  const done = await Promise.race([proc.exited.then(() => true), Bun.sleep(3000).then(() => false)]);
  if (!done) {
    signal("SIGKILL");
    await proc.exited;
  }
}

/** Kills every child still running, all in parallel. */
export async function killAll(): Promise<void> {
  await Promise.all([...live].map((c) => c.kill()));
}

let installed = false;
/** On Ctrl-C / SIGTERM / an uncaught error, kill the children before exiting. */
export function cleanupOnExit(): void {
  if (installed) return;
  installed = true;
  const bail = (code: number) => () => {
    void killAll().finally(() => process.exit(code));
  };
  process.on("SIGINT", bail(130));
  process.on("SIGTERM", bail(143));
  process.on("uncaughtException", (e) => {
    console.error(e);
    bail(1)();
  });
  process.on("unhandledRejection", (e) => {
    console.error(e);
    bail(1)();
  });
}

/** A port free right now on 127.0.0.1 (for programs that cannot be told to pick one, like nginx). */
export function freePort(): number {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const p = s.port;
  s.stop(true);
  return p;
}

/** Starts a fake engine as its own process (source, not the compiled binary). */
export function fakeEngineProc(
  name: string,
  f: { model: string; ttftMs: number; tokenDelayMs: number; tokens: number; slots: number; cacheBlocks?: number; flushEvents?: boolean },
  o: SpawnOptions = {},
): Promise<Child> {
  return spawnChild(
    name,
    [
      BUN,
      "src/sim/fake-engine.ts",
      "--port",
      "0",
      "--model",
      f.model,
      "--ttft-ms",
      String(f.ttftMs),
      "--token-delay-ms",
      String(f.tokenDelayMs),
      "--tokens",
      String(f.tokens),
      "--slots",
      String(f.slots),
      ...(f.cacheBlocks !== undefined ? ["--cache-blocks", String(f.cacheBlocks)] : []),
      ...(f.flushEvents ? ["--flush-events"] : []),
    ],
    o,
  );
}

/**
 * Starts test/bench/lib/router-main.ts in front of the given engine URLs, Bun's fetch limit
 * lifted, with the config schema's router settings (read here, so the router's process need
 * not load the app to get them).
 */
export function routerProc(name: string, model: string, engineUrls: string[], o: SpawnOptions & { metricsIntervalMs?: number; extraArgs?: string[] } = {}): Promise<Child> {
  const endpoints = engineUrls.map((url, i) => ({ id: `e${i}`, url, models: [model], engine: "vllm", pool: "default", weight: 1, priority: 0 }));
  return spawnChild(name, [BUN, "test/bench/lib/router-main.ts", "--port", "0", "--model", model, "--metrics-ms", String(o.metricsIntervalMs ?? 1000), ...(o.extraArgs ?? [])], {
    ...o,
    env: { LLMGW_BENCH_ENDPOINTS: JSON.stringify(endpoints), LLMGW_BENCH_ROUTER_SETTINGS: JSON.stringify(ROUTER_DEFAULTS), ...o.env },
  });
}

/** nginx, one worker, as a keep-alive reverse proxy with unbuffered responses. */
export async function nginxProc(name: string, upstream: string, o: SpawnOptions = {}): Promise<Child & { dir: string }> {
  const dir = (await Bun.$`mktemp -d /tmp/llmgw-bench-nginx.XXXXXX`.text()).trim();
  const port = freePort();
  const up = upstream.replace(/^http:\/\//, "");
  const conf = `worker_processes 1;
daemon off;
master_process on;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 20000; multi_accept on; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  upstream engine {
    server ${up};
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:${port} backlog=4096;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }
  }
}
`;
  await Bun.write(`${dir}/nginx.conf`, conf);
  const child = await spawnChild(name, ["nginx", "-c", `${dir}/nginx.conf`, "-p", dir], { ...o, waitUrl: false });
  child.url = `http://127.0.0.1:${port}`;
  // nginx prints nothing when it is up: poll until it answers.
  await answeringOrKilled(child, dir, async () => `nginx did not come up on ${child.url}: ${await Bun.file(`${dir}/error.log`).text().catch(() => "")}${child.stderr()}`);
  return Object.assign(child, { dir });
}

/**
 * haproxy, one thread, as a keep-alive reverse proxy that sends what it has at once
 * (`option http-no-delay`: no waiting to fill packets, the right setting for streamed tokens).
 */
export async function haproxyProc(name: string, upstream: string, o: SpawnOptions = {}): Promise<Child & { dir: string }> {
  const dir = (await Bun.$`mktemp -d /tmp/llmgw-bench-haproxy.XXXXXX`.text()).trim();
  const port = freePort();
  const up = upstream.replace(/^http:\/\//, "");
  const conf = `global
  nbthread 1
  maxconn 9000
defaults
  mode http
  option http-no-delay
  option http-keep-alive
  http-reuse always
  timeout connect 5s
  timeout client 600s
  timeout server 600s
  timeout http-keep-alive 75s
frontend fe
  bind 127.0.0.1:${port}
  default_backend engine
backend engine
  server e0 ${up}
`;
  await Bun.write(`${dir}/haproxy.cfg`, conf);
  const child = await spawnChild(name, ["haproxy", "-db", "-f", `${dir}/haproxy.cfg`], { ...o, waitUrl: false });
  child.url = `http://127.0.0.1:${port}`;
  await answeringOrKilled(child, dir, async () => `haproxy did not come up on ${child.url}: ${child.stderr()}`);
  return Object.assign(child, { dir });
}

/**
 * Polls a proxy that prints nothing when it is up until its /health answers (10 s at most: then
 * kills it and throws why()), and makes its kill() remove its scratch dir too.
 */
async function answeringOrKilled(child: Child, dir: string, why: () => Promise<string>): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      const r = await fetch(`${child.url}/health`);
      await r.arrayBuffer();
      break;
    } catch {
      if (Date.now() > deadline) {
        await child.kill();
        throw new Error(await why());
      }
      await Bun.sleep(50);
    }
  }
  const kill = child.kill;
  child.kill = async () => {
    await kill();
    await Bun.$`rm -rf ${dir}`.quiet().nothrow();
  };
}

/** VmRSS of a process in KiB, or -1 once it is gone. */
export function rssKiB(pid: number): number {
  try {
    const s = readFileSync(`/proc/${pid}/status`, "utf8");
    const m = /VmRSS:\s+(\d+)/.exec(s);
    return m ? Number(m[1]) : -1;
  } catch {
    return -1;
  }
}

export function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

/** A plain text table: first row is the header. */
export function table(rows: (string | number)[][]): string {
  const cells = rows.map((r) => r.map(String));
  const w = cells[0]!.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? "").length)));
  return cells
    .map((r, ri) => {
      // Figures right-aligned, words left-aligned.
      const line = r.map((c, i) => (/^[-+]?[\d.,]+( ?[a-zµ%]+)?$|^-$/.test(c) ? c.padStart(w[i]!) : c.padEnd(w[i]!))).join("  ").trimEnd();
      return ri === 0 ? `${line}\n${w.map((n) => "-".repeat(n)).join("  ")}` : line;
    })
    .join("\n");
}
