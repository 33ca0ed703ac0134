// Whether a port on this node is free, asked by listening on it for a moment. Kept apart from
// rendering (engines.ts is pure): the agent asks it after rendering a launch, before running it.

import { LaunchError } from "./engines";

/**
 * Throws LaunchError when something already listens on host:port. Otherwise the health check
 * would find whatever else listens there and call the replica ready.
 */
export function assertPortFree(host: string, port: number, replica: string): void {
  let probe: ReturnType<typeof Bun.serve>;
  try {
    probe = Bun.serve({ hostname: host.replace(/^\[|\]$/g, "") || "0.0.0.0", port, fetch: () => new Response(null, { status: 503 }) });
  } catch (e) {
    throw new LaunchError(`replica ${replica}: port ${port} on ${host} is already in use on this node (${(e as Error).message}); the engine could not listen there`);
  }
  void probe.stop(true);
}
