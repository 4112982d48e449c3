import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { AddressInfo } from 'node:net'
import { startSwarm, fill } from '../swarm-fixture.js'
import { sampleValue } from '../metrics-text.js'
import { AgentMetrics } from '../../../agent/metrics/agent-metrics.js'
import { startMetricsServer } from '../../../agent/metrics/http-server.js'
import { AGENT_METRICS as M } from '../../../api/metric-names.js'
import { COMPRESSION_NAMES, type CompressionName } from '../../../agent/compression/index.js'
import type { StepResult } from '../../../agent/averager.js'
import { shortRound, WINDOW_MS } from '../../../agent/adapt/link-rate.js'

const DECLARED = 12_345_678

test('/metrics of real agents after real rounds: the bandwidth each declared and the rounds by the codec its group used', { timeout: 120_000 }, async () => {
  const metrics = [0, 1, 2].map(() => new AgentMetrics('metrics-test'))
  // Peer 0 declares a bandwidth; the others declare what they measure (nothing before their first round).
  // compression auto: the group picks the codec each round, which the counter must follow.
  const swarm = await startSwarm(3, {
    prefix: 'round-metrics',
    tensors: (p) => [{ name: 'w', shape: [50_000], data: fill(50_000, p) }],
    config: (p) => ({ targetGroupSize: 3, minGroupSize: 3, compression: 'auto', ...(p === 0 ? { bandwidth: DECLARED } : {}) }),
    // As agent/main.ts records a step.
    hooks: (p) => ({ onStep: (outcome, detail) => { metrics[p].recordRound(outcome, detail) } })
  })
  const servers = await Promise.all(metrics.map(async m => await startMetricsServer('127.0.0.1', 0, m.registry, { live: () => true, ready: () => true })))
  try {
    const results: StepResult[][] = [[], [], []]
    for (let round = 0; round < 2; round++) {
      const step = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
      step.forEach((r, p) => results[p].push(r))
      assert.equal(step[0].declaredBandwidth, DECLARED, 'peer 0 declared the configured bandwidth')
      for (const [p, server] of servers.entries()) {
        const text = await (await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`)).text()
        // The gauge follows the round just run: 0 where the peer declared none yet.
        assert.equal(sampleValue(text, M.declaredBandwidth.name, { swarm: 'metrics-test' }), step[p].declaredBandwidth ?? 0, `round ${round}: peer ${p}'s declared bandwidth`)
        for (const codec of COMPRESSION_NAMES) {
          const expected = results[p].filter(r => r.codec === codec).length
          assert.equal(sampleValue(text, M.codecRounds.name, { codec }), expected, `round ${round}: peer ${p}'s rounds with codec ${codec}`)
        }
        assert.equal(sampleValue(text, M.senderCutoffs.name, { deadline: 'adaptive' }), 0, 'nobody was cut off')
        assert.equal(sampleValue(text, M.senderCutoffs.name, { deadline: 'fixed' }), 0, 'nobody was cut off')
        assert.equal(sampleValue(text, M.reducerCutoffs.name, { deadline: 'adaptive' }), 0, 'no reducer was cut off')
        assert.equal(sampleValue(text, M.reducerCutoffs.name, { deadline: 'fixed' }), 0, 'no reducer was cut off')
      }
    }
    const used = new Set<CompressionName>(results.flat().map(r => r.codec))
    assert.ok([...used].every(c => c === 'none' || c === 'float16'), `auto picks none or float16 (${[...used].join(', ')})`)
    assert.ok(results[1][0].declaredBandwidth === undefined, 'peer 1 declared nothing before its first round')
    // After a clean round long enough to measure a link by it declares the rate it measured, so the
    // gauge showed a measured value, not only the spec's; after a shorter one (these tensors on a fast
    // loopback) it declares nothing, as before it (link-rate.ts, shortRound).
    const first = results[1][0].allreduce
    const clean = first.bannedSenders.length === 0 && first.failedReducers.length === 0
    // The rate's samples span the runner's whole run, so a round over one window (+1 ms of clock rounding) is measured.
    if (clean && first.durationMs > WINDOW_MS) assert.ok((results[1][1].declaredBandwidth ?? 0) > 0, `peer 1 declared its measured rate in round 2 (round 1 took ${first.durationMs} ms)`)
    if (shortRound(first.durationMs)) assert.equal(results[1][1].declaredBandwidth, undefined, `peer 1 declared nothing after a ${first.durationMs} ms round`)
  } finally {
    await Promise.all(servers.map(async s => { await new Promise(resolve => s.close(resolve)) }))
    await swarm.stop()
  }
})
