// The protocol version: a number raised whenever a wire message between agents and control
// planes (or between control planes) changes incompatibly. 1 was every release before the
// number existed, so a peer that does not say it speaks 1.

export const PROTOCOL_VERSION = 2;
