/**
 * Matchmaking at scale over several processes (npm run bench:moshpit-scale -- --procs P): the
 * coordinator forks P workers that re-run the same entry file with `--worker <k>` (so the bench
 * still works bundled into one file), and rank r lives in worker r mod P. Nodes listen on loopback
 * TCP with PLAINTEXT connections (`plaintextTcp` in agent/net/node.ts; agents never run it): the
 * in-memory transport does not cross processes. Everything else is as in one process
 * (bench/lib/scale-swarm.ts): the same bootstrap draws (each newcomer dials 3 earlier peers, in
 * batches of 64, wherever they live; then every node runs kad-dht's self-query once), the same tensors, the grid by rank, the same victims; the
 * coordinator steps every worker through a round, gathers each agent's group, tensor and timings
 * and each worker's rendezvous, lookups, control traffic and CPU, and computes the round's figures
 * with roundStats as one process does.
 */
import { fork, type ChildProcess } from 'node:child_process'
import { multiaddr } from '@multiformats/multiaddr'
import { DecentralizedAverager } from '../../agent/averager.js'
import type { SwarmNode } from '../../agent/net/node.js'
import { routingTableSize } from '../../agent/net/bootstrap.js'
import { gridGroupBits } from '../../agent/moshpit/group-bits.js'
import { seededRandom } from '../../agent/util/random.js'
import { linesLog } from '../../agent/log.js'
import { BOOTSTRAP_BATCH, bootstrapTargets, createScaleNode, inBatches, quietCpu, scaleConfig, settleTables, TrafficCounter } from './scale-swarm.js'
import { controlTraffic, formatRound, pickVictims, roundResult, roundStats, RoundProbe, type RoundResult, type RoundStats } from './scale-rounds.js'

/** What a run needs to know, in the coordinator and in every worker. */
export interface ProcsRunSpec {
  readonly peers: number
  readonly groupSize: number
  readonly seed: number
  readonly timing: { expiration: number, request: number, allreduce: number }
  readonly bootstrapDials: number
}

type Request =
  | { kind: 'create', spec: ProcsRunSpec, ranks: number[] }
  | { kind: 'dial', dials: Array<[number, string[]]> }
  | { kind: 'selfQuery' }
  | { kind: 'tables' }
  | { kind: 'quiet', maxMs: number }
  | { kind: 'averagers', tensors: Array<[number, Float32Array]> }
  | { kind: 'step', live: number[], victims: number[], stepTimeout: number }
  | { kind: 'stop' }

interface StepReply {
  readonly results: Array<RoundResult & { rank: number }>
  readonly tensors: Array<[number, Float32Array]>
  readonly exchanges: RoundProbe['exchanges']
  readonly lookups: RoundProbe['lookups']
  readonly control: { bytes: number, messages: number }
  readonly cpuS: number
}

/** One forked worker and its request/reply channel (the IPC channel, structured clone). */
class WorkerProc {
  private next = 0
  private readonly pending = new Map<number, { resolve: (v: any) => void, reject: (e: Error) => void }>()
  private exited: Error | null = null
  readonly done: Promise<void>

  constructor (readonly index: number, readonly child: ChildProcess) {
    child.on('message', (msg: { id: number, ok: boolean, value?: unknown, error?: string }) => {
      const p = this.pending.get(msg.id)
      if (p == null) return
      this.pending.delete(msg.id)
      if (msg.ok) p.resolve(msg.value)
      else p.reject(new Error(`worker ${index}: ${msg.error ?? 'failed'}`))
    })
    this.done = new Promise(resolve => {
      child.on('exit', (code, signal) => {
        this.exited = new Error(`worker ${index} exited (${signal ?? code})`)
        for (const p of this.pending.values()) p.reject(this.exited)
        this.pending.clear()
        resolve()
      })
    })
  }

