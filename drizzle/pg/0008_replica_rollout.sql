ALTER TABLE "replicas" ADD COLUMN "launch" text;--> statement-breakpoint
ALTER TABLE "replicas" ADD COLUMN "drain_until" bigint;
