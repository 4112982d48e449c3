/**
 * spec.checkpoint, spec.completion and spec.ttlSecondsAfterFinished in the CRD: bounds and
 * defaults from api/checkpoint-parameters.ts, equal to the agent's own defaults (api/agent-env.ts);
 * the local validator refuses what the API server refuses, naming the field (the malformed corpus
 * runs the same cases on a real kube-apiserver in test/e2e/operator.test.ts).
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { parse } from 'yaml'
import { AGENT_ENV } from '../../../api/agent-env.js'
import { CHECKPOINT_PARAMETERS, DNS1123_SUBDOMAIN, S3_ENDPOINT, S3_PREFIX } from '../../../api/checkpoint-parameters.js'
import { CRD_FILE } from '../../../api/v1alpha1/crd-yaml.js'
import { withDefaults } from '../../../api/v1alpha1/defaults.js'
import { validateSwarm } from '../../../api/v1alpha1/validate.js'
import { MALFORMED, malformedSwarm } from '../malformed/cases.js'

const obj = (spec: Record<string, unknown>) => ({ apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: 'job', namespace: 'ml' }, spec })

test('a swarm with checkpoint, completion and a TTL is admitted, at the edges of every bound too', () => {
  assert.deepEqual(validateSwarm(obj({ checkpoint: { every: 100, keep: 3, volume: { claimName: 'my-claim' } }, completion: { rounds: 1000, podPolicy: 'Keep' }, ttlSecondsAfterFinished: 3600 })), [])
  assert.deepEqual(validateSwarm(obj({ checkpoint: { every: 1, keep: 1, volume: { claimName: 'a' } }, completion: { rounds: 1 }, ttlSecondsAfterFinished: 0 })), [])
  assert.deepEqual(validateSwarm(obj({ checkpoint: { every: 1e9, keep: 1000, volume: { claimName: 'ckpt.team-a' } }, completion: { rounds: 1e12 } })), [])
  assert.deepEqual(validateSwarm(obj({ completion: { rounds: 5 } })), [], 'completion without checkpoints is allowed')
})

test('the malformed checkpoint and completion cases are refused locally, each naming its field in one sentence', () => {
  const cases = MALFORMED.filter(c => /checkpoint|completion|ttlSeconds|restoreFrom|backoffLimit/.test(c.field))
  assert.ok(cases.length >= 10)
  for (const c of cases) {
    const problems = validateSwarm(malformedSwarm(c, 0))
    // A missing field is named by its parent and its own name: 'spec.checkpoint is missing the field "volume"'.
    const parent = c.field.slice(0, c.field.lastIndexOf('.'))
    const names = (p: string) => p.startsWith(c.field) || p === `${parent} is missing the field "${c.field.slice(parent.length + 1)}"`
    assert.ok(problems.some(names), `${c.what}: ${JSON.stringify(problems)}`)
  }
  assert.deepEqual(validateSwarm(obj({ ttlSecondsAfterFinished: 60 })), ['spec.ttlSecondsAfterFinished: ttlSecondsAfterFinished needs completion or backoffLimit: a swarm with neither never finishes'])
  assert.deepEqual(validateSwarm(obj({ ttlSecondsAfterFinished: 60, backoffLimit: 0 })), [], 'a swarm that can fail can expire')
})

test('defaults: CRD = withDefaults() = the agent\'s env contract; absent sections stay absent', () => {
  const crd = parse(readFileSync(CRD_FILE, 'utf8'))
  const spec = crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties
  assert.equal(spec.checkpoint.properties.every.default, Number(AGENT_ENV.checkpointEvery.default))
  assert.equal(spec.checkpoint.properties.keep.default, Number(AGENT_ENV.checkpointKeep.default))
  assert.equal(spec.completion.properties.podPolicy.default, 'Delete')
  assert.equal(spec.completion.properties.rounds.default, undefined)
  assert.equal(spec.checkpoint.required, undefined, 'volume or s3: a CEL rule says which is missing')
  assert.equal(spec.completion.required, undefined, 'rounds, duration or onTrainerExit: a CEL rule says which is missing')
  assert.equal(spec.completion.properties.onTrainerExit.default, (AGENT_ENV.completionOnTrainerExit.default as string) === 'true')
  const s3 = spec.checkpoint.properties.s3.properties
  assert.equal(s3.region.default, AGENT_ENV.checkpointS3Region.default)
  assert.equal(s3.forcePathStyle.default, (AGENT_ENV.checkpointS3PathStyle.default as string) === 'true')
  assert.deepEqual([s3.secretRef.properties.accessKeyIdKey.default, s3.secretRef.properties.secretAccessKeyKey.default], ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'])
  assert.deepEqual(spec.checkpoint.properties.volume.properties.claimTemplate.properties.accessModes.default, ['ReadWriteMany'])
  const d = withDefaults({ checkpoint: { volume: { claimName: 'c' } }, completion: { rounds: 7 } })
  assert.deepEqual(d.checkpoint, { every: 100, keep: 3, volume: { claimName: 'c' } })
  assert.deepEqual(d.completion, { rounds: 7, onTrainerExit: false, podPolicy: 'Delete' })
  assert.deepEqual(withDefaults({ checkpoint: { volume: { claimTemplate: { size: '1Gi' } } } }).checkpoint?.volume, { claimTemplate: { size: '1Gi', accessModes: ['ReadWriteMany'] } })
  assert.deepEqual(withDefaults({ checkpoint: { s3: { bucket: 'models', secretRef: { name: 'creds' } } } }).checkpoint?.s3, {
    bucket: 'models', region: 'us-east-1', forcePathStyle: false, secretRef: { name: 'creds', accessKeyIdKey: 'AWS_ACCESS_KEY_ID', secretAccessKeyKey: 'AWS_SECRET_ACCESS_KEY' }
  })
  const none = withDefaults({})
  assert.ok(!('checkpoint' in none) && !('completion' in none) && !('ttlSecondsAfterFinished' in none))
  assert.equal(CHECKPOINT_PARAMETERS.completionRounds.bound.max, 1e12)
})

test('completion by duration: admitted from 1m to 8760h, neither rounds nor duration refused, each naming the field', () => {
  const base = { apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: 'd' } }
  const problems = (completion: unknown): string[] => validateSwarm({ ...base, spec: { completion } })
  assert.deepEqual(problems({ duration: '1m' }), [])
  assert.deepEqual(problems({ duration: '8760h', rounds: 5 }), [])
  assert.deepEqual(problems({ duration: '59s' }), ['spec.completion.duration: completion.duration must be a duration from 1m to 8760h'])
  assert.deepEqual(problems({ duration: '8761h' }), ['spec.completion.duration: completion.duration must be a duration from 1m to 8760h'])
  assert.deepEqual(problems({ podPolicy: 'Keep' }), ['spec.completion: completion needs rounds, duration or onTrainerExit (any of them): the run ends at whichever comes first'])
  assert.deepEqual(problems({ onTrainerExit: false }), ['spec.completion: completion needs rounds, duration or onTrainerExit (any of them): the run ends at whichever comes first'], 'false is not a criterion')
  assert.ok(problems({ duration: 'soon' }).some(p => p.startsWith('spec.completion.duration')))
})

test('the claim name pattern is Kubernetes\' DNS-1123 subdomain', () => {
  const re = new RegExp(DNS1123_SUBDOMAIN)
  for (const ok of ['a', 'my-claim', 'ckpt.team-a', '0abc']) assert.match(ok, re)
  for (const bad of ['', 'My-Claim', '-a', 'a-', 'a_b', 'a..b', 'a/b']) assert.doesNotMatch(bad, re)
})

test('the stores, restoreFrom, onTrainerExit and backoffLimit are admitted in their full forms and at their edges', () => {
  const creds = { name: 'creds' }
  const sidecar = { type: 'sidecar', trainer: { image: 'trainer:1' } }
  for (const spec of [
    { checkpoint: { volume: { claimTemplate: { size: '10Gi' } } } },
    { checkpoint: { volume: { claimTemplate: { size: '0.5Ti', storageClassName: '', accessModes: ['ReadWriteOnce'] } } } },
    { checkpoint: { volume: { claimTemplate: { size: '500M', storageClassName: 'nfs.example.com', accessModes: ['ReadWriteMany', 'ReadWriteOnce'] } } } },
    { checkpoint: { s3: { bucket: 'abc', secretRef: creds } } },
    { checkpoint: { s3: { bucket: 'b'.repeat(63), endpoint: 'https://s3.eu-central-1.amazonaws.com', region: 'eu-central-1', prefix: 'team-a/runs/2026', forcePathStyle: false, secretRef: { name: 'creds', accessKeyIdKey: 'id', secretAccessKeyKey: 'secret', sessionTokenKey: 'token' } } } },
    { checkpoint: { s3: { bucket: 'models.team-a', endpoint: 'http://10.0.0.12:65535', forcePathStyle: true, secretRef: creds } } },
    { checkpoint: { volume: { claimName: 'ckpt' } }, restoreFrom: { swarm: 'run-1' } },
    { checkpoint: { s3: { bucket: 'models', secretRef: creds } }, restoreFrom: { swarm: 'run-1', round: CHECKPOINT_PARAMETERS.restoreFromRound.bound.max } },
    { workload: sidecar, completion: { onTrainerExit: true } },
    { workload: sidecar, completion: { onTrainerExit: true, rounds: 10, duration: '1h', podPolicy: 'Keep' } },
    { backoffLimit: 0 },
    { backoffLimit: 2147483647, ttlSecondsAfterFinished: 60 }
  ]) assert.deepEqual(validateSwarm(obj(spec)), [], JSON.stringify(spec))
})

test('every S3 endpoint the CRD admits is a URL the agent can parse, host and port intact; random near-misses are refused', () => {
  const re = new RegExp(S3_ENDPOINT.pattern)
  let seed = 1717
  const rand = (n: number) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n }
  const alphabet = 'abcz09-.:/[]_@?#Ax'
  let admitted = 0
  for (let i = 0; i < 20000; i++) {
    const host = Array.from({ length: 1 + rand(14) }, () => alphabet[rand(alphabet.length)]).join('')
    const candidate = `${rand(2) === 0 ? 'http' : 'https'}://${host}${rand(3) === 0 ? `:${rand(70000)}` : ''}`
    if (!re.test(candidate)) continue
    admitted++
    const url = new URL(candidate) // throws if the agent could not parse it
    assert.equal(`${url.protocol}//${url.host}`, candidate.toLowerCase().replace(/:(80|443)$/, m => (url.port === '' ? '' : m)), candidate)
  }
  assert.ok(admitted > 500, `only ${admitted} random endpoints matched`)
  for (const ok of ['http://minio:9000', 'https://s3.amazonaws.com', 'http://192.168.1.20:9000', 'http://rgw-1.ceph.svc.cluster.local']) assert.match(ok, re)
  for (const bad of ['minio:9000', 'ftp://minio', 'http://minio:0', 'http://minio:65536', 'http://minio/', 'http://a.256', 'http://999.1.1.1', 'http://xn--a.com', 'http://user@minio', 'http://[::1]:9000']) assert.doesNotMatch(bad, re)
})

test('S3 bucket names and prefixes: S3\'s bucket rules, prefixes without leading, trailing or doubled slashes', () => {
  const bucket = (b: string) => validateSwarm(obj({ checkpoint: { s3: { bucket: b, secretRef: { name: 'c' } } } }))
  for (const ok of ['abc', 'my-models', 'models.team-a', 'a'.repeat(63)]) assert.deepEqual(bucket(ok), [], ok)
  for (const bad of ['ab', 'a'.repeat(64), 'Models', '-models', 'models-', 'my..models', 'my_models']) assert.ok(bucket(bad).some(p => p.startsWith('spec.checkpoint.s3.bucket')), bad)
  const re = new RegExp(S3_PREFIX.pattern)
  for (const ok of ['runs', 'team-a/runs', 'a/b/c', 'x_y.z']) assert.match(ok, re)
  for (const bad of ['', '/runs', 'runs/', 'a//b', 'a b', 'a\\b']) assert.doesNotMatch(bad, re)
})
