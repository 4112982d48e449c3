/**
 * The agent's leveled, scoped log: what every component takes instead of a bare callback, so
 * each message says how much it matters (a partial round's cause is a warning, a replica that
 * timed out is detail) and which component wrote it. main.ts hands in its pino logger, which
 * has this shape already; tests and harnesses use `linesLog` or nothing.
 */
export interface Log {
  debug (msg: string): void
  info (msg: string): void
  warn (msg: string): void
  error (msg: string): void
  /** The same log with the component named in every line (pino's `child`). */
  child (bindings: { component: string }): Log
}

const ignore = (): void => {}

/** Says nothing: the default of a component given no log. */
export const silentLog: Log = { debug: ignore, info: ignore, warn: ignore, error: ignore, child: () => silentLog }

const LEVELS = ['debug', 'info', 'warn', 'error'] as const
export type LogLevel = (typeof LEVELS)[number]

/**
 * Lines of text (`warn [matchmaker] ...`) at `level` and above, for harnesses and tests that
 * collect or print what the agents say.
 */
export function linesLog (write: (line: string) => void, level: LogLevel = 'debug', component?: string): Log {
  const min = LEVELS.indexOf(level)
  const at = (l: LogLevel) => LEVELS.indexOf(l) < min ? ignore : (msg: string) => { write(`${l} ${component !== undefined ? `[${component}] ` : ''}${msg}`) }
  return {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    child: ({ component: c }) => linesLog(write, level, component !== undefined ? `${component}/${c}` : c)
  }
}
