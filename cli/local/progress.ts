import { parsePrometheusText, sumOf } from '../../operator/controller/prom-text.js'
import { AGENT_METRICS } from '../../api/metric-names.js'
import type { LocalPod } from './pods.js'

/** One sample of the whole swarm, read from every agent's /metrics. */
export interface SwarmSample {
  readonly t: number
  readonly ready: number
  readonly rounds: number
  readonly failures: number
  /** Rounds whose codec carried changes since the group's shared base, all agents together (averaging_delta_rounds_total). */
  readonly deltaRounds: number
  /** Outer steps' rounds that averaged the pseudo-gradients alone, all agents together (averaging_pseudo_gradient_rounds_total). */
  readonly pseudoGradientRounds: number
  /** Bytes the agents' all-reduces sent, all together (averaging_sent_bytes_total). */
  readonly bytesSent: number
  readonly meanGroupSize: number
  readonly meanLoss: number
  readonly meanHeldOutLoss: number
  readonly meanDivergence: number
  readonly meanSteps: number
  /** Mean of the loss the trainers last reported (POST /v1/report, gauge averaging_trainer_loss); NaN when none did. */
  readonly meanTrainerLoss: number
  /** Samples the trainers reported, all agents together (averaging_trainer_samples_total); 0 when none did. */
  readonly trainerSamples: number
  /** Agents that finished the run (spec.completion) with the final checkpoint durable (averaging_completed). */
  readonly completed: number
  /** The newest round any agent knows to be checkpointed (averaging_checkpoint_round); NaN when none. */
  readonly checkpointRound: number
}

export async function sampleSwarm (pods: readonly LocalPod[], metricsPort: number, t: number): Promise<SwarmSample> {
  const scraped = await Promise.all(pods.map(async (pod) => {
    try {
      const [metrics, ready] = await Promise.all([
        fetch(`http://${pod.ip}:${metricsPort}/metrics`, { signal: AbortSignal.timeout(2000) }).then(async r => await r.text()),
        fetch(`http://${pod.ip}:${metricsPort}/readyz`, { signal: AbortSignal.timeout(2000) }).then(r => r.ok)
      ])
      return { samples: parsePrometheusText(metrics), ready }
    } catch {
      return null
    }
  }))
  // Agents that are not ready yet report gauges still at zero: they would drag the means down.
  const live = scraped.filter((s): s is NonNullable<typeof s> => s != null && s.ready)
  const mean = (name: string): number => {
    const values = live.map(s => sumOf(s.samples, name)).filter((v): v is number => v !== undefined && Number.isFinite(v))
    return values.length > 0 ? values.reduce((a, b) => a + b, 0) / values.length : NaN
  }
  const total = (name: string, match: Record<string, string> = {}): number => live.reduce((n, s) => n + (sumOf(s.samples, name, match) ?? 0), 0)
  const groups = total('averaging_group_size_count')
  return {
    t,
    ready: live.length,
    rounds: total('averaging_rounds_total', { outcome: 'success' }) + total('averaging_rounds_total', { outcome: 'partial' }),
    failures: total('averaging_rounds_total', { outcome: 'failure' }),
    deltaRounds: total(AGENT_METRICS.deltaRounds.name),
    pseudoGradientRounds: total(AGENT_METRICS.pseudoGradientRounds.name),
    bytesSent: total(AGENT_METRICS.bytesSent.name),
    meanGroupSize: groups > 0 ? total('averaging_group_size_sum') / groups : NaN,
    meanLoss: mean('averaging_training_loss'),
    meanHeldOutLoss: mean('averaging_training_heldout_loss'),
    meanDivergence: mean('averaging_parameter_divergence'),
    meanSteps: mean('averaging_training_steps_total'),
    meanTrainerLoss: meanTrainerLoss(live.map(s => s.samples)),
    trainerSamples: total('averaging_trainer_samples_total'),
    completed: total('averaging_completed'),
    checkpointRound: newest(live.map(s => sumOf(s.samples, 'averaging_checkpoint_round')))
  }
}

/**
 * The trainers' mean reported loss. A gauge never set reads 0 in Prometheus text, so an agent
 * whose trainer has reported nothing yet (loss 0 and no samples) is left out rather than averaged in.
 */
function meanTrainerLoss (agents: ReadonlyArray<ReturnType<typeof parsePrometheusText>>): number {
  const values: number[] = []
  for (const samples of agents) {
    const loss = sumOf(samples, 'averaging_trainer_loss')
    if (loss === undefined || !Number.isFinite(loss)) continue
    if (loss === 0 && (sumOf(samples, 'averaging_trainer_samples_total') ?? 0) === 0) continue
    values.push(loss)
  }
  return values.length > 0 ? values.reduce((a, b) => a + b, 0) / values.length : NaN
}

/** The largest finite value above 0 (a gauge never set reads 0), NaN when there is none. */
function newest (values: ReadonlyArray<number | undefined>): number {
  const set = values.filter((v): v is number => v !== undefined && Number.isFinite(v) && v > 0)
  return set.length > 0 ? Math.max(...set) : NaN
}
