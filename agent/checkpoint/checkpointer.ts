/**
 * The agent's side of checkpoints: after a round that crosses the interval, one member of each
 * group (the smallest peer id: every member holds the same average, so no message is needed to
 * choose) writes the averaged tensors in the background; a restarted agent with no live peer to
 * download from restores the newest complete checkpoint; at completion every agent makes sure the
 * final round is durable before it says so.
 */
import type { CheckpointPolicy } from '../config.js'
import type { AgentMetrics } from '../metrics/agent-metrics.js'
import { describeError } from '../errors.js'
import { containerMemoryBytes } from '../util/memory.js'
import { CheckpointError, CheckpointTakenError, type CheckpointSchema, type LoadedCheckpoint } from './checkpoint.js'
import type { TensorSource } from './safetensors.js'
import { openCheckpointStore, type CheckpointStore } from './store.js'

/**
 * spec.restoreFrom names a checkpoint that is not there (or does not verify): the swarm must not
 * quietly start from initial values instead, the one thing a user who asked to continue a run
 * does not want. The workloads let it end the agent (or fail the trainer's register).
 */
export class RestoreSourceError extends CheckpointError {}

export interface CheckpointLog {
  info (msg: string): void
  warn (msg: string): void
}

/** A round this agent just completed, and the group it completed it in. */
export interface CompletedRound {
  /** Rounds completed so far, this one included (restored or downloaded rounds count). */
  readonly round: number
  readonly peers: readonly string[]
  readonly self: string
  /** Samples (or steps) behind this state, for the manifest. */
  readonly samples: number
  /**
   * The tensors moved after this round (a step that did not average left the trainer's copy-in, or an
   * outer step taken alone, in them): they no longer hold the round's result, which the other members do.
   */
  readonly movedSince?: boolean
}

/** The members of a round's group that keep the state and may write it: all but auxiliary peers (no volume, weight 0). */
export function stateHolders (result: { readonly peers: readonly string[], readonly auxiliary: readonly string[] }): string[] {
  return result.peers.filter(p => !result.auxiliary.includes(p))
}

/**
 * The tensors a checkpoint is written from. `copy` takes a stable copy now (the write then runs in
 * the background); `hold`, when given, runs the write over the live tensors while nothing can change
 * them, for a model whose copy would not fit in the container's memory beside the agent.
 */
export interface Snapshot {
  /** Bytes a copy takes (0: the values handed over are a copy already). */
  readonly bytes: number
  copy (): Promise<TensorSource[]> | TensorSource[]
  hold? (write: (tensors: TensorSource[]) => Promise<void>): Promise<void>
}

/** The share of the container's memory the agent may fill, its own use and a snapshot together. */
const SNAPSHOT_MEMORY_SHARE = 0.85

type Metrics = Pick<AgentMetrics, 'checkpointWrites' | 'checkpointSeconds' | 'checkpointBytes' | 'checkpointRound' | 'checkpointTimestamp' | 'checkpointSkipped'>

const FINAL_POLL_MS = 500

/** The group's writer: its smallest peer id (every member holds the same average). */
const leads = (r: CompletedRound): boolean => r.self === [...r.peers].sort()[0]

export class Checkpointer {
  readonly store: CheckpointStore
  private writing: Promise<void> | null = null
  /** The newest round this agent knows to be durable, and when it was written (unix ms; at first, the agent's start). */
  private durable = -1
  private durableAt: number
  private toldInPlace = false

  constructor (
    readonly policy: CheckpointPolicy,
    private readonly swarm: string,
    private readonly metrics: Metrics,
    private readonly log: CheckpointLog,
    /** The container's memory limit (default: cgroup memory.max, else the machine's). */
    private readonly memoryBytes: number = containerMemoryBytes(),
    private readonly usedBytes: () => number = () => process.memoryUsage().rss,
    private readonly now: () => number = Date.now
  ) {
    this.durableAt = now()
    this.store = openCheckpointStore(policy.store, { line: (line) => { this.log.info(line) } })
    // Every outcome's series exists from the start at 0, so "failed writes" reads 0, not "no data".
    for (const outcome of ['written', 'refused', 'failed']) metrics.checkpointWrites.labels(outcome).inc(0)
  }

  get durableRound (): number { return this.durable }

  /**
   * Whether this member of the group may write `round`: it is the smallest peer id, and the round is
   * an `every` round or policy.intervalMs has passed since the newest checkpoint this agent knows of
   * (afterRound then asks the store, which may know a newer one written by another group).
   */
  writes (r: CompletedRound): boolean {
    if (!leads(r)) return false
    return r.round % this.policy.every === 0 || this.intervalPassed()
  }

