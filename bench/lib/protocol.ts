/**
 * The benchmark runner protocol, shared by the runner and every TypeScript peer. Peers written in
 * other languages (bench/peers/bench_peer.py) implement the same contract; bench/README.md is its
 * description of record.
 */

/** What the runner hands each peer process through its environment. */
export interface PeerEnv {
  readonly rank: number
  readonly world: number
  /** peers per averaging group (hivemind's target_group_size = min_group_size); equal to world unless set. */
  readonly groupSize: number
  /** float32 elements in each peer's tensor. */
  readonly elements: number
  /** measured rounds, after the warm-up rounds. */
  readonly rounds: number
  readonly warmup: number
  readonly partBytes: number
  /** 'none' | 'float16' | 'uniform8bit' | 'blockwise8bit' (peers that cannot compress ignore it and say so). */
  readonly compression: string
  /** base URL of the runner's coordinator, http://127.0.0.1:port */
  readonly coord: string
}

/** What a peer reports at the end through POST /result. */
export interface PeerResult {
  readonly rank: number
  /** wall time of each measured round's all-reduce on this peer, in ms. */
  readonly roundsMs: number[]
  /** time from a round's start until its group was formed, when the implementation has matchmaking. */
  readonly matchmakingMs?: number[]
  /** CPU seconds (user + system, this process and its helpers) spent over all measured rounds. */
  readonly cpuSeconds: number
  /** Of those, the main thread's (node peers only): the share no worker thread can take over. */
  readonly mainThreadCpuSeconds?: number
  /** peak resident memory of this peer (its process and helper processes), bytes. */
  readonly peakRssBytes: number
  /**
   * largest |result - exact mean| over all elements and measured rounds; null when nothing is
   * averaged (the floors); the string "Infinity" when a result held NaN or infinity (JSON has neither).
   */
  readonly maxAbsError: number | string | null
  /** one line the table shows under the row, e.g. which cipher was negotiated. */
  readonly note?: string
  /** further figures a runner of its own reads (bench/trainer-step.ts: the agent's round, copies, RSS apart). */
  readonly extra?: Readonly<Record<string, number | number[]>>
}

/**
 * The address a peer listens on: 127.0.0.1, or BENCH_HOST where the runner put each peer in a
 * network namespace of its own (bench/links.ts), where loopback reaches nobody else.
 */
export function benchHost (): string {
  return process.env.BENCH_HOST ?? '127.0.0.1'
}

export const ENV = {
  rank: 'BENCH_RANK',
  world: 'BENCH_WORLD',
  groupSize: 'BENCH_GROUP_SIZE',
  elements: 'BENCH_ELEMENTS',
  rounds: 'BENCH_ROUNDS',
  warmup: 'BENCH_WARMUP',
  partBytes: 'BENCH_PART_BYTES',
  compression: 'BENCH_COMPRESSION',
  coord: 'BENCH_COORD'
} as const

function intFrom (env: NodeJS.ProcessEnv, name: string, fallback?: number): number {
  const raw = env[name]
  if (raw == null || raw === '') {
    if (fallback != null) return fallback
    throw new Error(`environment variable ${name} is required (this program is started by bench/allreduce.ts)`)
  }
  const value = Number(raw)
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`environment variable ${name} must be a non-negative integer, got "${raw}"`)
  return value
}

export function peerEnvFrom (env: NodeJS.ProcessEnv = process.env): PeerEnv {
  const coord = env[ENV.coord]
  if (coord == null || coord === '') throw new Error(`environment variable ${ENV.coord} is required (this program is started by bench/allreduce.ts)`)
  const world = intFrom(env, ENV.world)
  return {
    rank: intFrom(env, ENV.rank),
    world,
    groupSize: intFrom(env, ENV.groupSize, world),
    elements: intFrom(env, ENV.elements),
    rounds: intFrom(env, ENV.rounds),
    warmup: intFrom(env, ENV.warmup, 1),
    partBytes: intFrom(env, ENV.partBytes, 65536),
    compression: env[ENV.compression] ?? 'none',
    coord
  }
}

export function envFor (p: PeerEnv): Record<string, string> {
  return {
    [ENV.rank]: String(p.rank),
    [ENV.world]: String(p.world),
    [ENV.groupSize]: String(p.groupSize),
    [ENV.elements]: String(p.elements),
    [ENV.rounds]: String(p.rounds),
    [ENV.warmup]: String(p.warmup),
    [ENV.partBytes]: String(p.partBytes),
    [ENV.compression]: p.compression,
    [ENV.coord]: p.coord
  }
}

/**
 * Element i of rank r's tensor. Values are exact in float32 (an integer plus a multiple of 1/1024),
 * so the exact mean is known without gathering anything: every peer checks its own result.
 */
export function initialValue (rank: number, index: number): number {
  return rank + 1 + (index % 1024) / 1024
}

export function fillTensor (tensor: Float32Array, rank: number): void {
  for (let i = 0; i < tensor.length; i++) tensor[i] = initialValue(rank, i)
}

/** Largest |tensor - exact mean| over the whole world, or over the given group's ranks. */
export function maxAbsErrorOf (tensor: Float32Array, world: number, groupRanks?: readonly number[]): number {
  const offset = groupRanks == null ? (world + 1) / 2 : groupRanks.reduce((sum, r) => sum + r + 1, 0) / groupRanks.length
  let worst = 0
  for (let i = 0; i < tensor.length; i++) {
    const error = Math.abs(tensor[i] - (offset + (i % 1024) / 1024))
    if (Number.isNaN(error)) return Number.POSITIVE_INFINITY // a NaN is the worst answer there is
    if (error > worst) worst = error
  }
  return worst
}