  async request<T> (req: Request): Promise<T> {
    if (this.exited != null) throw this.exited
    const id = this.next++
    return await new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject })
      this.child.send({ id, req }, (err) => { if (err != null) { this.pending.delete(id); reject(err) } })
    })
  }

  /** Asks the worker to stop its agents and exit; kills it (by its pid) if it has not within 20 s. */
  async close (): Promise<void> {
    if (this.exited == null) {
      await Promise.race([this.request({ kind: 'stop' }), new Promise(resolve => setTimeout(resolve, 15_000))]).catch(() => {})
      if (this.exited == null && this.child.connected) this.child.disconnect()
    }
    const timer = setTimeout(() => { if (this.exited == null) this.child.kill('SIGKILL') }, 5_000)
    await this.done
    clearTimeout(timer)
  }
}

/** Forks P workers re-running this entry file (bundled or not) with `--worker <k>`. */
function forkWorkers (procs: number): WorkerProc[] {
  const entry = process.argv[1]
  return Array.from({ length: procs }, (_, k) => new WorkerProc(k, fork(entry, [...process.argv.slice(2), '--worker', String(k)], {
    serialization: 'advanced',
    // A worker's stdout goes to our stderr: our stdout is the report.
    stdio: ['ignore', 2, 2, 'ipc']
  })))
}

export interface ProcsRunResult {
  readonly setupS: number
  readonly tableMin: number
  readonly rounds: RoundStats[]
  readonly convergedAt: number | null
}

/** One swarm over `procs` worker processes, its rounds, torn down (the coordinator's side). */
export async function runProcs (spec: ProcsRunSpec, procs: number, rounds: { maxRounds: number, crashRate: number, threshold: number, stepTimeout: number }, elements: number, progress?: (line: string) => void): Promise<ProcsRunResult> {
  const started = Date.now()
  const workers = forkWorkers(procs)
  const owner = (rank: number): number => rank % procs
  const ranksOf = (k: number): number[] => Array.from({ length: spec.peers }, (_, r) => r).filter(r => owner(r) === k)
  try {
    // Nodes, their listen addresses gathered here.
    const addrs = new Map<number, string>()
    const created = await Promise.all(workers.map(async (w, k) => await w.request<Array<[number, string]>>({ kind: 'create', spec, ranks: ranksOf(k) })))
    for (const list of created) for (const [rank, addr] of list) addrs.set(rank, addr)
    progress?.(`${spec.peers} nodes created in ${procs} processes (${Date.now() - started} ms); joining over loopback TCP`)
    // The same draws as one process: batches of newcomers, each dialling earlier peers wherever they live.
    const targets = bootstrapTargets(spec.peers, spec.bootstrapDials, spec.seed)
    for (let start = 1; start < spec.peers; start += BOOTSTRAP_BATCH) {
      const batch = Array.from({ length: Math.min(BOOTSTRAP_BATCH, spec.peers - start) }, (_, k) => start + k)
      await Promise.all(workers.map(async (w, k) => {
        const dials = batch.filter(i => owner(i) === k).map(i => [i, targets[i].map(t => addrs.get(t) ?? '')] as [number, string[]])
        if (dials.length > 0) await w.request({ kind: 'dial', dials })
      }))
    }
    // kad-dht's first self-query runs 200 ms after a node starts: in one process the nodes join
    // right after they are created and it finds the swarm; here forking and TCP take longer, it ran
    // alone and the next one is 5 minutes away. Each node runs it once more now that it has joined.
    progress?.(`joined (${Date.now() - started} ms); every node's self-query`)
    await Promise.all(workers.map(async w => { await w.request({ kind: 'selfQuery' }) }))
    progress?.(`self-queries done (${Date.now() - started} ms); waiting for the routing tables and CPU to settle`)
    const tables = await settleTables(async () => {
      const sizes = new Array<number>(spec.peers).fill(0)
      for (const list of await Promise.all(workers.map(async w => await w.request<Array<[number, number]>>({ kind: 'tables' })))) for (const [rank, size] of list) sizes[rank] = size
      return sizes
    }, spec.peers, progress)
    // Every worker quiet (below a quarter of a core), as one process waits for its own.
    await Promise.all(workers.map(async (w, k) => { await w.request({ kind: 'quiet', maxMs: 60_000 + 100 * ranksOf(k).length }) }))
    progress?.(`routing tables settled (${Date.now() - started} ms): min ${Math.min(...tables)}, median ${tables.slice().sort((a, b) => a - b)[tables.length >> 1]}`)
    // The same tensors as one process: drawn in rank order.
    const random = seededRandom(`${spec.seed}:vectors`)
    const tensors: Float32Array[] = Array.from({ length: spec.peers }, () => Float32Array.from({ length: elements }, () => random() * 2 - 1))
    await Promise.all(workers.map(async (w, k) => { await w.request({ kind: 'averagers', tensors: ranksOf(k).map(r => [r, tensors[r]]) }) }))
    const setupMs = Date.now() - started

    const dead = new Set<number>()
    const out: RoundStats[] = []
    let lastTogether = new Map<string, string>()
    const crashes = seededRandom(`${spec.seed}:crashes`)
    for (let round = 1; round <= rounds.maxRounds; round++) {
      const live = Array.from({ length: spec.peers }, (_, r) => r).filter(r => !dead.has(r))
      const victims = pickVictims(live, rounds.crashRate, crashes)
      const wallStart = performance.now()
      const cpuStart = process.cpuUsage()
      const replies = await Promise.all(workers.map(async (w, k) => await w.request<StepReply>({
        kind: 'step', live: live.filter(r => owner(r) === k), victims: victims.filter(r => owner(r) === k), stepTimeout: rounds.stepTimeout
      })))
      const wallMs = performance.now() - wallStart
      const cpu = process.cpuUsage(cpuStart)
      for (const v of victims) dead.add(v)
      const results = new Map<number, RoundResult>()
      let cpuS = (cpu.user + cpu.system) / 1e6
      const control = { bytes: 0, messages: 0 }
      for (const reply of replies) {
        for (const r of reply.results) if (!dead.has(r.rank)) results.set(r.rank, r)
        for (const [rank, t] of reply.tensors) tensors[rank] = t
        control.bytes += reply.control.bytes
        control.messages += reply.control.messages
        cpuS += reply.cpuS
      }
      const { stats, together } = roundStats({
        round, live, crashed: victims.length, dead, results, tensors,
        exchanges: replies.flatMap(r => r.exchanges), lookups: replies.flatMap(r => r.lookups), control, wallMs, cpuS
      }, lastTogether)
      lastTogether = together
      out.push(stats)
      progress?.(formatRound(stats))
      if (stats.deviation < rounds.threshold) return { setupS: setupMs / 1000, tableMin: Math.min(...tables), rounds: out, convergedAt: round }
    }
    return { setupS: setupMs / 1000, tableMin: Math.min(...tables), rounds: out, convergedAt: null }
  } finally {
    await Promise.all(workers.map(async w => { await w.close() }))
  }
}

