// What the heartbeat says of this node's weights: the revisions it holds (per file verified) and
// its disk, from a scan of the models directory (weights-disk.ts) made after each change the
// fetcher reports and at the inventory's pace, never on the heartbeat's path (a scan reads the
// directory; the heartbeat reads the last one).

import type { Logger } from "pino";
import { errorText } from "../lib/format";
import type { DiskReport, WeightsHeld } from "../protocol/weights";
import type { Pace } from "./pace";
import { type WeightsDisk, heldForHeartbeat } from "./weights-disk";

export class WeightsStock {
  private held: WeightsHeld[] | undefined;
  private disk: DiskReport | undefined;
  private scanning: Promise<void> | null = null;
  private again = false;

  constructor(private readonly o: { disk: WeightsDisk; log: Logger; pace: Pace; intervalMs: number }) {}

  /** The last scan's figures for the heartbeat (nothing before the first scan). */
  report(): { weights_held?: WeightsHeld[]; disk?: DiskReport } {
    return { ...(this.held !== undefined ? { weights_held: this.held } : {}), ...(this.disk !== undefined ? { disk: this.disk } : {}) };
  }

  /** Scans again (once more after the scan under way, when one is); the head node hears of it soon after. */
  refresh(): Promise<void> {
    if (this.scanning !== null) {
      this.again = true;
      return this.scanning;
    }
    this.scanning = (async () => {
      // The head node hears soon of files that came or went, not of every change of free space.
      const before = this.held === undefined ? undefined : JSON.stringify(this.held);
      do {
        this.again = false;
        try {
          const held = await this.o.disk.held();
          this.held = heldForHeartbeat(held);
          this.disk = await this.o.disk.report(held);
        } catch (e) {
          this.o.log.warn({ err: errorText(e) }, "scanning the weights under the models directory failed; reporting the previous scan");
        }
      } while (this.again);
      this.scanning = null;
      if (before !== undefined && JSON.stringify(this.held) !== before) this.o.pace.heartbeatSoon();
    })();
    return this.scanning;
  }

  /** Scans at the inventory's pace until the agent stops. */
  async loop(): Promise<void> {
    while (!this.o.pace.stopping) {
      await this.refresh();
      await this.o.pace.sleep(this.o.intervalMs, false);
    }
  }
}
