ALTER TABLE "control_planes" ADD COLUMN "version" text;--> statement-breakpoint
ALTER TABLE "control_planes" ADD COLUMN "protocol" integer;--> statement-breakpoint
ALTER TABLE "nodes" ADD COLUMN "agent_protocol" integer;