  private intervalPassed (): boolean {
    return this.policy.intervalMs !== undefined && this.now() - this.durableAt >= this.policy.intervalMs
  }

  /** Whether the interval has passed by the store's newest checkpoint too (others' writes count). */
  private async intervalDue (): Promise<boolean> {
    const newest = (await this.store.list(this.swarm).catch(() => [])).find(c => c.manifest)
    if (newest !== undefined && newest.round > this.durable) {
      const m = await this.store.manifest(this.swarm, newest.round).catch(() => undefined)
      if (m !== undefined) this.known(m.round, Date.parse(m.time) / 1000)
    }
    return this.intervalPassed()
  }

  /**
   * The newest complete checkpoint of this swarm that fits the schema (corrupt or foreign ones are
   * skipped and logged); without one, spec.restoreFrom's checkpoint of another swarm, which must be
   * there (RestoreSourceError otherwise).
   */
  async restore (schema: CheckpointSchema): Promise<LoadedCheckpoint | null> {
    const { checkpoint, skipped } = await this.store.loadNewest(this.swarm, schema, (line) => { this.log.warn(line) })
    if (skipped.length > 0) this.metrics.checkpointSkipped.inc(skipped.length)
    const restored = checkpoint ?? await this.restoreFrom(schema)
    if (restored !== null) {
      this.known(restored.manifest.round, Date.parse(restored.manifest.time) / 1000, restored.manifest.swarm === this.swarm)
      this.log.info(`restored round ${restored.manifest.round} from checkpoint ${restored.path}`)
    }
    return restored
  }

  /** spec.restoreFrom: a given round of another swarm, or its newest complete checkpoint. */
  private async restoreFrom (schema: CheckpointSchema): Promise<LoadedCheckpoint | null> {
    const from = this.policy.restoreFrom
    if (from === undefined) return null
    const where = this.store.where(from.swarm)
    if (from.round !== undefined) {
      const complete = (await this.store.list(from.swarm)).filter(c => c.manifest).map(c => c.round)
      if (!complete.includes(from.round)) {
        const present = complete.length === 0 ? 'it has none' : `its complete ones are round ${complete.join(', ')}`
        throw new RestoreSourceError(`restoreFrom: swarm ${from.swarm} has no checkpoint of round ${from.round} at ${where} (${present})`)
      }
      const r = await this.store.load(from.swarm, from.round, schema)
      if ('reason' in r) throw new RestoreSourceError(`restoreFrom: round ${from.round} of swarm ${from.swarm} cannot be restored from ${where}: ${r.reason}`)
      return r.checkpoint
    }
    const { checkpoint, skipped } = await this.store.loadNewest(from.swarm, schema, (line) => { this.log.warn(line) })
    if (skipped.length > 0) this.metrics.checkpointSkipped.inc(skipped.length)
    if (checkpoint === null) {
      const why = skipped.length === 0 ? 'there is none' : `none of its ${skipped.length} verifies or fits the registered tensors`
      throw new RestoreSourceError(`restoreFrom: swarm ${from.swarm} has no checkpoint to restore at ${where}: ${why}`)
    }
    return checkpoint
  }

  /**
   * After each completed round: when this agent writes it, takes the snapshot now and writes in the
   * background. A round whose predecessor is still being written is skipped (logged), so a slow
   * volume costs checkpoints, never rounds.
   */
  async afterRound (r: CompletedRound, snapshot: Snapshot, trainerState?: Record<string, unknown>): Promise<void> {
    if (!this.writes(r)) return
    if (r.round % this.policy.every !== 0 && (this.writing !== null || !await this.intervalDue())) return
    if (this.writing !== null) {
      this.log.warn(`not checkpointing round ${r.round}: the previous checkpoint is still being written`)
      return
    }
    if (this.inPlace(snapshot)) {
      await snapshot.hold!(async tensors => { await this.write(r, tensors, trainerState) })
      return
    }
    // Busy from the copy on; the caller waits for the copy only, so the next round cannot change what is written.
    const copy = Promise.resolve().then(async () => await snapshot.copy())
    this.writing = copy.then(async tensors => { await this.write(r, tensors, trainerState) }, (err: unknown) => {
      this.metrics.checkpointWrites.labels('failed').inc()
      this.log.warn(`checkpoint of round ${r.round} failed: copying the tensors failed: ${describeError(err)}`)
    }).finally(() => { this.writing = null })
    await copy.catch(() => {})
  }

