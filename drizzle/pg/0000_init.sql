CREATE TABLE "api_keys" (
	"name" text PRIMARY KEY NOT NULL,
	"hash" text NOT NULL,
	"pool" text,
	"created_at" bigint NOT NULL,
	CONSTRAINT "api_keys_hash_unique" UNIQUE("hash")
);
--> statement-breakpoint
CREATE TABLE "control_planes" (
	"name" text PRIMARY KEY NOT NULL,
	"admin_url" text NOT NULL,
	"router_url" text NOT NULL,
	"started_at" bigint NOT NULL,
	"seen_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "events" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"at" bigint NOT NULL,
	"kind" text NOT NULL,
	"subject" text NOT NULL,
	"message" text NOT NULL,
	"data" jsonb
);
--> statement-breakpoint
CREATE TABLE "gpus" (
	"node" text NOT NULL,
	"idx" integer NOT NULL,
	"uuid" text NOT NULL,
	"name" text NOT NULL,
	"class" text NOT NULL,
	"memory_mib" integer NOT NULL,
	"healthy" boolean NOT NULL,
	"parent" text,
	CONSTRAINT "gpus_node_idx_pk" PRIMARY KEY("node","idx")
);
--> statement-breakpoint
CREATE TABLE "leases" (
	"name" text PRIMARY KEY NOT NULL,
	"holder" text NOT NULL,
	"epoch" integer NOT NULL,
	"expires_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "meta" (
	"key" text PRIMARY KEY NOT NULL,
	"value" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "model_aliases" (
	"alias" text PRIMARY KEY NOT NULL,
	"model" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "model_state" (
	"model" text PRIMARY KEY NOT NULL,
	"failures" integer DEFAULT 0 NOT NULL,
	"parked" boolean DEFAULT false NOT NULL,
	"reason" text,
	"last_failure_at" bigint,
	"last_requested_at" bigint,
	"scale_target" integer,
	"unplaceable_reason" text
);
--> statement-breakpoint
CREATE TABLE "models" (
	"name" text PRIMARY KEY NOT NULL,
	"spec" jsonb NOT NULL,
	"revision" integer DEFAULT 1 NOT NULL,
	"created_at" bigint NOT NULL,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "node_addresses" (
	"node" text PRIMARY KEY NOT NULL,
	"address" text NOT NULL,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "node_reports" (
	"node" text PRIMARY KEY NOT NULL,
	"report" text NOT NULL,
	"at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "nodes" (
	"name" text PRIMARY KEY NOT NULL,
	"address" text NOT NULL,
	"labels" jsonb NOT NULL,
	"fabrics" jsonb NOT NULL,
	"admin_state" text DEFAULT 'none' NOT NULL,
	"last_heartbeat" bigint NOT NULL,
	"agent_version" text NOT NULL,
	"registered_at" bigint NOT NULL,
	"credential_hash" text,
	CONSTRAINT "nodes_credential_hash_unique" UNIQUE("credential_hash")
);
--> statement-breakpoint
CREATE TABLE "replicas" (
	"id" text PRIMARY KEY NOT NULL,
	"model" text NOT NULL,
	"profile" text NOT NULL,
	"state" text NOT NULL,
	"shards" jsonb NOT NULL,
	"port" integer,
	"endpoint" text,
	"failures" integer DEFAULT 0 NOT NULL,
	"error" text,
	"created_at" bigint NOT NULL,
	"updated_at" bigint NOT NULL,
	"ready_at" bigint
);
--> statement-breakpoint
CREATE TABLE "router_usage" (
	"router" text PRIMARY KEY NOT NULL,
	"watching_since" bigint NOT NULL,
	"last_used" jsonb NOT NULL,
	"reported_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "weights" (
	"node" text NOT NULL,
	"model" text NOT NULL,
	CONSTRAINT "weights_node_model_pk" PRIMARY KEY("node","model")
);
--> statement-breakpoint
ALTER TABLE "gpus" ADD CONSTRAINT "gpus_node_nodes_name_fk" FOREIGN KEY ("node") REFERENCES "public"."nodes"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_aliases" ADD CONSTRAINT "model_aliases_model_models_name_fk" FOREIGN KEY ("model") REFERENCES "public"."models"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "weights" ADD CONSTRAINT "weights_node_nodes_name_fk" FOREIGN KEY ("node") REFERENCES "public"."nodes"("name") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "events_at" ON "events" USING btree ("at");--> statement-breakpoint
CREATE INDEX "replicas_model" ON "replicas" USING btree ("model");