// The event log as the control plane writes and the operator reads it: what happened, to what
// (node/NAME, model/NAME, replica/ID, key/NAME, head), and when, by this control plane's clock.
// Plans carry their own events (written in the plan's transaction); this is for the rest: an
// operator's action, a head node falling behind, a refusal worth an operator's eye.

import type { Scheduler } from "../lib/scheduler";
import type { EventView } from "../protocol/views";
import type { EventsPort } from "./store-port";

export class EventLog {
  constructor(private readonly o: { store: EventsPort; scheduler: Pick<Scheduler, "now"> }) {}

  /** Appends an event, now. */
  async event(kind: string, subject: string, message: string, data?: unknown): Promise<void> {
    await this.o.store.appendEvent({ at: this.o.scheduler.now(), kind, subject, message, data });
  }

  /** Events after `afterId` (oldest first), or the newest `limit`, as the API shows them. */
  async events(opts: { afterId?: number; limit: number; subject?: string }): Promise<EventView[]> {
    return (await this.o.store.listEvents(opts)).map((e) => ({ id: e.id, at: new Date(e.at).toISOString(), kind: e.kind, subject: e.subject, message: e.message }));
  }
}
