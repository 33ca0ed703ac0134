// The admin API's weights routes: the list behind `llmgw weights ls`, and `weights pull` and
// `weights rm` (control/weights-admin.ts). A server without a Hub fetches nothing: 404 naming it.

import type { Hono } from "hono";
import type { WeightsAdmin } from "../control/weights-admin";
import type { WeightsNodeView } from "../protocol/weights-admin";
import { HttpError } from "./errors";
import { ROUTES } from "./openapi";

export type WeightsControl = Pick<WeightsAdmin, "list" | "pull" | "remove" | "modelNodes">;

/** A model detail's `weights` field: each node's copy, when the model's weights come from the Hub. */
export async function modelWeights(w: WeightsControl | undefined, model: string): Promise<{ weights?: WeightsNodeView[] }> {
  const nodes = await w?.modelNodes(model);
  return nodes !== undefined ? { weights: nodes } : {};
}

const NO_HUB = "this server fetches no weights: it runs without a Hub (weights come from hf:// sources, with serve --hf-endpoint or its default)";

export function weightsRoutes(app: Hono, w: WeightsControl | undefined, jsonBody: (req: Request) => Promise<unknown>): void {
  const need = (): WeightsControl => {
    if (w === undefined) throw new HttpError(404, "not_found", NO_HUB);
    return w;
  };
  app.get("/weights", async (c) => c.json(await need().list()));
  app.post("/weights/pull", async (c) => {
    const body = ROUTES.pullWeights.body.parse(await jsonBody(c.req.raw));
    return c.json(await need().pull(body));
  });
  app.post("/weights/remove", async (c) => {
    const body = ROUTES.removeWeights.body.parse(await jsonBody(c.req.raw));
    return c.json(await need().remove(body));
  });
}
