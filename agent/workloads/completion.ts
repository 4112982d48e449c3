/**
 * The end of a run (AVS_COMPLETION_ROUNDS): after its last round an agent makes sure the final
 * checkpoint is durable, then reports averaging_completed 1 and stops averaging. An agent that
 * fell behind (restarted late, or left without peers) finishes too once the swarm's final
 * checkpoint is in the folder, taking that state as its own.
 */
import { setTimeout as delay } from 'node:timers/promises'
import type { WorkloadContext } from './context.js'
import type { CompletedRound, Snapshot } from '../checkpoint/checkpointer.js'

const RETRY_MS = 30_000

export class Completion {
  private finished = false

  constructor (private readonly ctx: Pick<WorkloadContext, 'checkpointer' | 'completionRounds' | 'averagerConfig' | 'metrics' | 'log' | 'signal'>) {}

  get done (): boolean { return this.finished }

  /** After a round: at the completion round, waits until the final checkpoint is durable and reports completion. */
  async reached (r: CompletedRound, snapshot: Snapshot): Promise<boolean> {
    const target = this.ctx.completionRounds
    if (target === undefined || r.round < target) return false
    const checkpointer = this.ctx.checkpointer
    if (checkpointer !== undefined) {
      const { averagingExpiration, allreduceTimeout } = this.ctx.averagerConfig
      const waitMs = Math.max(30_000, 2_000 * (averagingExpiration + allreduceTimeout))
      while (!await checkpointer.final(r, snapshot, waitMs)) {
        this.ctx.log.warn(`the final checkpoint of round ${r.round} is not durable yet; trying again in ${RETRY_MS / 1000} s`)
        if (!await delay(RETRY_MS, true, { signal: this.ctx.signal }).catch(() => false)) return false
      }
    }
    this.finish(r.round)
    return true
  }

  /**
   * Before a round: whether the swarm already finished without us (its final checkpoint is in the
   * folder). `adopt` loads that checkpoint as our state.
   */
  async swarmFinished (adopt: () => Promise<void>): Promise<boolean> {
    const { completionRounds: target, checkpointer } = this.ctx
    if (this.finished) return true
    if (target === undefined || checkpointer === undefined || !await checkpointer.seen(target)) return false
    this.ctx.log.info(`the swarm's final checkpoint (round ${checkpointer.durableRound}) is there: this agent's run is complete too`)
    await adopt()
    this.finish(checkpointer.durableRound)
    return true
  }

  private finish (round: number): void {
    this.finished = true
    this.ctx.metrics.completed.set(1)
    const checkpoint = this.ctx.checkpointer !== undefined ? `; the final checkpoint is round ${this.ctx.checkpointer.durableRound}` : ''
    this.ctx.log.info(`run complete after ${round} rounds${checkpoint}; averaging stops, the state stays served until the agent is stopped`)
  }
}
