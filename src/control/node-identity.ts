// Who is speaking on the agent API: the bearer token an agent presents is the join token in force
// (a node's first heartbeat), a node's own credential (by its SHA-256, as the store keeps it), or
// neither. Asked before a request's body is read, so a node that floods costs a hash lookup.

import { sha256hex } from "../lib/digest";
import type { Principal } from "./admission";
import type { JoinToken } from "./join-token";
import type { NodeRegistry } from "./store-port";

export class NodeIdentity {
  constructor(private readonly o: { store: Pick<NodeRegistry, "nodeByCredentialHash">; joinToken: Pick<JoinToken, "matches"> }) {}

  /** The principal a bearer token makes its presenter, or undefined when it is neither the join token nor a node's credential. */
  async identify(presented: string): Promise<Principal | undefined> {
    if (this.o.joinToken.matches(presented)) return { kind: "join" };
    const node = await this.nodeForCredential(presented);
    return node === undefined ? undefined : { kind: "node", node };
  }

  /** The node a credential belongs to, or undefined. */
  nodeForCredential(credential: string): Promise<string | undefined> {
    return this.o.store.nodeByCredentialHash(sha256hex(credential));
  }
}
