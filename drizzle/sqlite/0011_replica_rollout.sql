ALTER TABLE `replicas` ADD `launch` text;--> statement-breakpoint
ALTER TABLE `replicas` ADD `drain_until` integer;
