CREATE TABLE "change_counter" (
	"id" integer PRIMARY KEY NOT NULL,
	"seq" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "changes" (
	"seq" bigint PRIMARY KEY NOT NULL,
	"kind" text NOT NULL,
	"key" text NOT NULL
);
--> statement-breakpoint
-- What committed writes changed (the changes table), filled by triggers on every table the in-memory
-- model holds; a node's row changing only its last_heartbeat is left out (control planes exchange
-- those apart). A column added to nodes must be added to changes_nodes_update.
INSERT INTO "change_counter" ("id", "seq") VALUES (1, 0);
--> statement-breakpoint
CREATE FUNCTION "llmgw_note_change"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  k text;
  s bigint;
BEGIN
  -- TG_ARGV: the change's kind, the column naming what changed.
  IF TG_OP <> 'INSERT' THEN
    k := to_jsonb(OLD) ->> TG_ARGV[1];
    UPDATE change_counter SET seq = seq + 1 WHERE id = 1 RETURNING seq INTO s;
    INSERT INTO changes (seq, kind, key) VALUES (s, TG_ARGV[0], k);
  END IF;
  IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND (to_jsonb(NEW) ->> TG_ARGV[1]) IS DISTINCT FROM k) THEN
    UPDATE change_counter SET seq = seq + 1 WHERE id = 1 RETURNING seq INTO s;
    INSERT INTO changes (seq, kind, key) VALUES (s, TG_ARGV[0], to_jsonb(NEW) ->> TG_ARGV[1]);
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER "changes_nodes" AFTER INSERT OR DELETE ON "nodes" FOR EACH ROW EXECUTE FUNCTION "llmgw_note_change"('node', 'name');
--> statement-breakpoint
CREATE TRIGGER "changes_nodes_update" AFTER UPDATE ON "nodes" FOR EACH ROW WHEN ((OLD.address, OLD.labels, OLD.fabrics, OLD.admin_state, OLD.agent_version, OLD.registered_at, OLD.credential_hash) IS DISTINCT FROM (NEW.address, NEW.labels, NEW.fabrics, NEW.admin_state, NEW.agent_version, NEW.registered_at, NEW.credential_hash)) EXECUTE FUNCTION "llmgw_note_change"('node', 'name');
--> statement-breakpoint
CREATE TRIGGER "changes_gpus" AFTER INSERT OR UPDATE OR DELETE ON "gpus" FOR EACH ROW EXECUTE FUNCTION "llmgw_note_change"('node', 'node');
--> statement-breakpoint
CREATE TRIGGER "changes_weights" AFTER INSERT OR UPDATE OR DELETE ON "weights" FOR EACH ROW EXECUTE FUNCTION "llmgw_note_change"('node', 'node');
--> statement-breakpoint
CREATE TRIGGER "changes_node_addresses" AFTER INSERT OR UPDATE OR DELETE ON "node_addresses" FOR EACH ROW EXECUTE FUNCTION "llmgw_note_change"('node', 'node');
--> statement-breakpoint
CREATE TRIGGER "changes_models" AFTER INSERT OR UPDATE OR DELETE ON "models" FOR EACH ROW EXECUTE FUNCTION "llmgw_note_change"('model', 'name');
--> statement-breakpoint
CREATE TRIGGER "changes_model_state" AFTER INSERT OR UPDATE OR DELETE ON "model_state" FOR EACH ROW EXECUTE FUNCTION "llmgw_note_change"('model', 'model');
--> statement-breakpoint
CREATE TRIGGER "changes_replicas" AFTER INSERT OR UPDATE OR DELETE ON "replicas" FOR EACH ROW EXECUTE FUNCTION "llmgw_note_change"('replica', 'id');
--> statement-breakpoint
CREATE TRIGGER "changes_api_keys" AFTER INSERT OR UPDATE OR DELETE ON "api_keys" FOR EACH ROW EXECUTE FUNCTION "llmgw_note_change"('key', 'name');
