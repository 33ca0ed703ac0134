// The files this node is still fetching, as its peers may read them: a peer copy need not wait
// for the whole file (the head node may point a node at a peer that is itself receiving it, so
// copies form a chain or fan out behind the one Hub download of the fabric). The fetcher says
// how many bytes of each partial copy have reached the disk and how it ended; the server
// (weights-serve.ts) reads only those bytes, waiting for more as they arrive. A reader never
// sees bytes the fetcher has not written, and learns when the copy failed (its checksum, its
// source) so its own copy stops too: the receiver verifies the whole file in any case.

import type { Scheduler } from "../lib/scheduler";

export type GrowingEnd = "whole" | "failed" | "stopped";

/** One partial copy being written: `path` is its `.incomplete` file under the models directory. */
export class GrowingFile {
  /** Bytes of the file on disk (from its first byte). */
  written: number;
  ended: GrowingEnd | undefined;
  /** Readers waiting for more than `at` bytes. */
  private readonly waiters = new Set<{ at: number; wake: () => void }>();

  constructor(
    readonly path: string,
    readonly size: number,
    have: number,
  ) {
    this.written = have;
  }

  /** n more bytes reached the disk. */
  grow(n: number): void {
    this.written += n;
    this.wake();
  }

  end(how: GrowingEnd): void {
    if (this.ended !== undefined) return;
    this.ended = how;
    this.wake();
  }

  /**
   * Resolves when more than `at` bytes are written or the copy ended (true), or after ms with
   * neither (false): the source stalled.
   */
  wait(at: number, ms: number, scheduler: Pick<Scheduler, "after">): Promise<boolean> {
    if (this.written > at || this.ended !== undefined) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (ok: boolean) => {
        timer.cancel();
        this.waiters.delete(w);
        resolve(ok);
      };
      const w = { at, wake: () => done(true) };
      const timer = scheduler.after(ms, () => done(false));
      this.waiters.add(w);
    });
  }

  private wake(): void {
    for (const w of [...this.waiters]) if (this.written > w.at || this.ended !== undefined) w.wake();
  }
}

/** The partial copies being written now, by repo, revision and path; and waits for one to begin. */
export class GrowingFiles {
  private readonly files = new Map<string, GrowingFile>();
  private readonly starting = new Map<string, Set<() => void>>();

  /** A copy starts writing (or starts again from `have` bytes): any earlier one of the file ends. */
  begin(repo: string, revision: string, path: string, partial: string, size: number, have: number): GrowingFile {
    const k = key(repo, revision, path);
    this.files.get(k)?.end("stopped");
    const f = new GrowingFile(partial, size, have);
    this.files.set(k, f);
    for (const w of [...(this.starting.get(k) ?? [])]) w();
    return f;
  }

  /** The copy ended; it is read no more by new requests (a whole one is served from its blob). */
  finish(repo: string, revision: string, path: string, f: GrowingFile, how: GrowingEnd): void {
    f.end(how);
    const k = key(repo, revision, path);
    if (this.files.get(k) === f) this.files.delete(k);
  }

  /** Requests waiting now for a copy to begin. */
  get awaiting(): number {
    let n = 0;
    for (const s of this.starting.values()) n += s.size;
    return n;
  }

  get(repo: string, revision: string, path: string): GrowingFile | undefined {
    return this.files.get(key(repo, revision, path));
  }

  /**
   * The copy of a file, waiting up to ms for it to begin: a peer may ask for a file the head
   * node ordered here in the same plan a moment before this node started fetching it.
   */
  async await(repo: string, revision: string, path: string, ms: number, scheduler: Pick<Scheduler, "after">): Promise<GrowingFile | undefined> {
    const k = key(repo, revision, path);
    const now = this.files.get(k);
    if (now !== undefined || ms <= 0) return now;
    await new Promise<void>((resolve) => {
      let set = this.starting.get(k);
      if (!set) this.starting.set(k, (set = new Set()));
      const done = () => {
        timer.cancel();
        set!.delete(done);
        if (set!.size === 0 && this.starting.get(k) === set) this.starting.delete(k);
        resolve();
      };
      const timer = scheduler.after(ms, done);
      set.add(done);
    });
    return this.files.get(k);
  }
}

const key = (repo: string, revision: string, path: string) => `${repo}@${revision}/${path}`;
