import { test } from 'node:test'
import assert from 'node:assert/strict'
import { pino } from 'pino'
import { Completion } from '../../../agent/workloads/completion.js'
import { AgentMetrics } from '../../../agent/metrics/agent-metrics.js'
import { DEFAULT_AVERAGER_CONFIG } from '../../../agent/averager.js'
import type { Snapshot } from '../../../agent/checkpoint/checkpointer.js'

const none: Snapshot = { bytes: 0, copy: () => [] }
const round = (r: number) => ({ round: r, peers: ['a'], self: 'a', samples: r })

function completion (o: { rounds?: number, deadline?: number }, now: () => number) {
  const metrics = new AgentMetrics('t')
  const c = new Completion({
    completionRounds: o.rounds, completionDeadline: o.deadline, averagerConfig: { ...DEFAULT_AVERAGER_CONFIG, prefix: 't', averagingExpiration: 5, allreduceTimeout: 10 },
    metrics, log: pino({ level: 'silent' }), signal: new AbortController().signal
  }, now)
  return { c, metrics }
}

test('a run ends at its rounds or at the first round ending after its deadline, whichever comes first', async () => {
  let t = 1_000_000
  const { c, metrics } = completion({ rounds: 10, deadline: 1_060_000 }, () => t)
  assert.equal(await c.reached(round(3), none), false)
  t = 1_060_000
  assert.equal(await c.reached(round(4), none), true, 'the deadline passed: the round that ends now is the last')
  assert.equal(c.done, true)
  assert.match(await metrics.registry.metrics(), /averaging_completed\{swarm="t"\} 1/)
  const byRounds = completion({ rounds: 10, deadline: 2_000_000 }, () => 1_000_000).c
  assert.equal(await byRounds.reached(round(9), none), false)
  assert.equal(await byRounds.reached(round(10), none), true)
})

test('an agent that averages no round past its deadline for longer than a round can take finishes anyway', async () => {
  let t = 1_000_000
  const { c } = completion({ deadline: 1_060_000 }, () => t)
  let adopted = 0
  const adopt = async (): Promise<void> => { adopted++ }
  assert.equal(await c.swarmFinished(adopt), false)
  t = 1_060_000 + 19_000 // a round may take 2 × 5 s + 10 s = 20 s
  assert.equal(await c.swarmFinished(adopt), false)
  t = 1_060_000 + 20_000
  assert.equal(await c.swarmFinished(adopt), true)
  assert.equal(adopted, 0, 'without checkpoints there is nothing to adopt')
  assert.equal(c.done, true)
})
