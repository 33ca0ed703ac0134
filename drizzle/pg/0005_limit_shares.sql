CREATE TABLE IF NOT EXISTS "limit_shares" (
	"router" text PRIMARY KEY NOT NULL,
	"demand" jsonb NOT NULL,
	"shares" jsonb NOT NULL,
	"reported_at" bigint NOT NULL
);
