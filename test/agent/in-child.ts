/**
 * Runs one exported async function of a compiled test module in a child Node process, outside
 * node:test, and resolves with what it returned (structured clone: Maps, typed arrays and Errors cross).
 *
 * Why: node:test enables an async hook (init and destroy) on every async resource of the process
 * that runs the tests, to tell which test an uncaught error belongs to. Every promise then costs a
 * hook call and a GC-tracked destroy: a loop awaiting 3 million resolved promises took 3.3 s inside a
 * test against 0.16 s outside (Node 22), and 256 agents in one process averaged a round in 132-180 s
 * inside against 54 s outside (same seed and timing), past the step timeout. A test whose swarm is
 * CPU-bound runs the swarm here and asserts on the result in the test.
 */
import { fork } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const CHILD_FLAG = 'AVS_IN_CHILD_RUN'

interface Job { readonly module: string, readonly fn: string, readonly input: unknown }
type Reply = { ok: true, value: unknown } | { ok: false, error: string }

export interface InChildOptions {
  /** Killed (SIGKILL) after this long, and the promise rejected. */
  readonly timeoutMs: number
  /** Node flags of the child (default: a young generation sized as the suites' command sets it). */
  readonly execArgv?: readonly string[]
}

/**
 * Calls `fn(input)` exported by `module` (a URL of a compiled .js file) in a child process. The
 * child's stdout and stderr go to our stderr (our stdout is the test runner's stream).
 */
export async function runInChild<T> (module: URL, fn: string, input: unknown, options: InChildOptions): Promise<T> {
  const child = fork(fileURLToPath(import.meta.url), [], {
    env: { ...process.env, [CHILD_FLAG]: '1' },
    execArgv: [...(options.execArgv ?? ['--max-semi-space-size=64'])],
    serialization: 'advanced',
    stdio: ['ignore', 2, 2, 'ipc']
  })
  return await new Promise<T>((resolve, reject) => {
    let reply: Reply | undefined
    const timer = setTimeout(() => { child.kill('SIGKILL') }, options.timeoutMs)
    child.on('message', (msg: Reply) => { reply = msg })
    child.on('error', (err) => { clearTimeout(timer); reject(err) })
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      if (reply?.ok === true) resolve(reply.value as T)
      else if (reply?.ok === false) reject(new Error(`${fn} in a child process failed: ${reply.error}`))
      else if (signal === 'SIGKILL') reject(new Error(`${fn} in a child process did not finish within ${options.timeoutMs} ms`))
      else reject(new Error(`${fn} in a child process exited (${signal ?? code}) without a result`))
    })
    child.send({ module: module.href, fn, input } satisfies Job)
  })
}

// The child's side: one job, its result sent back, then exit (agents' timers must not keep it alive).
if (process.env[CHILD_FLAG] === '1' && process.send != null) {
  delete process.env[CHILD_FLAG]
  process.once('message', (job: Job) => {
    void (async (): Promise<Reply> => {
      try {
        const mod = await import(job.module) as Record<string, unknown>
        const f = mod[job.fn]
        if (typeof f !== 'function') throw new Error(`${job.module} exports no function ${job.fn}`)
        return { ok: true, value: await (f as (input: unknown) => Promise<unknown>)(job.input) }
      } catch (err) {
        return { ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) }
      }
    })().then(reply => { process.send?.(reply, () => process.exit(0)) })
  })
}
