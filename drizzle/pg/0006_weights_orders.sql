CREATE TABLE "weights_orders" (
	"node" text NOT NULL,
	"repo" text NOT NULL,
	"revision" text NOT NULL,
	"kind" text NOT NULL,
	"at" bigint NOT NULL,
	CONSTRAINT "weights_orders_node_repo_revision_pk" PRIMARY KEY("node","repo","revision")
);
