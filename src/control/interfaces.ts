// Where the control plane meets the router: the interfaces live in protocol/routing.ts so
// neither side imports the other; re-exported here for the control plane's own code.

export type { ApiKeyEntry, CatalogEntry, DemandSink, EndpointInfo, EndpointSink, LimitUseEntry, UsageSource } from "../protocol/routing";
