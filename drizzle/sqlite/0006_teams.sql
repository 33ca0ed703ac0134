CREATE TABLE `teams` (
	`name` text PRIMARY KEY NOT NULL,
	`rpm` integer,
	`tpm` integer,
	`max_concurrent` integer,
	`budget_tokens` integer,
	`budget_gpu_hours` real,
	`budget_period` text,
	`tier` text,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `team` text;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `models` text;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `expires_at` integer;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `updated_at` integer;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `rpm` integer;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `tpm` integer;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `max_concurrent` integer;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `budget_tokens` integer;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `budget_gpu_hours` real;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `budget_period` text;
--> statement-breakpoint
ALTER TABLE `api_keys` ADD `tier` text;
--> statement-breakpoint
-- A team's row changing is a change of kind 'team' (its keys' limits go to every router with it).
CREATE TRIGGER `changes_teams_insert` AFTER INSERT ON `teams` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'team', NEW.name FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_teams_delete` AFTER DELETE ON `teams` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'team', OLD.name FROM change_counter WHERE id = 1;
END;
--> statement-breakpoint
CREATE TRIGGER `changes_teams_update` AFTER UPDATE ON `teams` BEGIN
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'team', OLD.name FROM change_counter WHERE id = 1;
  UPDATE change_counter SET seq = seq + 1 WHERE id = 1 AND NEW.name IS NOT OLD.name;
  INSERT INTO changes (seq, kind, key) SELECT seq, 'team', NEW.name FROM change_counter WHERE id = 1 AND NEW.name IS NOT OLD.name;
END;