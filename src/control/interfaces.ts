// Where the control plane meets the router. Two small interfaces in opposite directions, so
// neither imports the other and they can later live in separate processes: the control plane
// decides what should run and publishes it (EndpointSink); the router is the only one that
// knows whether anyone wants it, and reports that (UsageSource).

export interface EndpointInfo {
  /** Replica id. */
  id: string;
  /** Base URL without a trailing slash. */
  url: string;
  /** The model's name first, then its aliases: clients may use any of them. */
  models: string[];
  engine: string;
  pool: string;
  weight: number;
  /** The profile's priority tier; lower is preferred. */
  priority: number;
}

export interface EndpointSink {
  setEndpoints(endpoints: EndpointInfo[]): void;
}

/**
 * When each replica was last sent a request (ms since epoch). A snapshot read once a tick,
 * not an event stream: per-request notification would carry one bit (the newest stamp wins)
 * at a cost that grows with traffic. Absent means unknown, never idle.
 */
export interface UsageSource {
  lastUsed(): ReadonlyMap<string, number>;
}
