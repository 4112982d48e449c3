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
