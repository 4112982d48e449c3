/**
 * Every swarm the CRD admits runs: random specs drawn from the CRD's schema itself (each field
 * present or not, values within its type, bounds, enum and pattern, at the edges a third of the
 * time), left with only what the local validator admits (which has a twin of every CEL rule:
 * crd.test.ts), go through the operator's builders into the pods' env, and every agent's config
 * loader accepts it. The narrower property tests (averaging-parameters, bootstrap-peers,
 * checkpoint-schema) hold one section each to exact values; this one holds the whole spec to
 * "admitted, so it starts", so a field added later is covered without a test of its own.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { seededRandom } from '../../../agent/util/random.js'
import { swarmSchema } from '../../../api/v1alpha1/schema.js'
import type { Schema } from '../../../api/v1alpha1/schema-builders.js'
import { validateSwarm } from '../../../api/v1alpha1/validate.js'
import { withDefaults } from '../../../api/v1alpha1/defaults.js'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import { DEFAULT_BUILDER_CONFIG } from '../../../operator/builders/config.js'
import { buildDesired, type KubeObj } from '../../../operator/builders/desired.js'
import { ensureIdentityKeys } from '../../../operator/builders/identity.js'
import { AGENT_CONTAINER } from '../../../operator/builders/pod-template.js'
import { expandPods } from '../../../cli/local/pods.js'
import { loadAgentConfig } from '../../../agent/config.js'
import { newSwarmKeyText } from '../../../agent/net/pnet/swarm-key.js'
import { samplePattern } from './pattern-sampler.js'

const random = seededRandom(35)
const between = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1))
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]
const LETTERS = 'abcdefghijklmnopqrstuvwxyz'
const word = (n: number): string => Array.from({ length: n }, () => pick([...LETTERS])).join('')

/** A value for one schema node, or undefined where none could be drawn (a pattern missed 30 times). */
function draw (s: Schema): unknown {
  if (s.enum !== undefined) return pick(s.enum)
  if (s.anyOf !== undefined) return random() < 0.5 ? between(s.minimum ?? 0, 64) : drawString(s)
  switch (s.type) {
    case 'boolean': return random() < 0.5
    case 'integer': {
      const lo = s.minimum ?? 0
      const hi = s.maximum ?? 1000
      return random() < 0.33 ? pick([lo, hi]) : between(lo, hi)
    }
    case 'number': {
      const lo = s.minimum ?? 0
      const hi = s.maximum ?? 1000
      const low = s.exclusiveMinimum === true ? lo + Number.EPSILON * Math.max(1, hi) : lo
      return random() < 0.33 ? pick([low, hi]) : low + (hi - low) * random()
    }
    case 'string': return drawString(s)
    case 'array': {
      const items = Array.from({ length: between(s.minItems ?? 0, Math.min(s.maxItems ?? 3, 3)) }, () => draw(s.items!))
      return items.some(i => i === undefined) ? undefined : items
    }
    case 'object': return drawObject(s)
    default: return undefined
  }
}

function drawString (s: Schema): string | undefined {
  const min = s.minLength ?? 0
  const max = s.maxLength ?? 253
  if (s.pattern === undefined) return word(between(Math.max(min, 1), Math.min(max, 16)))
  const re = new RegExp(s.pattern)
  for (let i = 0; i < 30; i++) {
    const v = samplePattern(s.pattern, random)
    if (re.test(v) && v.length >= min && v.length <= max) return v
  }
  return undefined
}

function drawObject (s: Schema): Record<string, unknown> | undefined {
  const out: Record<string, unknown> = {}
  const required = new Set(s.required ?? [])
  // Kubernetes core types kept verbatim (a container, an env var, an affinity): their required fields only.
  const opaque = s['x-kubernetes-preserve-unknown-fields'] === true
  for (const [k, p] of Object.entries(s.properties ?? {})) {
    if (!required.has(k) && (opaque || random() > 0.35)) continue
    const v = draw(p)
    if (v === undefined) { if (required.has(k)) return undefined; continue }
    out[k] = v
  }
  if (s.additionalProperties !== undefined) {
    for (let i = between(0, 2); i > 0; i--) {
      const v = draw(s.additionalProperties)
      if (v !== undefined) out[`k-${word(4)}`] = v
    }
  }
  return out
}

/** Deletes the field a problem names ("spec.a.b[2].c …" → spec.a.b), or its parent when that was tried. */
function removeNamed (obj: Record<string, unknown>, problem: string, tried: Set<string>): boolean {
  let path = problem.split(/[ :]/)[0].replace(/\[\d+\].*$/, '')
  while (tried.has(path) && path.includes('.')) path = path.slice(0, path.lastIndexOf('.'))
  if (path === 'spec' || !path.startsWith('spec.')) return false
  tried.add(path)
  const keys = path.split('.')
  let o: unknown = obj
  for (const k of keys.slice(0, -1)) o = (o as Record<string, unknown> | undefined)?.[k]
  if (o !== null && typeof o === 'object') delete (o as Record<string, unknown>)[keys[keys.length - 1]]
  return true
}

