// The agent starts its workload while the routing table settles (agent/main.ts joinSwarm); the
// averager's first step waits for hooks.routed, at most SETTLE_MAX_MS and never past the step's
// deadline or abort; later steps do not wait.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startSwarm, fill, weightedMean, maxAbsDiff } from './swarm-fixture.js'
import { SETTLE_MAX_MS } from '../../agent/net/bootstrap.js'
import { AveragingError } from '../../agent/errors.js'
import type { NamedTensor } from '../../agent/averager.js'

const tensors = (p: number): NamedTensor[] => [{ name: 'x', shape: [256], data: fill(256, p) }]
const config = (): { targetGroupSize: number, minGroupSize: number } => ({ targetGroupSize: 2, minGroupSize: 2 })

test('the first step looks for a group only once the routing table settled, then averages to the exact mean', { timeout: 90_000 }, async () => {
  let settle!: () => void
  let settledAt = Infinity
  const routed = new Promise<void>(resolve => { settle = () => { settledAt = Date.now(); resolve() } })
  const groupAt: number[] = []
  const swarm = await startSwarm(2, {
    tensors, config,
    hooks: (i) => ({ ...(i === 0 ? { routed } : {}), onGroup: () => { groupAt[i] = Date.now() } })
  })
  try {
    const steps = swarm.averagers.map(async a => await a.step({ timeout: 30 }))
    setTimeout(settle, 1500)
    const results = await Promise.all(steps)
    assert.ok(groupAt[0] >= settledAt, 'peer 0 joined a group only after its routing table settled')
    for (const r of results) assert.equal(r.peers.length, 2)
    const mean = weightedMean([tensors(0)[0].data, tensors(1)[0].data], [1, 1])
    for (const a of swarm.averagers) assert.ok(maxAbsDiff(await a.withTensors(t => t[0].data), mean) < 1e-5)
  } finally { await swarm.stop() }
})

test('a routing table that never settles holds the first step to its own deadline at most; the next step does not wait', { timeout: 90_000 }, async () => {
  const never = new Promise<void>(() => {})
  const swarm = await startSwarm(2, { tensors, config, hooks: (i) => (i === 0 ? { routed: never } : {}) })
  try {
    // Peer 0's first step has 2 s: it spends them waiting and fails; nothing changed.
    await assert.rejects(swarm.averagers[0].step({ timeout: 2 }), AveragingError)
    assert.equal(maxAbsDiff(await swarm.averagers[0].withTensors(t => t[0].data), tensors(0)[0].data), 0)
    // Its next step looks for a group at once and averages with peer 1.
    const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 30 })))
    for (const r of results) assert.equal(r.peers.length, 2)
    const mean = weightedMean([tensors(0)[0].data, tensors(1)[0].data], [1, 1])
    for (const a of swarm.averagers) assert.ok(maxAbsDiff(await a.withTensors(t => t[0].data), mean) < 1e-5)
  } finally { await swarm.stop() }
})

test('aborting the first step ends its wait for the routing table', { timeout: 60_000 }, async () => {
  const never = new Promise<void>(() => {})
  const swarm = await startSwarm(2, { tensors, config, hooks: (i) => (i === 0 ? { routed: never } : {}) })
  try {
    const abort = new AbortController()
    const started = Date.now()
    setTimeout(() => { abort.abort() }, 300)
    await assert.rejects(swarm.averagers[0].step({ timeout: 60, signal: abort.signal }))
    // Without the abort it would wait SETTLE_MAX_MS (8 s) and then look for a group until 60 s.
    assert.ok(Date.now() - started < SETTLE_MAX_MS, `the step ended ${Date.now() - started} ms after it began`)
  } finally { await swarm.stop() }
})
