/**
 * The end of a run (AVS_COMPLETION_ROUNDS, AVS_COMPLETION_DEADLINE, or the sidecar's trainer
 * finishing with AVS_COMPLETION_ON_TRAINER_EXIT): after its last round an agent makes sure the final
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

  constructor (
    private readonly ctx: Pick<WorkloadContext, 'checkpointer' | 'completionRounds' | 'completionDeadline' | 'completionOnTrainerExit' | 'averagerConfig' | 'metrics' | 'log' | 'signal'>,
    private readonly now: () => number = Date.now
  ) {}

  get done (): boolean { return this.finished }

  /** After a round: at the completion round, waits until the final checkpoint is durable and reports completion. */
  async reached (r: CompletedRound, snapshot: Snapshot): Promise<boolean> {
    const { completionRounds: target, completionDeadline: deadline } = this.ctx
    const byRounds = target !== undefined && r.round >= target
    const byTime = deadline !== undefined && this.now() >= deadline
    if (!byRounds && !byTime) return false
    return await this.complete(r, snapshot)
  }

  /**
   * The trainer has finished (AVS_COMPLETION_ON_TRAINER_EXIT): its last averaged round is this
   * agent's final one. `snapshot` is undefined when it never registered tensors (nothing to save).
   */
  async trainerFinished (r: CompletedRound, snapshot: Snapshot | undefined): Promise<boolean> {
    if (this.finished) return true
    this.ctx.log.info(`the trainer has finished after round ${r.round}: this agent's run ends`)
    return await this.complete(r, snapshot)
  }

  /** Makes round `r` durable (retrying while it cannot be), then reports completion; false when the agent stops first. */
  private async complete (r: CompletedRound, snapshot: Snapshot | undefined): Promise<boolean> {
    const checkpointer = this.ctx.checkpointer
    if (checkpointer !== undefined && snapshot !== undefined) {
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
    const { completionRounds: target, completionDeadline: deadline, checkpointer } = this.ctx
    if (this.finished) return true
    // Past the deadline by more than a round's worth of time, and no round of ours ended since:
    // stop trying to average (the others have finished) and take the swarm's newest checkpoint.
    if (deadline !== undefined && this.now() >= deadline + this.roundMs()) {
      this.ctx.log.info(`the run's time is up (${new Date(deadline).toISOString()}) and no round ended since: this agent's run is complete`)
      if (checkpointer !== undefined) await adopt()
      this.finish(checkpointer?.durableRound ?? 0)
      return true
    }
    if (target === undefined || checkpointer === undefined || !await checkpointer.seen(target)) return false
    this.ctx.log.info(`the swarm's final checkpoint (round ${checkpointer.durableRound}) is there: this agent's run is complete too`)
    await adopt()
    this.finish(checkpointer.durableRound)
    return true
  }

  /** The longest a round may take: finding a group twice over, then the all-reduce. */
  private roundMs (): number {
    const { averagingExpiration, allreduceTimeout } = this.ctx.averagerConfig
    return 1000 * (2 * averagingExpiration + allreduceTimeout)
  }

  private finish (round: number): void {
    this.finished = true
    this.ctx.metrics.completed.set(1)
    const checkpoint = this.ctx.checkpointer !== undefined ? `; the final checkpoint is round ${this.ctx.checkpointer.durableRound}` : ''
    this.ctx.log.info(`run complete after ${round} rounds${checkpoint}; averaging stops, the state stays served until the agent is stopped`)
  }
}
