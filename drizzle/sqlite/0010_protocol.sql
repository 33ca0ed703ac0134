ALTER TABLE `control_planes` ADD `version` text;--> statement-breakpoint
ALTER TABLE `control_planes` ADD `protocol` integer;--> statement-breakpoint
ALTER TABLE `nodes` ADD `agent_protocol` integer;