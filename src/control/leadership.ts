// Whether this control plane leads, under which epoch: the one thing about a head node that
// changes at run time and that every part reads. A single head node always leads (epoch 0);
// among several on one store the lease keeper (ha.ts) sets it, and a plan write the store fenced
// is handed to whoever keeps the lease (without one, this control plane steps down by itself).

import type { FencedError } from "./errors";
import type { Leadership } from "./ha";

export type { Leadership };

/** What the parts read of leadership. */
export interface LeadershipView {
  get(): Leadership;
}

export class LeadershipCell implements LeadershipView {
  private value: Leadership;
  private readonly fencing = new Set<(e: FencedError) => void>();

  /** @param onGain told whenever this control plane starts to lead (a new leader reconciles at once, not on the next tick). */
  constructor(
    initial: Leadership,
    private readonly onGain: () => void = () => {},
  ) {
    this.value = initial;
  }

  get(): Leadership {
    return this.value;
  }

  set(l: Leadership): void {
    const was = this.value.leading;
    this.value = l;
    if (l.leading && !was) this.onGain();
  }

  /** Who decides what a fenced write means (the lease keeper) from now on; returns how to stop. */
  onFenced(fn: (e: FencedError) => void): () => void {
    this.fencing.add(fn);
    return () => this.fencing.delete(fn);
  }

  /** A plan write the store fenced: the keeper hears of it, or without one this control plane stops leading. */
  fenced(e: FencedError): void {
    if (this.fencing.size === 0) this.value = { ...this.value, leading: false };
    else for (const fn of [...this.fencing]) fn(e);
  }
}
