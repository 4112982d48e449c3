/**
 * One run of the benchmark runner protocol (bench/README.md): an HTTP coordinator on 127.0.0.1 and
 * N peer processes of one implementation, each in its own process group; the runner collects their
 * reports. bench/allreduce.ts and bench/trainer-step.ts both run their rows through it.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Coordinator } from './coordinator.js'
import { envFor } from './protocol.js'
import { missingPart, type ImplSpec } from './impls.js'
import { WireMeter } from './wire-bytes.js'
import { formatElements, statsOf, type RunOutcome } from './report.js'

/** The repository root: this file runs as dist/bench/lib/run-impl.js. */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

export const progress = (line: string): void => { process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`) }

export interface RunSettings {
  readonly rounds: number
  readonly warmup: number
  readonly partBytes: number
  readonly compression: string
  readonly timeoutS: number
  readonly logDir: string
  /** Where the peers run: by default on this host's loopback; bench/links.ts puts each in a network namespace. */
  readonly placement?: Placement
}

/** Runs each rank elsewhere than on loopback (bench/lib/shaped-links.ts: one network namespace per peer). */
export interface Placement {
  /** Address the coordinator listens on, reachable from every peer. */
  readonly coordHost: string
  /** Command prefix for a rank, e.g. ['ip', 'netns', 'exec', 'ns3']. */
  wrap: (rank: number) => string[]
  /** Extra environment for a rank (BENCH_HOST). */
  env: (rank: number) => Record<string, string>
  /** Awaited before each barrier opens (after the runner's own hook): the links harness reads its tc counters and changes rates there. */
  onBarrier?: (name: string) => Promise<void>
  /** The loopback wire meter (`ss`) sees no other namespace's sockets: off where the placement counts bytes itself. */
  readonly wireMeter: boolean
}

/**
 * Ends a peer's whole process group, also when the peer itself already exited: a peer that failed
 * leaves its helpers (an agent, hivemind's averager process, p2pd) running in its group otherwise.
 */
function killTree (child: ChildProcess): void {
  if (child.pid == null) return
  try { process.kill(-child.pid, 'SIGKILL') } catch { /* the group is gone */ }
}

export async function runImpl (spec: ImplSpec, peers: number, groupSize: number, elements: number, o: RunSettings): Promise<RunOutcome> {
  const base = { impl: spec.name, peers, groupSize, elements }
  const missing = missingPart(spec, ROOT)
  if (missing != null) return { ...base, status: 'missing', message: missing, results: [] }
  if (groupSize !== peers && !spec.groups) return { ...base, status: 'skipped', message: 'averages all peers at once, no groups', results: [] }

  const label = `${spec.name} ${peers} peers${groupSize !== peers ? ` in groups of ${groupSize}` : ''} × ${formatElements(elements)}`
  const total = o.warmup + o.rounds
  const coordinator = new Coordinator(peers, (line) => {
    if (/^round-\d+-end open$/.test(line)) return // every round's end: the next line says the next round started
    progress(`${label}: ${line.replace(/^round-(\d+) open$/, (_m, k: string) => `round ${Number(k) + 1}/${total} ${Number(k) < o.warmup ? '(warm-up) ' : ''}started`)}`)
  })
  const coord = await coordinator.start(o.placement?.coordHost)
  // Bytes on the wire: the peers' TCP counters from just before the first measured round to after the last.
  const meter = new WireMeter()
  let wireBytes: number | null = null
  coordinator.beforeBarrierOpens = async (name) => {
    if (o.placement?.wireMeter !== false) {
      if (name === `round-${o.warmup}`) await meter.start(new Set(children.map((c) => c.pid).filter((pid): pid is number => pid != null)))
      if (name === 'done') wireBytes = await meter.stop()
    }
    await o.placement?.onBarrier?.(name)
  }
  progress(`${label}: starting (${o.warmup} warm-up + ${o.rounds} measured rounds, timeout ${o.timeoutS} s)`)
  const children: ChildProcess[] = []
  const exits: Array<Promise<number | null>> = []
  const failures: string[] = []
  let timedOut = false
  const timer = setTimeout(() => { timedOut = true; for (const c of children) killTree(c) }, o.timeoutS * 1000)

  for (let rank = 0; rank < peers; rank++) {
    const logPath = join(o.logDir, `${spec.name}-${peers}p-${formatElements(elements)}-rank${rank}.log`)
    const log = createWriteStream(logPath)
    // `ip netns exec` execs the peer in place: same pid, same process group.
    const command = [...(o.placement?.wrap(rank) ?? []), ...spec.command]
    const child = spawn(command[0], command.slice(1), {
      cwd: ROOT,
      detached: true, // own process group, so the whole tree can be ended
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        ...spec.env,
        ...envFor({ rank, world: peers, groupSize, elements, rounds: o.rounds, warmup: o.warmup, partBytes: o.partBytes, compression: o.compression, coord }),
        ...o.placement?.env(rank),
        PYTHONUNBUFFERED: '1'
      }
    })
    child.stdout!.pipe(log, { end: false })
    child.stderr!.pipe(log, { end: false })
    children.push(child)
    exits.push(new Promise((resolve) => {
      child.once('error', (err) => { failures.push(`rank ${rank} could not start: ${err.message}`); resolve(null) })
      child.once('exit', (code, signal) => {
        log.end()
        if (code !== 0 && !timedOut) {
          const why = coordinator.errors.get(rank) ?? `exited with ${code ?? signal ?? '?'} (see ${logPath})`
          failures.push(`rank ${rank}: ${why}`)
          // A dead peer leaves the others waiting at a barrier: end them after a short grace.
          setTimeout(() => { for (const c of children) killTree(c) }, 5000)
        }
        resolve(code)
      })
    }))
  }

  await Promise.all(exits)
  // Whatever a peer left behind in its process group ends with the run.
  for (const c of children) killTree(c)
  clearTimeout(timer)
  await coordinator.stop()

  const results = [...coordinator.results.values()].sort((a, b) => a.rank - b.rank)
  if (timedOut) return { ...base, status: 'timeout', message: `no result within ${o.timeoutS} s (${results.length}/${peers} peers reported; logs in ${o.logDir})`, results }
  if (failures.length > 0 || results.length !== peers) {
    return { ...base, status: 'failed', message: failures.length > 0 ? failures.join('; ') : `${results.length}/${peers} peers reported`, results }
  }
  const outcome: RunOutcome = { ...base, status: 'ok', results, ...(wireBytes != null ? { wireBytesPerRoundPerPeer: wireBytes / peers / o.rounds } : {}) }
  const s = statsOf(outcome)!
  progress(`${label}: all-reduce ${s.allReduceMs.toFixed(0)} ms median, busbw ${s.busbwMiBs.toFixed(0)} MiB/s, max error ${String(s.maxAbsError)}`)
  return outcome
}