  /** Whether a copy would not fit: then the write holds the live tensors and the next round waits for it. */
  private inPlace (snapshot: Snapshot): boolean {
    if (snapshot.hold === undefined || snapshot.bytes === 0) return false
    const fits = this.usedBytes() + snapshot.bytes <= SNAPSHOT_MEMORY_SHARE * this.memoryBytes
    if (!fits && !this.toldInPlace) {
      this.toldInPlace = true
      const gib = (b: number): string => (b / 2 ** 30).toFixed(1)
      this.log.warn(`checkpoints are written in place, holding up the next round: a ${gib(snapshot.bytes)} GiB copy does not fit beside the agent's ${gib(this.usedBytes())} GiB in its ${gib(this.memoryBytes)} GiB of memory`)
    }
    return !fits
  }

  /** Writes from a copy or in place, whichever fits, and waits for it. */
  private async writeNow (r: CompletedRound, snapshot: Snapshot, trainerState?: Record<string, unknown>): Promise<void> {
    if (this.inPlace(snapshot)) await snapshot.hold!(async tensors => { await this.write(r, tensors, trainerState) })
    else await this.write(r, await snapshot.copy(), trainerState)
  }

  /** Waits for the write under way, if any. */
  async drain (): Promise<void> {
    await this.writing
  }

  /**
   * At completion: returns once round `r.round` (or a later one) is durable. The group's writer
   * writes it; the others wait for its manifest up to `waitMs`, then write it themselves (one of
   * several writers wins; the rest hear the round is taken). A writer whose tensors moved after the
   * round (`r.movedSince`) waits as the others do, so that a member still holding the round's result
   * writes it. False when it could not be made durable.
   */
  async final (r: CompletedRound, snapshot: Snapshot, waitMs: number, trainerState?: Record<string, unknown>): Promise<boolean> {
    await this.drain()
    if (this.durable >= r.round) return true
    if (!leads(r) || r.movedSince === true) {
      const until = Date.now() + waitMs
      while (Date.now() < until) {
        if (await this.seen(r.round)) return true
        await new Promise(resolve => setTimeout(resolve, FINAL_POLL_MS))
      }
      this.log.warn(`the final checkpoint of round ${r.round} did not appear within ${Math.round(waitMs / 1000)} s; writing it here` +
        (r.movedSince === true ? ', from tensors that moved after that round (steps that did not average)' : ''))
    }
    await this.writeNow(r, snapshot, trainerState)
    // Refused because another agent is writing it: wait for its manifest rather than retry later.
    const until = Date.now() + waitMs
    for (;;) {
      if (this.durable >= r.round || await this.seen(r.round)) return true
      if (Date.now() >= until) return false
      await new Promise(resolve => setTimeout(resolve, FINAL_POLL_MS))
    }
  }

  /** Whether the folder holds a complete checkpoint of `round` or later (its manifest is there). */
  async seen (round: number): Promise<boolean> {
    const newest = (await this.store.list(this.swarm).catch(() => [])).find(c => c.manifest)
    if (newest === undefined || newest.round < round) return false
    this.known(newest.round, Date.now() / 1000)
    return true
  }

  private async write (r: CompletedRound, tensors: TensorSource[], trainerState?: Record<string, unknown>): Promise<void> {
    const started = process.hrtime.bigint()
    try {
      const { manifest, location } = await this.store.write({
        swarm: this.swarm, round: r.round, samples: r.samples, tensors, keep: this.policy.keep, trainerState, time: new Date(this.now())
      })
      const seconds = Number(process.hrtime.bigint() - started) / 1e9
      this.metrics.checkpointWrites.labels('written').inc()
      this.metrics.checkpointSeconds.observe(seconds)
      this.metrics.checkpointBytes.set(manifest.file.bytes)
      this.known(r.round, Date.parse(manifest.time) / 1000)
      this.log.info(`checkpointed round ${r.round} to ${location} (${(manifest.file.bytes / 1e6).toFixed(1)} MB in ${seconds.toFixed(2)} s)`)
    } catch (err) {
      if (err instanceof CheckpointTakenError) {
        this.metrics.checkpointWrites.labels('refused').inc()
        this.log.info(`not checkpointing round ${r.round}: ${err.message}`)
        return
      }
      this.metrics.checkpointWrites.labels('failed').inc()
      this.log.warn(`checkpoint of round ${r.round} failed: ${describeError(err)}`)
    }
  }

  /** `ours`: a checkpoint of this swarm (one restored from spec.restoreFrom's swarm is not in this swarm's store). */
  private known (round: number, unixSeconds: number, ours = true): void {
    if (!ours || round <= this.durable) return
    this.durable = round
    this.durableAt = Math.max(this.durableAt, unixSeconds * 1000)
    this.metrics.checkpointRound.set(round)
    this.metrics.checkpointTimestamp.set(unixSeconds)
  }

  close (): void { this.store.close() }
}
