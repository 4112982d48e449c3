import { test } from 'node:test'
import assert from 'node:assert/strict'
import { loadAgentConfig, CHECKPOINT_EVERY_MAX, CHECKPOINT_KEEP_MAX, COMPLETION_ROUNDS_MAX } from '../../../agent/config.js'
import { CHECKPOINT_PARAMETERS } from '../../../api/checkpoint-parameters.js'

const base = { AVS_SWARM: 's', AVS_POD_NAME: 's-agent-0', AVS_PREFIX: 'ns_s' }

test('checkpoints and completion are off unless set, with the contract\'s defaults once a folder is given', () => {
  const off = loadAgentConfig(base)
  assert.equal(off.checkpoint, undefined)
  assert.equal(off.completionRounds, undefined)
  assert.deepEqual(loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/ckpt' }).checkpoint, { store: { kind: 'folder', dir: '/ckpt' }, every: 100, keep: 3 })
})

test('the bounds the CRD admits load, and one past each is refused naming its variable', () => {
  const edge = loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', AVS_CHECKPOINT_EVERY: String(CHECKPOINT_EVERY_MAX), AVS_CHECKPOINT_KEEP: String(CHECKPOINT_KEEP_MAX), AVS_COMPLETION_ROUNDS: String(COMPLETION_ROUNDS_MAX) })
  assert.deepEqual(edge.checkpoint, { store: { kind: 'folder', dir: '/c' }, every: CHECKPOINT_EVERY_MAX, keep: CHECKPOINT_KEEP_MAX })
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

const s3 = { AVS_CHECKPOINT_S3_BUCKET: 'runs', AWS_ACCESS_KEY_ID: 'id', AWS_SECRET_ACCESS_KEY: 'secret' }

test('a bucket instead of a folder: AVS_CHECKPOINT_S3_* with AWS_* credentials, the contract\'s defaults, and one sentence for what is missing', () => {
  assert.deepEqual(loadAgentConfig({ ...base, ...s3 }).checkpoint, {
    store: { kind: 's3', bucket: 'runs', region: 'us-east-1', prefix: undefined, forcePathStyle: false, credentials: { accessKeyId: 'id', secretAccessKey: 'secret' } },
    every: 100,
    keep: 3
  })
  const full = loadAgentConfig({ ...base, ...s3, AVS_CHECKPOINT_S3_ENDPOINT: 'http://minio.storage:9000', AVS_CHECKPOINT_S3_REGION: 'eu-west-1', AVS_CHECKPOINT_S3_PREFIX: 'team/a', AVS_CHECKPOINT_S3_PATH_STYLE: 'true', AWS_SESSION_TOKEN: 'tok' })
  assert.deepEqual(full.checkpoint?.store, {
    kind: 's3', bucket: 'runs', endpoint: 'http://minio.storage:9000', region: 'eu-west-1', prefix: 'team/a', forcePathStyle: true, credentials: { accessKeyId: 'id', secretAccessKey: 'secret', sessionToken: 'tok' }
  })
  assert.throws(() => loadAgentConfig({ ...base, AVS_CHECKPOINT_S3_BUCKET: 'runs' }), /AVS_CHECKPOINT_S3_BUCKET is set, but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY .* are not/)
  assert.throws(() => loadAgentConfig({ ...base, ...s3, AVS_CHECKPOINT_S3_ENDPOINT: 'minio:9000' }), /^AveragingError: AVS_CHECKPOINT_S3_ENDPOINT: "minio:9000" is not an http\(s\) URL|AVS_CHECKPOINT_S3_ENDPOINT: "minio:9000" is not an http\(s\) URL/)
  assert.throws(() => loadAgentConfig({ ...base, ...s3, AVS_CHECKPOINT_S3_PATH_STYLE: 'yes' }), /AVS_CHECKPOINT_S3_PATH_STYLE: "yes" is not one of true, false/)
  assert.throws(() => loadAgentConfig({ ...base, ...s3, AVS_CHECKPOINT_DIR: '/c' }), /are both set: checkpoints go to a folder or a bucket, not both/)
})

test('restoreFrom: another swarm of the same store, a round within the CRD\'s bounds, and nothing without a store', () => {
  assert.deepEqual(loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', AVS_RESTORE_FROM_SWARM: 'run-1' }).checkpoint?.restoreFrom, { swarm: 'run-1' })
  const max = CHECKPOINT_PARAMETERS.restoreFromRound.bound.max
  assert.deepEqual(loadAgentConfig({ ...base, ...s3, AVS_RESTORE_FROM_SWARM: 'run-1', AVS_RESTORE_FROM_ROUND: String(max) }).checkpoint?.restoreFrom, { swarm: 'run-1', round: max })
  assert.throws(() => loadAgentConfig({ ...base, ...s3, AVS_RESTORE_FROM_SWARM: 'run-1', AVS_RESTORE_FROM_ROUND: '0' }), /AVS_RESTORE_FROM_ROUND: "0" is not an integer from 1/)
  assert.throws(() => loadAgentConfig({ ...base, AVS_RESTORE_FROM_SWARM: 'run-1' }), /AVS_RESTORE_FROM_SWARM needs a checkpoint store/)
  assert.throws(() => loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', AVS_RESTORE_FROM_ROUND: '3' }), /AVS_RESTORE_FROM_ROUND needs AVS_RESTORE_FROM_SWARM/)
  assert.throws(() => loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', AVS_RESTORE_FROM_SWARM: '../etc' }), /AVS_RESTORE_FROM_SWARM: Swarm name "..\/etc" is not a valid folder name/)
})

test('AVS_COMPLETION_ON_TRAINER_EXIT is true or false, false by default', () => {
  assert.equal(loadAgentConfig(base).completionOnTrainerExit, false)
  assert.equal(loadAgentConfig({ ...base, AVS_COMPLETION_ON_TRAINER_EXIT: 'true' }).completionOnTrainerExit, true)
  assert.throws(() => loadAgentConfig({ ...base, AVS_COMPLETION_ON_TRAINER_EXIT: '1' }), /AVS_COMPLETION_ON_TRAINER_EXIT: "1" is not one of true, false/)
})

test('AVS_CHECKPOINT_INTERVAL: a duration within the CRD\'s bounds, in milliseconds', () => {
  assert.equal(loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', AVS_CHECKPOINT_INTERVAL: '30m' }).checkpoint?.intervalMs, 1_800_000)
  assert.equal(loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', AVS_CHECKPOINT_INTERVAL: '10s' }).checkpoint?.intervalMs, 10_000)
  assert.equal(loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', AVS_CHECKPOINT_INTERVAL: '8760h' }).checkpoint?.intervalMs, 8760 * 3_600_000)
  assert.equal(loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c' }).checkpoint?.intervalMs, undefined)
  for (const bad of ['9s', '8761h', 'hourly']) {
    assert.throws(() => loadAgentConfig({ ...base, AVS_CHECKPOINT_DIR: '/c', AVS_CHECKPOINT_INTERVAL: bad }), (err: Error) => err.message.includes(`AVS_CHECKPOINT_INTERVAL: "${bad}" is not`), bad)
  }
})