/** A random spec the local validator admits, or undefined when removing named fields did not get there. */
function admittedSwarm (i: number): Record<string, unknown> | undefined {
  const spec = drawObject(swarmSchema.properties!.spec)
  if (spec === undefined) return undefined
  const obj = { apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: `s${i}`, namespace: 'team-a' }, spec }
  const tried = new Set<string>()
  for (let round = 0; round < 12; round++) {
    const problems = validateSwarm(obj)
    if (problems.length === 0) return obj
    if (!problems.every(p => removeNamed(obj, p, tried))) return undefined
  }
  return undefined
}

/**
 * The pods of one StatefulSet as the agent sees them: the first ordinals and the last (whose name
 * the agent reads its rank from), with env resolved as a kubelet would; a Secret the swarm names
 * but does not own (an S3 credential) given a value, as the user's Secret would, and the
 * pre-shared key's mount a file of this machine.
 */
function agentEnvs (objects: readonly KubeObj[], pskFile: string): Array<{ pod: string, env: Record<string, string> }> {
  const out: Array<{ pod: string, env: Record<string, string> }> = []
  for (const set of objects.filter(o => o.kind === 'StatefulSet')) {
    const spec = set.spec as { replicas: number, template: { spec: { containers: Array<{ name: string, env?: Array<{ name: string, valueFrom?: { secretKeyRef?: { name: string } } }> }> } } }
    if (spec.replicas === 0) continue
    const fewer = { ...set, spec: { ...spec, replicas: Math.min(spec.replicas, 2) } }
    const owned = new Set(objects.filter(o => o.kind === 'Secret').map(o => o.metadata.name))
    const fromUserSecrets = (spec.template.spec.containers.find(c => c.name === AGENT_CONTAINER)?.env ?? [])
      .filter(e => e.valueFrom?.secretKeyRef !== undefined && !owned.has(e.valueFrom.secretKeyRef.name)).map(e => e.name)
    const pods = expandPods([...objects.filter(o => o.kind !== 'StatefulSet'), fewer], 'team-a', DEFAULT_BUILDER_CONFIG.clusterDomain)
    const last = { ...pods[0], name: `${set.metadata.name}-${spec.replicas - 1}`, env: { ...pods[0].env, AVS_POD_NAME: `${set.metadata.name}-${spec.replicas - 1}` } }
    for (const p of [...pods, last]) {
      const env: Record<string, string> = { ...p.env }
      for (const name of fromUserSecrets) env[name] ??= 'from-the-users-secret'
      if (env.AVS_PSK_FILE !== undefined) env.AVS_PSK_FILE = pskFile
      out.push({ pod: p.name, env })
    }
  }
  return out
}

test('every swarm the CRD admits, drawn from its schema, yields agent env that every agent loads', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'avs-admitted-'))
  const pskFile = join(dir, 'swarm.key')
  writeFileSync(pskFile, newSwarmKeyText())
  try {
    let admitted = 0
    let agents = 0
    const seen = new Set<string>()
    for (let i = 0; i < 300; i++) {
      const obj = admittedSwarm(i)
      if (obj === undefined) continue
      admitted++
      const spec = withDefaults(obj.spec as never)
      const swarm = { ...obj, metadata: { ...(obj.metadata as object), uid: `uid-${i}` }, spec } as AveragingSwarm
      const identityData = await ensureIdentityKeys(undefined, spec.bootstrap.replicas)
      let objects: readonly KubeObj[]
      try {
        objects = buildDesired(swarm, { config: DEFAULT_BUILDER_CONFIG, identityData, podMonitorAvailable: true }).objects
      } catch (err) {
        assert.fail(`the operator cannot build an admitted swarm: ${(err as Error).message}\n${JSON.stringify(obj.spec)}`)
      }
      for (const { pod, env } of agentEnvs(objects, pskFile)) {
        agents++
        try { loadAgentConfig(env) } catch (err) { assert.fail(`${pod} would exit: ${(err as Error).message}\n${JSON.stringify(obj.spec)}`) }
      }
      const walk = (o: unknown, path: string): void => {
        if (o === null || typeof o !== 'object' || Array.isArray(o)) { seen.add(path); return }
        for (const [k, v] of Object.entries(o)) walk(v, path === '' ? k : `${path}.${k.startsWith('k-') ? '*' : k}`)
      }
      walk(obj.spec, '')
    }
    // The draw reaches most of the spec: each section's fields, and enough swarms to mean something.
    if (process.env.AVS_TEST_VERBOSE !== undefined) console.log(`admitted ${admitted}, agents ${agents}, fields ${seen.size}: ${[...seen].sort().join(" ")}`)
    assert.ok(admitted >= 200, `only ${admitted} of 300 draws admitted`)
    for (const field of ['averaging.targetGroupSize', 'bootstrap.peers', 'network.expose.type', 'network.relay.serve', 'network.privateNetworkSecret.name',
      'workload.trainer.image', 'checkpoint.s3.endpoint', 'checkpoint.volume.claimTemplate.size', 'completion.duration', 'podTemplate.terminationGracePeriodSeconds', 'auxiliary.replicas']) {
      assert.ok(seen.has(field), `no admitted draw set ${field}`)
    }
    assert.ok(agents > admitted, `${agents} agents`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
