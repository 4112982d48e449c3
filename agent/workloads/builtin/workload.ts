import type { Workload, WorkloadContext } from '../context.js'
import type { DecentralizedAverager, NamedTensor } from '../../averager.js'
import { loadTensorBackend } from '../../tensors/backend.js'
import { describeError } from '../../errors.js'
import { LocalModel } from './model.js'
import { makeHeldOut, makeShard } from './synthetic-data.js'
import type { StateSharing } from '../../state/state-sharing.js'
import type { TensorSource } from '../../checkpoint/safetensors.js'
import { Completion } from '../completion.js'
import { RestoreSourceError, stateHolders, type Snapshot } from '../../checkpoint/checkpointer.js'

export interface BuiltinOptions {
  readonly shardIndex: number
  /** Optimizer steps between yields to the event loop (keeps the agent responsive to peers). */
  readonly stepsPerSlice?: number
  /** When given, start from a live peer's weights and then offer ours to newcomers. */
  readonly stateSharing?: Pick<StateSharing, 'download' | 'start' | 'setPriority'>
}

/** Relative L2 distance between two sets of tensors: how far averaging moved this agent. */
export function divergence (before: readonly NamedTensor[], after: readonly NamedTensor[]): number {
  let diff = 0; let norm = 0
  for (let t = 0; t < before.length; t++) {
    const a = before[t].data; const b = after[t].data
    for (let i = 0; i < a.length; i++) { const d = a[i] - b[i]; diff += d * d; norm += a[i] * a[i] }
  }
  return Math.sqrt(diff) / Math.max(Math.sqrt(norm), 1e-12)
}

/**
 * Local SGD: train a small tfjs model on this agent's non-IID shard, and every `period`
 * average the weights with a group of the swarm.
 */
export function builtinWorkload (ctx: WorkloadContext, options: BuiltinOptions): Workload {
  return {
    async run () {
      const { tf, name } = await loadTensorBackend()
      ctx.log.info({ backend: name }, `tensor backend: ${name}`)
      const model = new LocalModel(tf, options.shardIndex)
      const shard = makeShard(options.shardIndex)
      const heldOut = makeHeldOut(512)
      const sharing = options.stateSharing
      let round = await loadState(ctx, model, sharing)
      const averager: DecentralizedAverager = await ctx.createAverager(model.weights())
      let steps = 0
      await sharing?.start(async () => ({ tensors: model.weights(), metadata: { steps, round } }), averager.directEndpoint())
      ctx.metrics.heldOutLoss.set(model.evaluate(heldOut))
      ctx.setReady(true)
      const slice = options.stepsPerSlice ?? 10
      const completion = new Completion(ctx)
      try {
        const adoptFinal = async (): Promise<void> => { round = await restoreCheckpoint(ctx, model, round) }
        while (!ctx.signal.aborted && !await completion.swarmFinished(adoptFinal)) {
          const roundEnds = Date.now() + ctx.period * 1000
          while (Date.now() < roundEnds && !ctx.signal.aborted) {
            const loss = model.train(shard, slice)
            ctx.metrics.trainingLoss.set(loss)
            ctx.metrics.trainingSteps.inc(slice)
            steps += slice
            await new Promise(resolve => setImmediate(resolve))
          }
          if (ctx.signal.aborted) break
          const before = model.weights()
          await averager.withTensors(tensors => { model.copyWeightsInto(tensors) })
          try {
            const result = await averager.step({ timeout: ctx.averagerConfig.averagingExpiration * 2 + ctx.averagerConfig.allreduceTimeout, signal: ctx.signal, round })
            const after = await averager.withTensors(tensors => tensors.map(t => ({ ...t, data: t.data.slice() })))
            model.loadWeights(after)
            ctx.metrics.divergence.set(divergence(before, after))
            const heldOutLoss = model.evaluate(heldOut)
            ctx.metrics.heldOutLoss.set(heldOutLoss)
            void sharing?.setPriority(steps)
            // The group agrees on its round, so members that joined from a stale donor catch up.
            round = result.groupRound + 1
            ctx.log.info({ group: result.groupId.slice(0, 8), size: result.peers.length, heldOutLoss, round }, 'averaged')
            const completed = { round, peers: stateHolders(result), self: ctx.node.peerId.toString(), samples: steps }
            // `after` is a copy already, and nothing changes it: no second copy.
            const snapshot: Snapshot = { bytes: 0, copy: (): TensorSource[] => after.map(t => ({ name: t.name, dtype: 'float32', shape: t.shape, data: t.data })) }
            await ctx.checkpointer?.afterRound(completed, snapshot)
            if (await completion.reached(completed, snapshot)) break
          } catch (err) {
            ctx.log.warn({ err: describeError(err) }, `round failed: ${describeError(err)}`)
          }
        }
        // A finished run keeps serving its final state to late peers until the pod is stopped.
        if (completion.done && !ctx.signal.aborted) await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })
      } finally {
        await ctx.checkpointer?.drain()
        await averager.shutdown()
        model.dispose()
      }
    }
  }
}

/**
 * A newcomer's start: a live peer's weights (and round), else the newest checkpoint, else the
 * initial weights. Returns the rounds already behind that state.
 */
async function loadState (ctx: WorkloadContext, model: LocalModel, sharing: BuiltinOptions['stateSharing']): Promise<number> {
  const state = await sharing?.download(model.weights()).catch((err: unknown) => {
    ctx.log.warn({ err: describeError(err) }, `state download failed: ${describeError(err)}`)
    return null
  })
  if (state != null) {
    model.loadWeights(state.tensors)
    ctx.log.info({ donor: state.donor }, 'loaded the swarm state from a peer')
    const round = Number(state.metadata.round)
    return Number.isSafeInteger(round) && round > 0 ? round : 0
  }
  const round = await restoreCheckpoint(ctx, model, -1)
  if (round >= 0) return round
  if (sharing !== undefined) ctx.log.info('no live peer served the swarm\'s state (the debug log says why) and no checkpoint was restored: starting from the initial weights')
  return 0
}

/** Loads the newest checkpoint into the model; returns its round, or `round` when there is none. */
async function restoreCheckpoint (ctx: WorkloadContext, model: LocalModel, round: number): Promise<number> {
  const checkpoint = await ctx.checkpointer?.restore(model.weights().map(t => ({ name: t.name, shape: t.shape }))).catch((err: unknown) => {
    // spec.restoreFrom's checkpoint is missing: end the agent with that sentence rather than train from initial values.
    if (err instanceof RestoreSourceError) throw err
    ctx.log.warn({ err: describeError(err) }, `restoring a checkpoint failed: ${describeError(err)}`)
    return null
  })
  if (checkpoint == null) return round
  model.loadWeights(model.weights().map(t => ({ ...t, data: checkpoint.tensors.get(t.name)! })))
  return checkpoint.manifest.round
}
