// Lists that cross between the control plane's thread and the router's as changes: every
// entry's key each time, in order, and whole only the entries that changed since the last
// message. At a 1,000-model catalog and a few thousand replicas a whole list is thousands of
// objects that the receiving thread must clone and validate (milliseconds the router's thread
// would not serve prompts, or the control plane's would not answer heartbeats), to learn that
// a few entries moved. The sender keeps what it sent, the receiver what it received, per key;
// messages between two threads arrive in order and are not lost, so the two stay in step. A
// sender to a new thread starts again with nothing sent (reset()), so its first message
// carries every entry. Used for the endpoint list and the catalog (control → router) and the
// traffic figures (router → control).

/** What crosses: the keys of the whole list in order, and the entries that changed. */
export interface ListDelta<T> {
  keys: string[];
  changed: T[];
}

/** The sending side. */
export class ListSent<T> {
  private sent = new Map<string, string>();

  constructor(private readonly keyOf: (t: T) => string) {}

  /**
   * The change from the last list sent to `all`. A key that comes twice keeps its first entry
   * (as the router's balancer does with a duplicate endpoint id): the receiver sees it once.
   */
  delta(all: readonly T[]): ListDelta<T> {
    const keys: string[] = [];
    const changed: T[] = [];
    const next = new Map<string, string>();
    for (const t of all) {
      const key = this.keyOf(t);
      if (next.has(key)) continue;
      const body = JSON.stringify(t);
      next.set(key, body);
      keys.push(key);
      if (this.sent.get(key) !== body) changed.push(t);
    }
    // Entries that are gone are forgotten, so one that comes back is sent whole again.
    this.sent = next;
    return { keys, changed };
  }

  /** The receiver is new: the next delta carries every entry. */
  reset(): void {
    this.sent = new Map();
  }
}

/** The receiving side. */
export class ListReceived<T> {
  private byKey = new Map<string, T>();
  /** Of the last message, keys whose entry was never received (0 while the two sides are in step). */
  missing = 0;

  constructor(private readonly keyOf: (t: T) => string) {}

  /**
   * Takes one message and returns the whole list in its order. A key whose entry was never
   * received (which a sender in step never sends) is left out rather than made up.
   */
  take(m: ListDelta<T>): T[] {
    for (const t of m.changed) this.byKey.set(this.keyOf(t), t);
    const next = new Map<string, T>();
    const out: T[] = [];
    this.missing = 0;
    for (const key of m.keys) {
      const t = this.byKey.get(key);
      if (t === undefined) this.missing++;
      if (t === undefined || next.has(key)) continue;
      next.set(key, t);
      out.push(t);
    }
    this.byKey = next;
    return out;
  }
}
