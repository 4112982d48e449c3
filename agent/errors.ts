/** Base of every error the averager reports to its caller: the message is one sentence a person can act on. */
export class AveragingError extends Error {
  override name = 'AveragingError'
}

/** A remote peer broke the protocol (bad frame, wrong length, unknown group, non-finite values). */
export class ProtocolError extends AveragingError {
  override name = 'ProtocolError'
}

/** A bounded wait ran out. */
export class TimeoutError extends AveragingError {
  override name = 'TimeoutError'
}

/** No group could be formed before the step's deadline. */
export class MatchmakingError extends AveragingError {
  override name = 'MatchmakingError'
}

/** Renders any thrown value as one line for logs and results, without a stack trace. */
export function describeError (err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) return err.errors.map(describeError).join('; ')
  if (err instanceof Error) return err.message
  return String(err)
}

/**
 * Whether a dial failed because the peer's address answered with another identity: the peer we
 * knew there is gone, as when an agent restarts at its old address with a new key. Noise throws
 * UnexpectedPeerError, and libp2p's upgrader (libp2p 3) passes on only its message, in an
 * EncryptionFailedError; both are recognised, alone or among an AggregateError's. Another release
 * that words it otherwise loses only this recognition: such a peer stays suspected, as before.
 */
export function isAnotherPeerAtAddress (err: unknown): boolean {
  if (err instanceof AggregateError && err.errors.length > 0) return err.errors.some(isAnotherPeerAtAddress)
  if (!(err instanceof Error)) return false
  if (err.name === 'UnexpectedPeerError') return true
  if (err.name === 'EncryptionFailedError' && /does not match expected remote identity key/.test(err.message)) return true
  return err.cause !== undefined && isAnotherPeerAtAddress(err.cause)
}
