CREATE TABLE `events` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`at` integer NOT NULL,
	`kind` text NOT NULL,
	`subject` text NOT NULL,
	`message` text NOT NULL,
	`data` text
);
--> statement-breakpoint
CREATE INDEX `events_at` ON `events` (`at`);--> statement-breakpoint
CREATE TABLE `gpus` (
	`node` text NOT NULL,
	`idx` integer NOT NULL,
	`uuid` text NOT NULL,
	`name` text NOT NULL,
	`class` text NOT NULL,
	`memory_mib` integer NOT NULL,
	`healthy` integer NOT NULL,
	`parent` text,
	PRIMARY KEY(`node`, `idx`),
	FOREIGN KEY (`node`) REFERENCES `nodes`(`name`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `meta` (
	`key` text PRIMARY KEY NOT NULL,
	`value` text NOT NULL
);
--> statement-breakpoint
CREATE TABLE `model_aliases` (
	`alias` text PRIMARY KEY NOT NULL,
	`model` text NOT NULL,
	FOREIGN KEY (`model`) REFERENCES `models`(`name`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `model_state` (
	`model` text PRIMARY KEY NOT NULL,
	`failures` integer DEFAULT 0 NOT NULL,
	`parked` integer DEFAULT false NOT NULL,
	`reason` text,
	`last_failure_at` integer,
	`last_requested_at` integer,
	`scale_target` integer,
	`unplaceable_reason` text
);
--> statement-breakpoint
CREATE TABLE `models` (
	`name` text PRIMARY KEY NOT NULL,
	`spec` text NOT NULL,
	`revision` integer DEFAULT 1 NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `nodes` (
	`name` text PRIMARY KEY NOT NULL,
	`address` text NOT NULL,
	`labels` text NOT NULL,
	`fabrics` text NOT NULL,
	`admin_state` text DEFAULT 'none' NOT NULL,
	`last_heartbeat` integer NOT NULL,
	`agent_version` text NOT NULL,
	`registered_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `replicas` (
	`id` text PRIMARY KEY NOT NULL,
	`model` text NOT NULL,
	`profile` text NOT NULL,
	`state` text NOT NULL,
	`shards` text NOT NULL,
	`port` integer,
	`endpoint` text,
	`failures` integer DEFAULT 0 NOT NULL,
	`error` text,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	`ready_at` integer
);
--> statement-breakpoint
CREATE INDEX `replicas_model` ON `replicas` (`model`);--> statement-breakpoint
CREATE TABLE `weights` (
	`node` text NOT NULL,
	`model` text NOT NULL,
	PRIMARY KEY(`node`, `model`),
	FOREIGN KEY (`node`) REFERENCES `nodes`(`name`) ON UPDATE no action ON DELETE cascade
);
