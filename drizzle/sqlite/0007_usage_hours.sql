CREATE TABLE `usage_hours` (
	`team` text NOT NULL,
	`key` text NOT NULL,
	`model` text NOT NULL,
	`hour` integer NOT NULL,
	`requests` integer DEFAULT 0 NOT NULL,
	`prompt_tokens` integer DEFAULT 0 NOT NULL,
	`completion_tokens` integer DEFAULT 0 NOT NULL,
	`cached_tokens` integer DEFAULT 0 NOT NULL,
	`errors` integer DEFAULT 0 NOT NULL,
	`errors_4xx` integer DEFAULT 0 NOT NULL,
	`errors_5xx` integer DEFAULT 0 NOT NULL,
	`refused` integer DEFAULT 0 NOT NULL,
	`aborted` integer DEFAULT 0 NOT NULL,
	`gpu_seconds` real DEFAULT 0 NOT NULL,
	PRIMARY KEY(`team`, `key`, `model`, `hour`)
);
--> statement-breakpoint
CREATE INDEX `usage_hours_hour` ON `usage_hours` (`hour`);