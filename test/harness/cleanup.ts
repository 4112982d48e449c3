/**
 * One process-wide registry of teardown actions. Whatever the harness starts registers its
 * stop function here, so that SIGINT/SIGTERM (Ctrl-C, a test runner's timeout) and a normal
 * exit still kill every process group the harness spawned and remove its temp dirs.
 */
type Teardown = () => void | Promise<void>

const pending = new Set<Teardown>()
/** Synchronous last-resort killers, run from process.on('exit') where nothing can be awaited. */
const lastResort = new Set<() => void>()
let handlersInstalled = false

function installHandlers (): void {
  if (handlersInstalled) return
  handlersInstalled = true
  const onSignal = (signal: NodeJS.Signals): void => {
    void runAllTeardowns().finally(() => {
      // Re-raise with the default action so the exit status still says "killed by signal".
      process.removeAllListeners(signal)
      process.kill(process.pid, signal)
    })
  }
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  process.once('SIGHUP', onSignal)
  process.on('exit', () => { for (const kill of lastResort) { try { kill() } catch {} } })
}

/** Registers a teardown; returns a function that unregisters it (call it after a normal stop). */
export function onTeardown (teardown: Teardown, syncKill?: () => void): () => void {
  installHandlers()
  pending.add(teardown)
  if (syncKill !== undefined) lastResort.add(syncKill)
  return () => {
    pending.delete(teardown)
    if (syncKill !== undefined) lastResort.delete(syncKill)
  }
}

/** Runs every registered teardown, newest first; errors are swallowed so all of them run. */
export async function runAllTeardowns (): Promise<void> {
  const all = [...pending].reverse()
  pending.clear()
  for (const teardown of all) {
    try { await teardown() } catch {}
  }
}
