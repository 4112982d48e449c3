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
import { CHECKPOINT_PARAMETERS, DNS1123_SUBDOMAIN } from '../../../api/checkpoint-parameters.js'
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
  const cases = MALFORMED.filter(c => /checkpoint|completion|ttlSeconds/.test(c.field))
  assert.ok(cases.length >= 10)
  for (const c of cases) {
    const problems = validateSwarm(malformedSwarm(c, 0))
    // A missing field is named by its parent and its own name: 'spec.checkpoint is missing the field "volume"'.
    const parent = c.field.slice(0, c.field.lastIndexOf('.'))
    const names = (p: string) => p.startsWith(c.field) || p === `${parent} is missing the field "${c.field.slice(parent.length + 1)}"`
    assert.ok(problems.some(names), `${c.what}: ${JSON.stringify(problems)}`)
  }
  assert.deepEqual(validateSwarm(obj({ ttlSecondsAfterFinished: 60 })), ['spec.ttlSecondsAfterFinished: ttlSecondsAfterFinished needs completion: a swarm without completion never finishes'])
})

test('defaults: CRD = withDefaults() = the agent\'s env contract; absent sections stay absent', () => {
  const crd = parse(readFileSync(CRD_FILE, 'utf8'))
  const spec = crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties
  assert.equal(spec.checkpoint.properties.every.default, Number(AGENT_ENV.checkpointEvery.default))
  assert.equal(spec.checkpoint.properties.keep.default, Number(AGENT_ENV.checkpointKeep.default))
  assert.equal(spec.completion.properties.podPolicy.default, 'Delete')
  assert.equal(spec.completion.properties.rounds.default, undefined)
  assert.deepEqual(spec.checkpoint.required, ['volume'])
  assert.equal(spec.completion.required, undefined, 'rounds or duration: a CEL rule says which is missing')
  const d = withDefaults({ checkpoint: { volume: { claimName: 'c' } }, completion: { rounds: 7 } })
  assert.deepEqual(d.checkpoint, { every: 100, keep: 3, volume: { claimName: 'c' } })
  assert.deepEqual(d.completion, { rounds: 7, podPolicy: 'Delete' })
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
  assert.deepEqual(problems({ podPolicy: 'Keep' }), ['spec.completion: completion needs rounds or duration (or both): the run ends at whichever comes first'])
  assert.ok(problems({ duration: 'soon' }).some(p => p.startsWith('spec.completion.duration')))
})

test('the claim name pattern is Kubernetes\' DNS-1123 subdomain', () => {
  const re = new RegExp(DNS1123_SUBDOMAIN)
  for (const ok of ['a', 'my-claim', 'ckpt.team-a', '0abc']) assert.match(ok, re)
  for (const bad of ['', 'My-Claim', '-a', 'a-', 'a_b', 'a..b', 'a/b']) assert.doesNotMatch(bad, re)
})
