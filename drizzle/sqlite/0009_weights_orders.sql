CREATE TABLE `weights_orders` (
	`node` text NOT NULL,
	`repo` text NOT NULL,
	`revision` text NOT NULL,
	`kind` text NOT NULL,
	`at` integer NOT NULL,
	PRIMARY KEY(`node`, `repo`, `revision`)
);
