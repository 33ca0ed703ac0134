// The store's row types as reconcile/ reads them: imported here once, so the rest of the folder
// does not name the store.

export type { ModelRow, ModelStateRow, NodeRow, ReplicaRow, Snapshot } from "../../store";
