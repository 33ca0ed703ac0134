CREATE TABLE `control_planes` (
	`name` text PRIMARY KEY NOT NULL,
	`admin_url` text NOT NULL,
	`router_url` text NOT NULL,
	`started_at` integer NOT NULL,
	`seen_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `leases` (
	`name` text PRIMARY KEY NOT NULL,
	`holder` text NOT NULL,
	`epoch` integer NOT NULL,
	`expires_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `node_reports` (
	`node` text PRIMARY KEY NOT NULL,
	`report` text NOT NULL,
	`at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `router_usage` (
	`router` text PRIMARY KEY NOT NULL,
	`watching_since` integer NOT NULL,
	`last_used` text NOT NULL,
	`reported_at` integer NOT NULL
);
