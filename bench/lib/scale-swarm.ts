/**
 * Hundreds of agents in one process (npm run bench:moshpit-scale, and the 256-peer test): real
 * libp2p nodes with the agent's Kademlia DHT, rendezvous, matchmaking and all-reduce, joined by
 * libp2p's IN-MEMORY transport with PLAINTEXT connections. Neither is what agents run (TCP with
 * Noise or TLS): the harness measures the protocols, not the crypto and sockets of one shared CPU.
 */
import { multiaddr } from '@multiformats/multiaddr'
import type { Metrics, MultiaddrConnection, Stream } from '@libp2p/interface'
import { createSwarmNode, type SwarmNode } from '../../agent/net/node.js'
import { routingTableSize } from '../../agent/net/bootstrap.js'
import type { RendezvousObserver } from '../../agent/rendezvous/rendezvous.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG, type AveragerConfig, type AveragerHooks } from '../../agent/averager.js'
import { seededRandom } from '../../agent/util/random.js'
import { linesLog } from '../../agent/log.js'

/** Bytes and messages sent, per protocol, by every node of the process together. */
export class TrafficCounter {
  readonly sent = new Map<string, { bytes: number, messages: number }>()

  /** A libp2p Metrics that counts what streams send and registers nothing else. */
  metrics (): Metrics {
    const count = (name: string, bytes: number): void => {
      const entry = this.sent.get(name) ?? { bytes: 0, messages: 0 }
      entry.bytes += bytes
      entry.messages++
      this.sent.set(name, entry)
    }
    const wrap = (stream: Stream | MultiaddrConnection, name: string): void => {
      const send = stream.send.bind(stream)
      stream.send = (data) => { count(name, data.byteLength); return send(data) }
    }
    const noop = new Proxy({}, { get: () => () => noopTimer })
    const noopTimer = (): void => {}
    const register = (_name: string, options?: { calculate?: unknown }): unknown => options?.calculate != null ? undefined : noop
    return {
      trackMultiaddrConnection: (connection: MultiaddrConnection) => { wrap(connection, 'connections') },
      trackProtocolStream: (stream: Stream) => { if (stream.protocol != null) wrap(stream, stream.protocol) },
      registerMetric: register,
      registerMetricGroup: register,
      registerCounter: register,
      registerCounterGroup: register,
      registerHistogram: register,
      registerHistogramGroup: register,
      registerSummary: register,
      registerSummaryGroup: register,
      traceFunction: (_name: string, fn: unknown) => fn,
      createTrace: () => undefined
    } as unknown as Metrics
  }

  snapshot (): Map<string, { bytes: number, messages: number }> {
    return new Map([...this.sent].map(([k, v]) => [k, { ...v }]))
  }
}

export interface ScaleSwarmOptions {
  readonly peers: number
  /** Distinct in one process: the in-memory transport's addresses are process-wide. */
  readonly name: string
  readonly seed: number
  /** Added to every message the in-memory transport carries. */
  readonly latencyMs: number
  /** Bootstrap peers each newcomer dials, drawn among the peers before it. */
  readonly bootstrapDials: number
  readonly config: (rank: number) => Omit<AveragerConfig, 'mode'>
  readonly tensor: (rank: number) => Float32Array
  readonly hooks?: (rank: number) => AveragerHooks
  /** Each rendezvous's log lines (replica failures), by rank. */
  readonly rendezvousLog?: (rank: number, msg: string) => void
  readonly observer?: RendezvousObserver
  readonly traffic?: TrafficCounter
  readonly progress?: (line: string) => void
}

export interface ScaleSwarm {
  readonly nodes: SwarmNode[]
  readonly averagers: DecentralizedAverager[]
  readonly tensors: Float32Array[]
  /** Routing-table sizes once the swarm settled. */
  readonly tables: number[]
  readonly setupMs: number
  /** Stops one peer at once, as a crash would: its connections close, nothing is said. */
  crash: (rank: number) => void
  stop: () => Promise<void>
}

/** Starts the nodes (joined as a growing random tree, then their DHT tables settle) and one averager per node. */
export async function startScaleSwarm (options: ScaleSwarmOptions): Promise<ScaleSwarm> {
  const started = Date.now()
  const nodes: SwarmNode[] = []
  const averagers: DecentralizedAverager[] = []
  const crashed = new Set<number>()
  const stop = async (): Promise<void> => {
    await Promise.allSettled(averagers.map(async (a, i) => { if (!crashed.has(i)) await a.shutdown() }))
    await Promise.allSettled(nodes.map(async n => { await n.stop() }))
  }
  try {
    for (let i = 0; i < options.peers; i++) {
      nodes.push(await createScaleNode(i, { memory: `/memory/${options.name}-${i}`, latencyMs: options.latencyMs }, options))
    }
    options.progress?.(`${options.peers} nodes created (${Date.now() - started} ms); joining`)
    const targets = bootstrapTargets(options.peers, options.bootstrapDials, options.seed)
    await inBatches(options.peers - 1, BOOTSTRAP_BATCH, async (k) => {
      const i = k + 1
      for (const t of targets[i]) await nodes[i].dial(multiaddr(`/memory/${options.name}-${t}`)).catch(() => {})
    })
    const tables = await settleTables(() => nodes.map(routingTableSize), nodes.length, options.progress)
    await quietCpu(60_000 + 100 * nodes.length, options.progress)
    options.progress?.(`routing tables settled (${Date.now() - started} ms): min ${Math.min(...tables)}, median ${tables.slice().sort((a, b) => a - b)[tables.length >> 1]}`)
    const tensors: Float32Array[] = []
    for (let i = 0; i < options.peers; i++) {
      const config = options.config(i)
      const data = options.tensor(i)
      tensors.push(data)
      averagers.push(await DecentralizedAverager.create(nodes[i], [{ name: 'w', shape: [data.length], data }], { ...config, mode: 'node' }, options.hooks?.(i) ?? {}))
    }
    return {
      nodes,
      averagers,
      tensors,
      tables,
      setupMs: Date.now() - started,
      crash: (rank) => {
        if (crashed.has(rank)) return
        crashed.add(rank)
        void Promise.resolve(nodes[rank].stop()).catch(() => {})
      },
      stop
    }
  } catch (err) {
    await stop()
    throw err
  }
}

