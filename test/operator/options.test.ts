import { test } from 'node:test'
import assert from 'node:assert/strict'
import { parseOptions } from '../../operator/options.js'

test('defaults follow controller-runtime\'s leader election timings and the chart\'s conventions', () => {
  const o = parseOptions([])
  assert.equal(o.leaderElect, true)
  assert.deepEqual([o.leaseDurationMs, o.renewDeadlineMs, o.retryPeriodMs], [15_000, 10_000, 2_000])
  assert.equal(o.metricsBindAddress, '0.0.0.0:8080')
  assert.equal(o.workers, 4)
  assert.equal(o.agentCommand, undefined)
})

test('flags override defaults; the agent command is a JSON array', () => {
  const o = parseOptions(['--no-leader-elect', '--workers', '8', '--agent-command', '["node","dist/agent/main.js"]', '--watch-namespace', 'ml'])
  assert.equal(o.leaderElect, false)
  assert.equal(o.workers, 8)
  assert.deepEqual(o.agentCommand, ['node', 'dist/agent/main.js'])
  assert.equal(o.watchNamespace, 'ml')
  assert.throws(() => parseOptions(['--agent-command', '"node"']), /JSON array of strings/)
})
