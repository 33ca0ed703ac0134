// What a node's heartbeat says that is not inventory, as one control plane stores it for the
// others on the same store (node_reports.report): its engines, why GPU discovery failed or a
// GPU is unhealthy, the model revisions it holds, and its log listener. The control plane that
// received the heartbeat writes it; every other one reads it back with this schema, so a row
// another version (or a damaged database) wrote is refused field by field, never trusted.

import { z } from "zod";
import { Name, PrintableMultiline } from "./common";
import { DISCOVERY_ERROR_MAX, EngineReport, HeartbeatRequest, REASON_MAX, Revision } from "./heartbeat";

const LogsCert = HeartbeatRequest.shape.logs_tls_cert.unwrap().unwrap();

export const NodeReport = z.strictObject({
  /** Absent when the agent does not report engines (unknown, not none). */
  engines: z.array(EngineReport).max(8).optional(),
  discovery_error: PrintableMultiline(DISCOVERY_ERROR_MAX).nullable(),
  /** GPU index → why it is unhealthy, for the unhealthy GPUs that said. */
  gpu_reasons: z.array(z.tuple([z.number().int().min(0).max(65535), PrintableMultiline(REASON_MAX)])).max(256),
  /** Present (true) while discovery fails and the node's GPUs are its last known ones, kept unhealthy. */
  gpus_kept: z.literal(true).optional(),
  /** Absent when the agent does not report revisions. */
  model_revisions: z.record(Name, z.array(Revision).max(64)).optional(),
  logs_port: z.number().int().min(1).max(65535).nullable(),
  logs_tls_cert: LogsCert.nullable(),
});
export type NodeReport = z.infer<typeof NodeReport>;
