CREATE TABLE `api_keys` (
	`name` text PRIMARY KEY NOT NULL,
	`hash` text NOT NULL,
	`pool` text,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `api_keys_hash_unique` ON `api_keys` (`hash`);