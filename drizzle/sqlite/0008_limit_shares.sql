CREATE TABLE IF NOT EXISTS `limit_shares` (
	`router` text PRIMARY KEY NOT NULL,
	`demand` text NOT NULL,
	`shares` text NOT NULL,
	`reported_at` integer NOT NULL
);
