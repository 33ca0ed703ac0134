CREATE TABLE "usage_hours" (
	"team" text NOT NULL,
	"key" text NOT NULL,
	"model" text NOT NULL,
	"hour" bigint NOT NULL,
	"requests" bigint DEFAULT 0 NOT NULL,
	"prompt_tokens" bigint DEFAULT 0 NOT NULL,
	"completion_tokens" bigint DEFAULT 0 NOT NULL,
	"cached_tokens" bigint DEFAULT 0 NOT NULL,
	"errors" bigint DEFAULT 0 NOT NULL,
	"errors_4xx" bigint DEFAULT 0 NOT NULL,
	"errors_5xx" bigint DEFAULT 0 NOT NULL,
	"refused" bigint DEFAULT 0 NOT NULL,
	"aborted" bigint DEFAULT 0 NOT NULL,
	"gpu_seconds" double precision DEFAULT 0 NOT NULL,
	CONSTRAINT "usage_hours_team_key_model_hour_pk" PRIMARY KEY("team","key","model","hour")
);
--> statement-breakpoint
CREATE INDEX "usage_hours_hour" ON "usage_hours" USING btree ("hour");