import { test } from 'node:test'
import assert from 'node:assert/strict'
import { handOffMarginMs, handOffOnNotice, LeaveNotice } from '../../agent/leave-notice.js'
import { loadAgentConfig } from '../../agent/config.js'

test('a leave notice hands off a fifth of the grace period before the kill, 1 to 5 s, or at once', () => {
  assert.equal(new LeaveNotice('SIGTERM', 1000, 30_000).handOffAt, 1000 + 25_000)
  assert.equal(new LeaveNotice('SIGTERM', 1000, 10_000).handOffAt, 1000 + 8000)
  assert.equal(new LeaveNotice('SIGTERM', 1000, 3_600_000).handOffAt, 1000 + 3_595_000)
  assert.equal(new LeaveNotice('SIGTERM', 1000, 2000).handOffAt, 1000 + 1000)
  assert.equal(new LeaveNotice('SIGTERM', 1000, 500).handOffAt, 1000, 'less grace than the margin: at once')
  assert.equal(new LeaveNotice('SIGTERM', 1000, 0).handOffAt, 1000)
  assert.deepEqual([0, 4000, 10_000, 60_000].map(handOffMarginMs), [1000, 1000, 2000, 5000])
})

test('the averager learns the hand-off time when the shutdown signal aborts with a notice, and not for any other abort', () => {
  const seen: number[] = []
  const averager = { leaveBy: (at: number) => { seen.push(at) } }
  const noticed = new AbortController()
  handOffOnNotice(noticed.signal, averager)
  noticed.abort(new LeaveNotice('SIGTERM', 5000, 10_000))
  const early = new AbortController()
  early.abort(new LeaveNotice('SIGINT', 7000, 0))
  handOffOnNotice(early.signal, averager)
  const other = new AbortController()
  handOffOnNotice(other.signal, averager)
  other.abort(new Error('stopping for another reason'))
  assert.deepEqual(seen, [13_000, 7000])
})

test('AVS_TERMINATION_GRACE_SECONDS: 30 unset, any whole number of seconds the CRD admits (0 to 3600), anything else refused naming it', () => {
  const base = { AVS_SWARM: 's', AVS_POD_NAME: 's-agent-0', AVS_PREFIX: 'ns_s' }
  assert.equal(loadAgentConfig(base).terminationGraceSeconds, 30)
  for (const seconds of [0, 1, 12, 3600]) assert.equal(loadAgentConfig({ ...base, AVS_TERMINATION_GRACE_SECONDS: String(seconds) }).terminationGraceSeconds, seconds)
  for (const bad of ['-1', '3601', '1.5', 'soon']) {
    assert.throws(() => loadAgentConfig({ ...base, AVS_TERMINATION_GRACE_SECONDS: bad }), (err: Error) => err.message.includes('AVS_TERMINATION_GRACE_SECONDS') && !err.message.includes('\n    at '))
  }
})