/** Newcomers that join at once: each batch dials peers of the batches before it (or of its own). */
export const BOOTSTRAP_BATCH = 64

/** The earlier peers each rank dials to join (none for rank 0), drawn from the seed in rank order. */
export function bootstrapTargets (peers: number, dials: number, seed: number): number[][] {
  const random = seededRandom(`${seed}:bootstrap`)
  const out: number[][] = [[]]
  for (let i = 1; i < peers; i++) {
    const targets = new Set<number>()
    while (targets.size < Math.min(i, dials)) targets.add(Math.floor(random() * i))
    out.push([...targets])
  }
  return out
}

/**
 * One harness node of rank `rank`: in memory (one process, `/memory/<name>`), or on loopback TCP
 * (`--procs`: agents spread over processes), plaintext either way, with the rendezvous, traffic
 * counter and observer of the options.
 */
export async function createScaleNode (rank: number, transport: { memory: string, latencyMs: number } | { tcp: string }, options: Pick<ScaleSwarmOptions, 'config' | 'rendezvousLog' | 'observer' | 'traffic'>): Promise<SwarmNode> {
  const log = options.rendezvousLog
  return await createSwarmNode({
    ...('memory' in transport
      ? { listen: [transport.memory], inMemory: { latencyMs: transport.latencyMs } }
      : { listen: [transport.tcp], plaintextTcp: true }),
    metrics: options.traffic != null ? () => options.traffic?.metrics() as Metrics : undefined,
    // Every rendezvous serves from its node's start, before any averager starts (and asks its first key's replicas).
    rendezvous: { requestTimeoutMs: options.config(rank).requestTimeout * 1000, observer: options.observer, ...(log != null ? { log: linesLog((msg) => { log(rank, msg) }) } : {}) }
  })
}

/**
 * Waits until no routing table grew for a while (kad-dht's self-queries have run), at most 60 s
 * plus 50 ms per peer: the swarm then looks as one that has run for a while. `readSizes` gives every
 * node's routing-table size (of this process, or gathered from the worker processes).
 */
export async function settleTables (readSizes: () => number[] | Promise<number[]>, peers: number, progress?: (line: string) => void): Promise<number[]> {
  const deadline = Date.now() + 60_000 + 50 * peers
  let last = ''
  let quietSince = Date.now()

  for (;;) {
    const sizes = await readSizes()
    const now = sizes.join(',')
    if (now !== last) { last = now; quietSince = Date.now() }
    const filled = sizes.every(s => s >= Math.min(peers - 1, 1))
    if ((filled && Date.now() - quietSince >= 2000) || Date.now() >= deadline) {
      if (!filled) progress?.(`some routing tables are empty after the wait: ${sizes.filter(s => s === 0).length} of ${sizes.length}`)
      return sizes
    }
    await new Promise(resolve => setTimeout(resolve, 250))
  }
}

/**
 * Waits until the process's CPU use falls below a quarter of a core over a second: kad-dht's start-up
 * queries (self-queries, the routing-table refresh's random walks) of N peers in one process
 * otherwise overlap the first rounds, which agents on their own CPUs would not notice.
 */
export async function quietCpu (maxMs: number, progress?: (line: string) => void): Promise<void> {
  const deadline = Date.now() + maxMs
  for (;;) {
    const before = process.cpuUsage()
    await new Promise(resolve => setTimeout(resolve, 1000))
    const used = process.cpuUsage(before)
    const share = (used.user + used.system) / 1e6
    if (share < 0.25) return
    if (Date.now() >= deadline) { progress?.(`the swarm still used ${(share * 100).toFixed(0)} % of a core after ${maxMs} ms; measuring anyway`); return }
  }
}

export async function inBatches (count: number, width: number, fn: (index: number) => Promise<void>): Promise<void> {
  for (let start = 0; start < count; start += width) {
    await Promise.all(Array.from({ length: Math.min(width, count - start) }, async (_, k) => { await fn(start + k) }))
  }
}

/** The harness's averaging settings: the defaults with the given timing (seconds). */
export function scaleConfig (prefix: string, groupSize: number, bits: string, timing: { expiration: number, request: number, allreduce: number }): Omit<AveragerConfig, 'mode'> {
  return {
    ...DEFAULT_AVERAGER_CONFIG,
    prefix,
    targetGroupSize: groupSize,
    minGroupSize: 2,
    initialGroupBits: bits,
    averagingExpiration: timing.expiration,
    requestTimeout: timing.request,
    allreduceTimeout: timing.allreduce,
    compression: 'none',
    dataChannel: 'libp2p'
  }
}
