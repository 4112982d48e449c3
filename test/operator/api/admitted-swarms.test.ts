/**
 * Every swarm the CRD admits runs: random specs drawn from the CRD's schema itself
 * (swarm-samples.ts), left with only what the local validator admits (which has a twin of every
 * CEL rule: crd.test.ts), go through the operator's builders into the pods' env, and every agent's config
 * loader accepts it. The narrower property tests (averaging-parameters, bootstrap-peers,
 * checkpoint-schema) hold one section each to exact values; this one holds the whole spec to
 * "admitted, so it starts", so a field added later is covered without a test of its own.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { withDefaults } from '../../../api/v1alpha1/defaults.js'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import { DEFAULT_BUILDER_CONFIG } from '../../../operator/builders/config.js'
import { buildDesired, type KubeObj } from '../../../operator/builders/desired.js'
import { ensureIdentityKeys } from '../../../operator/builders/identity.js'
import { AGENT_CONTAINER } from '../../../operator/builders/pod-template.js'
import { expandPods } from '../../../cli/local/pods.js'
import { loadAgentConfig } from '../../../agent/config.js'
import { newSwarmKeyText } from '../../../agent/net/pnet/swarm-key.js'
import { admittedSwarm } from './swarm-samples.js'

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
        for (const [k, v] of Object.entries(o)) walk(v, path === '' ? k : /^(labels|annotations|limits|requests|nodeSelector)$/.test(path.split('.').at(-1)!) ? `${path}.*` : `${path}.${k}`)
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
