import type { SwarmNode } from '../../agent/net/node.js'
import { startConnectedNodes, type NodeOptionsFor } from '../../bench/lib/loopback-nodes.js'
import assert from 'node:assert/strict'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG, type AveragerConfig, type AveragerHooks, type NamedTensor, type StepResult } from '../../agent/averager.js'
import type { Log } from '../../agent/log.js'
import { testLog } from './test-log.js'

export interface SwarmFixture {
  readonly nodes: SwarmNode[]
  readonly averagers: DecentralizedAverager[]
  stop(): Promise<void>
}

export interface SwarmFixtureOptions {
  readonly tensors: (index: number) => NamedTensor[]
  readonly config?: (index: number) => Partial<AveragerConfig>
  readonly prefix?: string
  readonly hooks?: (index: number, nodes: SwarmNode[]) => AveragerHooks
  /** Extra libp2p node options per peer (a private-network key, an allow list). */
  readonly node?: NodeOptionsFor
}

/** Swarms started in this process: labels their peers' log lines apart. */
let swarmsStarted = 0

/** n real libp2p nodes on loopback TCP, bootstrapped off the first, each with an averager. */
export async function startSwarm (n: number, options: SwarmFixtureOptions): Promise<SwarmFixture> {
  const nodes: SwarmNode[] = []
  const averagers: DecentralizedAverager[] = []
  const stop = async (): Promise<void> => {
    await Promise.allSettled(averagers.map(async a => { await a.shutdown() }))
    await Promise.allSettled(nodes.map(async node => { await node.stop() }))
  }
  const configs = Array.from({ length: n }, (_, i): AveragerConfig => ({
    ...DEFAULT_AVERAGER_CONFIG,
    prefix: options.prefix ?? 'test',
    averagingExpiration: 3,
    requestTimeout: 1.5,
    allreduceTimeout: 30,
    ...options.config?.(i)
  }))
  // Kept, and written out if the test file fails (test-log.ts); printed as they come with AVS_TEST_LOG.
  const swarm = ++swarmsStarted
  const logOf = (i: number): Log => testLog(`swarm ${swarm} peer ${i}`)
  try {
    // Each node's rendezvous service with its averager's request timeout, as the agent configures it.
    nodes.push(...await startConnectedNodes(n, (i) => ({ rendezvous: { requestTimeoutMs: configs[i].requestTimeout * 1000, log: logOf(i) }, ...options.node?.(i) })))
    for (let i = 0; i < n; i++) {
      averagers.push(await DecentralizedAverager.create(nodes[i], options.tensors(i), configs[i], { log: logOf(i), ...options.hooks?.(i, nodes) }))
    }
    return { nodes, averagers, stop }
  } catch (err) {
    await stop()
    throw err
  }
}

/** Values that differ per peer and per element, so a wrong span or offset shows. */
export function fill (length: number, seed: number): Float32Array {
  const out = new Float32Array(length)
  let x = (seed * 2654435761) >>> 0
  for (let i = 0; i < length; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0
    out[i] = (x / 4294967296) * 10 - 5 + seed
  }
  return out
}

export function weightedMean (arrays: readonly Float32Array[], weights: readonly number[]): Float64Array {
  const out = new Float64Array(arrays[0].length)
  const total = weights.reduce((a, b) => a + b, 0)
  for (let p = 0; p < arrays.length; p++) {
    if (weights[p] === 0) continue
    const a = arrays[p]
    for (let i = 0; i < out.length; i++) out[i] += weights[p] * a[i]
  }
  for (let i = 0; i < out.length; i++) out[i] /= total
  return out
}

export function maxAbsDiff (a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]))
  return m
}

/**
 * Every step in `results` ran in one group of all the swarm's agents, each found it within
 * `withinMs` of matchmaking, and every agent's first tensor is now the exact mean of `before`
 * (their first tensors before the step, weight 1 each).
 */
export async function assertOneExactGroup (swarm: SwarmFixture, results: readonly StepResult[], before: readonly Float32Array[], withinMs: number): Promise<void> {
  for (const r of results) {
    assert.equal(r.peers.length, swarm.averagers.length, `a group of ${r.peers.length}`)
    assert.equal(r.groupId, results[0].groupId)
    assert.ok(r.matchmakingMs < withinMs, `matchmaking took ${r.matchmakingMs} ms`)
  }
  const mean = weightedMean(before, before.map(() => 1))
  for (const a of swarm.averagers) assert.ok(maxAbsDiff(await a.withTensors(t => t[0].data), mean) < 1e-5)
}

export type { DataChannelKind } from '../../agent/net/frame-channel.js'

export interface DataChannelCase {
  /** How the test names it. */
  readonly name: string
  /** The path its channels take, as the averager counts them. */
  readonly channel: 'direct' | 'libp2p'
  readonly config: Partial<AveragerConfig>
}

/** Every way parts can travel: every correctness test of the averager runs over each. */
export const DATA_CHANNELS: readonly DataChannelCase[] = [
  { name: 'direct', channel: 'direct', config: { dataChannel: 'direct' } },
  { name: 'direct on 2 data threads', channel: 'direct', config: { dataChannel: 'direct', dataThreads: 2 } },
  { name: 'libp2p', channel: 'libp2p', config: { dataChannel: 'libp2p' } }
]
