// The agent's one error for the operator: a bad setting, a refused token, a certificate not
// trusted. main prints its message alone, without a stack.

/** A problem the operator has to fix (bad setting, refused token); main prints its message alone. */
export class AgentError extends Error {
  readonly userFacing = true;
  constructor(
    message: string,
    /** True when start() gave up because stop() was called, not because something failed. */
    readonly stopped = false,
  ) {
    super(message);
  }
}
