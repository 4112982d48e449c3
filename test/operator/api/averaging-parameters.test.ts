/**
 * A swarm the CRD admits must run: every averaging section the CRD's validation admits (random
 * specs within and at the edges of each bound), taken through the operator's builders, gives
 * agent env that the agent's config loader accepts with the same values; a value just outside a
 * bound is refused by both. The defaults agree everywhere.
 *
 * validateSwarm runs the CRD's OpenAPI schema plus the JavaScript twins of the averaging
 * section's CEL rules (from the same table); the CEL rules themselves run on a real API server
 * in test/e2e/operator.test.ts (the malformed corpus and the admitted edges there).
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { parse } from 'yaml'
import { AGENT_ENV } from '../../../api/agent-env.js'
import { AVERAGING_KEYS, AVERAGING_PARAMETERS, type AveragingKey } from '../../../api/averaging-parameters.js'
import { durationNanos, parseDuration, type Bound } from '../../../api/parameter-bounds.js'
import { CRD_FILE } from '../../../api/v1alpha1/crd-yaml.js'
import { DEFAULT_AVERAGING, withDefaults } from '../../../api/v1alpha1/defaults.js'
import { validateSwarm } from '../../../api/v1alpha1/validate.js'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import { DEFAULT_BUILDER_CONFIG } from '../../../operator/builders/config.js'
import { buildDesired } from '../../../operator/builders/desired.js'
import { ensureIdentityKeys } from '../../../operator/builders/identity.js'
import { expandPods } from '../../../cli/local/pods.js'
import { loadAgentConfig } from '../../../agent/config.js'
import { DEFAULT_AVERAGER_CONFIG } from '../../../agent/averager.js'
import { MALFORMED, malformedSwarm } from '../malformed/cases.js'
import { OUTSIDE, P, randomAveraging, swarmObject } from './averaging-samples.js'

/** The agent's own value of a field, in the averager's form. */
function agentValue (k: AveragingKey, v: unknown): unknown {
  return P[k].bound.kind === 'duration' ? parseDuration(String(v)) : v
}

test('every averaging section the CRD admits yields agent env the agent loads, with the same values', async () => {
  const identityData = await ensureIdentityKeys(undefined, 1)
  let admitted = 0
  const N = 400
  for (let i = 0; i < N; i++) {
    const averaging = randomAveraging()
    const obj = swarmObject(`p${i}`, averaging, i % 4 === 0 ? 1 : 0)
    assert.deepEqual(validateSwarm(obj), [], `generated within bounds, yet refused: ${JSON.stringify(averaging)}`)
    admitted++
    const s: AveragingSwarm = { ...obj, metadata: { ...obj.metadata, uid: `uid-${i}` }, spec: withDefaults(obj.spec as never) } as AveragingSwarm
    const desired = buildDesired(s, { config: DEFAULT_BUILDER_CONFIG, identityData, podMonitorAvailable: false })
    const pods = expandPods(desired.objects, 'team-a', DEFAULT_BUILDER_CONFIG.clusterDomain)
    assert.equal(pods.length, 2 + (i % 4 === 0 ? 1 : 0))
    for (const pod of pods) {
      let config: ReturnType<typeof loadAgentConfig>
      try { config = loadAgentConfig(pod.env) } catch (err) {
        assert.fail(`${pod.name} of ${JSON.stringify(averaging)} would exit: ${(err as Error).message}`)
      }
      const spec = s.spec.averaging
      for (const k of AVERAGING_KEYS) {
        const want = k === 'prefix' ? spec.prefix ?? 'team-a_p' + String(i) : spec[k]
        const got = k === 'period' ? config.period : (config.averager as unknown as Record<string, unknown>)[k]
        assert.deepEqual(got, want === undefined ? undefined : agentValue(k, want), `${k} of ${JSON.stringify(averaging)}`)
      }
    }
  }
  assert.equal(admitted, N)
})

test('a value just outside a bound is refused by the CRD naming the field, and by the agent naming its variable', () => {
  for (const k of AVERAGING_KEYS) {
    for (const v of OUTSIDE[k]) {
      // Keep the cross rules satisfied so only the bound under test can refuse.
      const averaging: Record<string, unknown> = { [k]: v }
      if (k === 'requestTimeout') averaging.averagingExpiration = '1h'
      if (k === 'minGroupSize') averaging.targetGroupSize = 256
      const problems = validateSwarm(swarmObject('edge', averaging))
      assert.ok(problems.some(p => p.startsWith(`spec.averaging.${k}`)), `${k}: ${JSON.stringify(v)} admitted or not named: ${JSON.stringify(problems)}`)
      const env: Record<string, string> = { AVS_SWARM: 'edge', AVS_POD_NAME: 'edge-agent-0', AVS_PREFIX: 'team-a_edge', [AGENT_ENV[k].name]: String(v) }
      if (k === 'requestTimeout') env.AVS_AVERAGING_EXPIRATION = '1h'
      if (k === 'minGroupSize') env.AVS_TARGET_GROUP_SIZE = '256'
      if (v === '') continue // an empty variable means "unset" to the agent
      assert.throws(() => loadAgentConfig(env), (err: Error) => err.message.includes(AGENT_ENV[k].name) || err.message.includes(k), `${k}=${JSON.stringify(v)} loaded`)
    }
  }
})

