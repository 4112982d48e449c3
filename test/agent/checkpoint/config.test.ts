import { test } from 'node:test'
import assert from 'node:assert/strict'
import { loadAgentConfig, CHECKPOINT_EVERY_MAX, CHECKPOINT_KEEP_MAX, COMPLETION_ROUNDS_MAX } from '../../../agent/config.js'

const base = { AVS_SWARM: 's', AVS_POD_NAME: 's-agent-0', AVS_PREFIX: 'ns_s' }

test('checkpoints and completion are off unless set, with the contract\'s defaults once a folder is given', () => {
  const off = loadAgentConfig(base)
  assert.equal(off.checkpoint, undefined)
  assert.equal(off.completionRounds, undefined)
  assert.deepEqual(loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/ckpt' }).checkpoint, { dir: '/ckpt', every: 100, keep: 3 })
})

test('the bounds the CRD admits load, and one past each is refused naming its variable', () => {
  const edge = loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', AVS_CHECKPOINT_EVERY: String(CHECKPOINT_EVERY_MAX), AVS_CHECKPOINT_KEEP: String(CHECKPOINT_KEEP_MAX), AVS_COMPLETION_ROUNDS: String(COMPLETION_ROUNDS_MAX) })
  assert.deepEqual(edge.checkpoint, { dir: '/c', every: CHECKPOINT_EVERY_MAX, keep: CHECKPOINT_KEEP_MAX })
  assert.equal(edge.completionRounds, COMPLETION_ROUNDS_MAX)
  assert.equal(loadAgentConfig({ ...base, AVS_COMPLETION_ROUNDS: '1' }).completionRounds, 1)
  for (const [name, value] of [
    ['AVS_CHECKPOINT_EVERY', '0'], ['AVS_CHECKPOINT_EVERY', String(CHECKPOINT_EVERY_MAX + 1)], ['AVS_CHECKPOINT_EVERY', '2.5'],
    ['AVS_CHECKPOINT_KEEP', '0'], ['AVS_CHECKPOINT_KEEP', String(CHECKPOINT_KEEP_MAX + 1)],
    ['AVS_COMPLETION_ROUNDS', '0'], ['AVS_COMPLETION_ROUNDS', String(COMPLETION_ROUNDS_MAX + 1)], ['AVS_COMPLETION_ROUNDS', 'ten']
  ]) {
    assert.throws(() => loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', [name]: value }), (err: Error) => err.message.startsWith(`${name}: "${value}" is not an integer`), `${name}=${value}`)
  }
})

test('AVS_COMPLETION_DEADLINE is an RFC 3339 time, refused otherwise naming the variable', () => {
  assert.equal(loadAgentConfig({ ...base, AVS_COMPLETION_DEADLINE: '2026-11-24T11:30:00Z' }).completionDeadline, Date.parse('2026-11-24T11:30:00Z'))
  assert.equal(loadAgentConfig({ ...base, AVS_COMPLETION_DEADLINE: '2026-11-24T11:30:00.5+01:00' }).completionDeadline, Date.parse('2026-11-24T10:30:00.5Z'))
  for (const bad of ['tomorrow', '2026-11-24', '1795521946']) {
    assert.throws(() => loadAgentConfig({ ...base, AVS_COMPLETION_DEADLINE: bad }), (err: Error) => err.message.startsWith(`AVS_COMPLETION_DEADLINE: "${bad}" is not an RFC 3339 time`), bad)
  }
})