/** The worker's side: hosts its ranks' agents and answers the coordinator until told to stop. */
export function runWorker (index: number): void {
  const progress = (line: string): void => { process.stderr.write(`[moshpit-scale w${index} ${new Date().toISOString().slice(11, 19)}] ${line}\n`) }
  const testLog = process.env.AVS_TEST_LOG != null
    ? (rank: number, msg: string) => { process.stderr.write(`${(performance.now() / 1000).toFixed(3)} [peer ${rank}] ${msg}\n`) }
    : null
  const nodes = new Map<number, SwarmNode>()
  const averagers = new Map<number, DecentralizedAverager>()
  const tensors = new Map<number, Float32Array>()
  const crashed = new Set<number>()
  const victims = new Set<number>()
  const probe = new RoundProbe()
  const traffic = new TrafficCounter()
  let trafficBefore = traffic.snapshot()
  let spec: ProcsRunSpec | undefined

  const crash = (rank: number): void => {
    if (crashed.has(rank)) return
    crashed.add(rank)
    void Promise.resolve(nodes.get(rank)?.stop()).catch(() => {})
  }
  const stop = async (): Promise<void> => {
    await Promise.allSettled([...averagers].map(async ([rank, a]) => { if (!crashed.has(rank)) await a.shutdown() }))
    await Promise.allSettled([...nodes.values()].map(async n => { await n.stop() }))
  }
  const config = (rank: number): ReturnType<typeof scaleConfig> => {
    if (spec == null) throw new Error('no run yet')
    return scaleConfig('scale', spec.groupSize, gridGroupBits(rank, spec.peers, spec.groupSize), spec.timing)
  }

  const handle = async (req: Request): Promise<unknown> => {
    switch (req.kind) {
      case 'create': {
        spec = req.spec
        for (const rank of req.ranks) {
          nodes.set(rank, await createScaleNode(rank, { tcp: '/ip4/127.0.0.1/tcp/0' }, { config, observer: probe.observer, traffic, ...(testLog != null ? { rendezvousLog: testLog } : {}) }))
        }
        return [...nodes].map(([rank, n]) => {
          const addr = n.getMultiaddrs().find(a => a.toString().includes('/tcp/'))
          if (addr == null) throw new Error(`rank ${rank} listens nowhere`)
          return [rank, addr.toString()]
        })
      }
      case 'dial':
        await Promise.all(req.dials.map(async ([rank, targets]) => {
          for (const t of targets) await nodes.get(rank)?.dial(multiaddr(t)).catch(() => {})
        }))
        return null
      case 'selfQuery': {
        const ms: number[] = []
        await inBatches(nodes.size, 16, async (k) => {
          const node = [...nodes.values()][k]
          const t0 = Date.now()
          for await (const _ of node.services.dht.getClosestPeers(node.peerId.toMultihash().bytes, { signal: AbortSignal.timeout(30_000) })) {}
          ms.push(Date.now() - t0)
        }).catch((err) => { progress(`self-query: ${err instanceof Error ? err.message : String(err)}`) })
        ms.sort((a, b) => a - b)
        progress(`self-queries: ${ms.length} in ${ms[0]}..${ms[ms.length >> 1]}..${ms[ms.length - 1]} ms`)
        return null
      }
      case 'tables':
        return [...nodes].map(([rank, n]) => [rank, routingTableSize(n)])
      case 'quiet':
        await quietCpu(req.maxMs, progress)
        return null
      case 'averagers':
        for (const [rank, data] of req.tensors) {
          const node = nodes.get(rank)
          if (node == null) throw new Error(`no node of rank ${rank}`)
          tensors.set(rank, data)
          averagers.set(rank, await DecentralizedAverager.create(node, [{ name: 'w', shape: [data.length], data }], { ...config(rank), mode: 'node' }, {
            onGroup: () => { if (victims.has(rank)) crash(rank) },
            ...(testLog != null ? { log: linesLog((msg) => { testLog(rank, msg) }) } : {})
          }))
        }
        probe.take()
        trafficBefore = traffic.snapshot()
        return null
      case 'step': {
        victims.clear()
        for (const v of req.victims) victims.add(v)
        const cpuStart = process.cpuUsage()
        const outcomes = await Promise.allSettled(req.live.map(async rank => await averagers.get(rank)?.step({ timeout: req.stepTimeout })))
        const cpu = process.cpuUsage(cpuStart)
        const results: StepReply['results'] = []
        outcomes.forEach((o, k) => {
          const rank = req.live[k]
          if (o.status === 'fulfilled' && o.value != null && !victims.has(rank)) results.push({ rank, ...roundResult(o.value) })
          else if (o.status === 'rejected' && !victims.has(rank)) progress(`rank ${rank} (${nodes.get(rank)?.peerId.toString().slice(-8) ?? '?'}): no group: ${o.reason instanceof Error ? o.reason.message : String(o.reason)}`)
        })
        const taken = probe.take()
        const now = traffic.snapshot()
        const control = controlTraffic(trafficBefore, now)
        trafficBefore = now
        const reply: StepReply = {
          results,
          tensors: req.live.filter(r => !victims.has(r)).map(r => [r, tensors.get(r) ?? new Float32Array(0)]),
          exchanges: taken.exchanges,
          lookups: taken.lookups,
          control,
          cpuS: (cpu.user + cpu.system) / 1e6
        }
        return reply
      }
      case 'stop':
        await stop()
        return null
    }
  }

  process.on('message', (msg: { id: number, req: Request }) => {
    handle(msg.req).then(
      (value) => { process.send?.({ id: msg.id, ok: true, value }) },
      (err) => { process.send?.({ id: msg.id, ok: false, error: err instanceof Error ? err.message : String(err) }) }
    )
  })
  // The coordinator gone (done, or it died): nothing is left to do here.
  process.on('disconnect', () => { void stop().finally(() => process.exit(0)) })
}