test('the cross-field rules are refused locally too: minGroupSize above targetGroupSize, requestTimeout not below averagingExpiration', () => {
  for (const [averaging, field] of [
    [{ targetGroupSize: 3, minGroupSize: 4 }, 'minGroupSize'],
    [{ targetGroupSize: 2 }, null], // minGroupSize defaults to 2
    [{ minGroupSize: 5 }, 'minGroupSize'], // targetGroupSize defaults to 4
    [{ requestTimeout: '15s' }, 'requestTimeout'], // averagingExpiration defaults to 15s
    [{ requestTimeout: '1500ms', averagingExpiration: '1.5s' }, 'requestTimeout'],
    [{ requestTimeout: '1499ms', averagingExpiration: '1.5s' }, null],
    [{ averagingExpiration: '2s' }, 'requestTimeout'] // requestTimeout defaults to 3s
  ] as const) {
    const problems = validateSwarm(swarmObject('cross', averaging))
    if (field === null) assert.deepEqual(problems, [], JSON.stringify(averaging))
    else assert.ok(problems.some(p => p.startsWith(`spec.averaging.${field}`)), `${JSON.stringify(averaging)}: ${JSON.stringify(problems)}`)
  }
})

test('the malformed corpus\'s averaging CEL cases are refused by the local validator as well, naming the field', () => {
  for (const [i, c] of MALFORMED.entries()) {
    if (c.cel !== true || !c.field.startsWith('spec.averaging.')) continue
    const problems = validateSwarm(malformedSwarm(c, i))
    assert.ok(problems.some(p => p.startsWith(c.field)), `${c.what}: ${JSON.stringify(problems)}`)
  }
})

test('defaults agree: CRD = DEFAULT_AVERAGING = agent env contract = agent loader = DEFAULT_AVERAGER_CONFIG, and are the documented values', () => {
  assert.deepEqual({ ...DEFAULT_AVERAGING }, {
    targetGroupSize: 4, minGroupSize: 2, initialGroupBits: '', averagingExpiration: '15s', requestTimeout: '3s', allreduceTimeout: '60s',
    partSizeBytes: 65536, averagingAlpha: 1, compression: 'none', period: '30s', dataThreads: 0
  })
  const crd = parse(readFileSync(CRD_FILE, 'utf8'))
  const section = crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.averaging
  assert.deepEqual(section.default, { ...DEFAULT_AVERAGING })
  for (const [k, v] of Object.entries(DEFAULT_AVERAGING)) {
    assert.equal(section.properties[k].default, v, `CRD default of ${k}`)
    assert.equal((AGENT_ENV[k as AveragingKey] as { default?: string }).default, String(v), `agent env default of ${k}`)
  }
  assert.equal((AGENT_ENV.bandwidth as { default?: string }).default, undefined)
  const loaded = loadAgentConfig({ AVS_SWARM: 'd', AVS_POD_NAME: 'd-agent-0', AVS_PREFIX: 'ns_d' })
  assert.equal(loaded.period, parseDuration(DEFAULT_AVERAGING.period))
  for (const [k, v] of Object.entries(DEFAULT_AVERAGER_CONFIG)) assert.deepEqual((loaded.averager as unknown as Record<string, unknown>)[k], v, `loaded ${k}`)
  for (const [k, v] of Object.entries(DEFAULT_AVERAGING)) {
    if (k === 'period') continue
    assert.deepEqual((DEFAULT_AVERAGER_CONFIG as unknown as Record<string, unknown>)[k], agentValue(k as AveragingKey, v), `DEFAULT_AVERAGER_CONFIG.${k}`)
  }
  assert.equal(loaded.averager.bandwidth, undefined)
})

test('every row has a description with its bound, and every duration bound fits a Node timer', () => {
  for (const k of AVERAGING_KEYS) {
    const p = AVERAGING_PARAMETERS[k]
    assert.ok(p.description.length > 40, `${k} description`)
    if (p.bound.kind === 'duration') {
      assert.ok(durationNanos(p.bound.min) > 0n, `${k}: a zero duration cannot average anything`)
      assert.ok(parseDuration(p.bound.max) * 3 < 2_147_483.647, `${k}: max beyond a Node timer (2 × expiration + all-reduce is one step's timeout)`)
      assert.ok(p.description.includes(p.bound.min) && p.description.includes(p.bound.max), `${k} description names its bound`)
    }
  }
})
