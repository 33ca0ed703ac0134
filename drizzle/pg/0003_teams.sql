CREATE TABLE "teams" (
	"name" text PRIMARY KEY NOT NULL,
	"rpm" bigint,
	"tpm" bigint,
	"max_concurrent" bigint,
	"budget_tokens" bigint,
	"budget_gpu_hours" double precision,
	"budget_period" text,
	"tier" text,
	"created_at" bigint NOT NULL,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "team" text;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "models" text;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "expires_at" bigint;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "updated_at" bigint;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "rpm" bigint;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "tpm" bigint;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "max_concurrent" bigint;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "budget_tokens" bigint;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "budget_gpu_hours" double precision;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "budget_period" text;
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "tier" text;
--> statement-breakpoint
-- A team's row changing is a change of kind 'team' (its keys' limits go to every router with it).
CREATE TRIGGER "changes_teams" AFTER INSERT OR UPDATE OR DELETE ON "teams" FOR EACH ROW EXECUTE FUNCTION "llmgw_note_change"('team', 'name');