CREATE TABLE `change_counter` (
	`id` integer PRIMARY KEY NOT NULL,
	`seq` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `changes` (
	`seq` integer PRIMARY KEY NOT NULL,
	`kind` text NOT NULL,
	`key` text NOT NULL
);
--> statement-breakpoint
-- What committed writes changed (the changes table), filled by triggers on every table the in-memory
-- model holds; a node's row changing only its last_heartbeat is left out (control planes exchange
-- those apart). A column added to nodes must be added to changes_nodes_update.
INSERT INTO `change_counter` (`id`, `seq`) VALUES (1, 0);
--> statement-breakpoint
CREATE TRIGGER `changes_nodes_insert` AFTER INSERT ON `nodes` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', NEW.name FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_nodes_delete` AFTER DELETE ON `nodes` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', OLD.name FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_nodes_update` AFTER UPDATE ON `nodes` WHEN OLD.address IS NOT NEW.address OR OLD.labels IS NOT NEW.labels OR OLD.fabrics IS NOT NEW.fabrics OR OLD.admin_state IS NOT NEW.admin_state OR OLD.agent_version IS NOT NEW.agent_version OR OLD.registered_at IS NOT NEW.registered_at OR OLD.credential_hash IS NOT NEW.credential_hash BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', OLD.name FROM change_counter WHERE id = 1;
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1 AND NEW.name IS NOT OLD.name;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', NEW.name FROM change_counter WHERE id = 1 AND NEW.name IS NOT OLD.name;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_gpus_insert` AFTER INSERT ON `gpus` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', NEW.node FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_gpus_delete` AFTER DELETE ON `gpus` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', OLD.node FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_gpus_update` AFTER UPDATE ON `gpus` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', OLD.node FROM change_counter WHERE id = 1;
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1 AND NEW.node IS NOT OLD.node;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', NEW.node FROM change_counter WHERE id = 1 AND NEW.node IS NOT OLD.node;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_weights_insert` AFTER INSERT ON `weights` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', NEW.node FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_weights_delete` AFTER DELETE ON `weights` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', OLD.node FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_weights_update` AFTER UPDATE ON `weights` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', OLD.node FROM change_counter WHERE id = 1;
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1 AND NEW.node IS NOT OLD.node;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', NEW.node FROM change_counter WHERE id = 1 AND NEW.node IS NOT OLD.node;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_node_addresses_insert` AFTER INSERT ON `node_addresses` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', NEW.node FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_node_addresses_delete` AFTER DELETE ON `node_addresses` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', OLD.node FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_node_addresses_update` AFTER UPDATE ON `node_addresses` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', OLD.node FROM change_counter WHERE id = 1;
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1 AND NEW.node IS NOT OLD.node;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'node', NEW.node FROM change_counter WHERE id = 1 AND NEW.node IS NOT OLD.node;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_models_insert` AFTER INSERT ON `models` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'model', NEW.name FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_models_delete` AFTER DELETE ON `models` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'model', OLD.name FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_models_update` AFTER UPDATE ON `models` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'model', OLD.name FROM change_counter WHERE id = 1;
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1 AND NEW.name IS NOT OLD.name;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'model', NEW.name FROM change_counter WHERE id = 1 AND NEW.name IS NOT OLD.name;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_model_state_insert` AFTER INSERT ON `model_state` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'model', NEW.model FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_model_state_delete` AFTER DELETE ON `model_state` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'model', OLD.model FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_model_state_update` AFTER UPDATE ON `model_state` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'model', OLD.model FROM change_counter WHERE id = 1;
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1 AND NEW.model IS NOT OLD.model;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'model', NEW.model FROM change_counter WHERE id = 1 AND NEW.model IS NOT OLD.model;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_replicas_insert` AFTER INSERT ON `replicas` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'replica', NEW.id FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_replicas_delete` AFTER DELETE ON `replicas` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'replica', OLD.id FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_replicas_update` AFTER UPDATE ON `replicas` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'replica', OLD.id FROM change_counter WHERE id = 1;
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1 AND NEW.id IS NOT OLD.id;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'replica', NEW.id FROM change_counter WHERE id = 1 AND NEW.id IS NOT OLD.id;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_api_keys_insert` AFTER INSERT ON `api_keys` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'key', NEW.name FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_api_keys_delete` AFTER DELETE ON `api_keys` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'key', OLD.name FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_api_keys_update` AFTER UPDATE ON `api_keys` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'key', OLD.name FROM change_counter WHERE id = 1;
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1 AND NEW.name IS NOT OLD.name;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'key', NEW.name FROM change_counter WHERE id = 1 AND NEW.name IS NOT OLD.name;
END;
