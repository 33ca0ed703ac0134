CREATE TABLE `node_addresses` (
	`node` text PRIMARY KEY NOT NULL,
	`address` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
ALTER TABLE `nodes` ADD `credential_hash` text;--> statement-breakpoint
CREATE UNIQUE INDEX `nodes_credential_hash_unique` ON `nodes` (`credential_hash`);