// GPU time per request: a request's GPU-seconds are its share of its replica, the replica's GPUs
// × each moment it held a slot there ÷ the requests in flight on that replica at that moment. Each
// replica keeps a virtual clock V(t) = ∫ gpus / inflight(t) dt, advanced whenever a request starts
// or ends on it; a request notes V when it starts, and its GPU-seconds are V(end) − V(start).
// O(1) per start and end, nothing allocated per request (a clock per replica, made once). The
// sum over the requests of a replica is the replica's GPUs × the time it had any request in
// flight: idle time is nobody's. Time is the injected scheduler's monotonic clock.

import type { Scheduler } from "../lib/scheduler";
import type { EndpointInfo } from "../protocol/routing";

/** One replica's virtual clock. */
export class GpuClock {
  /** GPU-seconds per request in flight since the clock began. */
  v = 0;
  /** When v was last advanced (ms, monotonic). */
  last = 0;
  /** Requests in flight on the replica, as this clock counts them. */
  inflight = 0;

  /** Moves v to `now` at the rate of the replica's `gpus` shared by the requests in flight until now. */
  advance(now: number, gpus: number): void {
    if (this.inflight > 0 && now > this.last) this.v += (gpus * (now - this.last)) / 1000 / this.inflight;
    if (now > this.last) this.last = now;
  }

  /** A request starts: v as it starts, to subtract at its end. */
  start(now: number, gpus: number): number {
    this.advance(now, gpus);
    this.inflight++;
    return this.v;
  }

  /** A request that started at `v0` ends: its GPU-seconds. */
  end(now: number, gpus: number, v0: number): number {
    this.advance(now, gpus);
    if (this.inflight > 0) this.inflight--;
    const d = this.v - v0;
    return d > 0 ? d : 0;
  }
}

/** The endpoint as the balancer hands it in a lease: the clock is kept with it. */
interface Metered {
  readonly info: Pick<EndpointInfo, "gpus">;
}

/** The clocks of every replica a request was sent to, kept as long as the replica's state lives. */
export class GpuTime {
  private readonly clocks = new WeakMap<Metered, GpuClock>();

  constructor(private readonly time: Pick<Scheduler, "mono">) {}

  /** A request took a slot on `ep`: the value to hand back to end(). */
  start(ep: Metered): number {
    let c = this.clocks.get(ep);
    if (c === undefined) {
      c = new GpuClock();
      c.last = this.time.mono();
      this.clocks.set(ep, c);
    }
    return c.start(this.time.mono(), ep.info.gpus ?? 0);
  }

  /** The request that started at `v0` left its slot on `ep`: its GPU-seconds there. */
  end(ep: Metered, v0: number): number {
    const c = this.clocks.get(ep);
    return c === undefined ? 0 : c.end(this.time.mono(), ep.info.gpus ?? 0, v0);
  }
}
