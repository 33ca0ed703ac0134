// serve's logs through the compiled binary: readable text lines with --log-format text, JSON
// lines when piped by default, and text (coloured unless NO_COLOR) on a pseudo-terminal, which
// `script` from util-linux gives it, as a person starting it in a terminal would.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { scratchWithBinary, until } from "../helpers/binary";

let dir: string;
let bin: string;
const started: { proc: Bun.Subprocess; dataDir: string }[] = [];

beforeAll(() => {
  ({ dir, bin } = scratchWithBinary());
});

afterAll(async () => {
  for (const s of started) await stop(s);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** serve's own pid, from the server.json it writes (under `script` it is not our child). */
function servePid(dataDir: string): number | undefined {
  try {
    return (JSON.parse(readFileSync(join(dataDir, "server.json"), "utf8")) as { pid: number }).pid;
  } catch {
    return undefined;
  }
}

async function stop(s: { proc: Bun.Subprocess; dataDir: string }): Promise<void> {
  const pid = servePid(s.dataDir);
  if (pid) {
    try {
      process.kill(pid, "SIGTERM");
    } catch {
      // Gone already.
    }
  }
  s.proc.kill("SIGTERM");
  await s.proc.exited;
}

/** Starts serve (argv[0] replaced by the binary), reads its stdout until `enough` says so, stops it; returns what it printed. */
async function serveOutput(name: string, argv: (bin: string, flags: string) => string[], env: Record<string, string> = {}): Promise<string> {
  const dataDir = join(dir, name);
  const flags = `serve --admin-listen 127.0.0.1:0 --listen 127.0.0.1:0 --data-dir ${dataDir}`;
  const proc = Bun.spawn(argv(bin, flags), { cwd: dir, env: { PATH: process.env.PATH ?? "", TERM: "xterm", ...env }, stdout: "pipe", stderr: "pipe" });
  const s = { proc, dataDir };
  started.push(s);
  let out = "";
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  void (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      out += decoder.decode(value, { stream: true });
    }
  })();
  await until(`${name}: serve logging "router listening"`, () => out.includes("router listening") && servePid(dataDir) !== undefined);
  await stop(s);
  return out;
}

const split = (flags: string) => flags.split(" ");
// eslint-disable-next-line no-control-regex
const ESC = /\x1b/;
const TEXT_LINE = /^\d\d:\d\d:\d\d (TRACE|DEBUG|INFO |WARN |ERROR|FATAL) \S/;

describe("serve's log format", () => {
  test("--log-format text: one readable line per record, key=value fields, no colour on a pipe", async () => {
    const out = await serveOutput("text", (b, f) => [b, ...split(f), "--log-format", "text"]);
    const lines = out.split("\n").filter(Boolean);
    expect(lines.length).toBeGreaterThan(2);
    for (const l of lines) expect(l).toMatch(TEXT_LINE);
    expect(out).toMatch(/^\d\d:\d\d:\d\d INFO  store opened path=\S+llmgw\.db dialect=sqlite$/m);
    expect(out).toMatch(/^\d\d:\d\d:\d\d INFO  router listening listen=127\.0\.0\.1:\d+ url=http:\/\/127\.0\.0\.1:\d+/m);
    expect(out).not.toContain('"level"');
    expect(ESC.test(out)).toBe(false);
  });

  test("piped, by default: JSON lines", async () => {
    const out = await serveOutput("json", (b, f) => [b, ...split(f)]);
    const lines = out.split("\n").filter(Boolean);
    expect(lines.length).toBeGreaterThan(2);
    const records = lines.map((l) => JSON.parse(l) as { level: number; msg: string; role: string });
    expect(records.map((r) => r.msg)).toContain("store opened");
    expect(records.every((r) => r.role === "serve" && typeof r.level === "number")).toBe(true);
  });

  test("on a terminal, by default: text, coloured; under NO_COLOR without colour; --log-format json keeps JSON there", async () => {
    const tty = (b: string, f: string, extra = "") => ["script", "-qfec", `exec ${b} ${f}${extra}`, "/dev/null"];
    const coloured = await serveOutput("tty", (b, f) => tty(b, f));
    // On a terminal serve's stderr (its "admin API on …" lines) is there too.
    const plain = coloured.replace(/\x1b\[\d+m/g, "");
    const lines = plain.split(/\r?\n/).filter((l) => l && !l.startsWith("llmgw serve:"));
    expect(lines.filter((l) => TEXT_LINE.test(l)).length).toBeGreaterThan(2);
    expect(lines.filter((l) => l.startsWith("{"))).toEqual([]);
    expect(plain).toMatch(/^\d\d:\d\d:\d\d INFO  store opened /m);
    expect(coloured).toContain("\x1b[32mINFO \x1b[0m");

    const noColor = await serveOutput("tty-nocolor", (b, f) => tty(b, f), { NO_COLOR: "1" });
    expect(noColor).toMatch(/^\d\d:\d\d:\d\d INFO  store opened /m);
    expect(ESC.test(noColor)).toBe(false);

    const json = await serveOutput("tty-json", (b, f) => tty(b, f, " --log-format json"));
    const records = json.split(/\r?\n/).filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as { msg: string });
    expect(records.map((r) => r.msg)).toContain("store opened");
    expect(json).not.toMatch(/^\d\d:\d\d:\d\d INFO /m);
  });

  test("--log-format takes auto, text or json, and says so otherwise", () => {
    const p = Bun.spawnSync([bin, "serve", "--log-format", "pretty", "--data-dir", join(dir, "bad")], { cwd: dir, env: { PATH: process.env.PATH ?? "" }, stdout: "pipe", stderr: "pipe" });
    expect(p.exitCode).not.toBe(0);
    expect(p.stderr.toString()).toContain("log_format");
    expect(p.stderr.toString()).toContain("must be auto, text or json");
    const help = Bun.spawnSync([bin, "serve", "--help"], { stdout: "pipe" }).stdout.toString();
    expect(help).toContain("--log-format FORMAT");
    expect(Bun.spawnSync([bin, "agent", "--help"], { stdout: "pipe" }).stdout.toString()).toContain("--log-format FORMAT");
    expect(Bun.spawnSync([bin, "demo", "--help"], { stdout: "pipe" }).stdout.toString()).toContain("--log-format FORMAT");
  });
});
