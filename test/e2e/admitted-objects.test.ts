/**
 * The API server and the local validator (`npm start`'s) agree on random swarms drawn from the CRD's
 * schema (swarm-samples.ts), and every object the operator builds from an admitted one is one the
 * API server takes: each draw is created on a real API server as drawn (both refuse, or both
 * admit), then trimmed to what the validator admits, then each Service, Secret, ConfigMap,
 * StatefulSet and PodDisruptionBudget the builders make of it, and a pod of each StatefulSet, all as
 * dry runs. The core/v1 objects the CRD keeps verbatim (extra containers and volumes, affinity) are
 * drawn with their required fields only: their other fields are Kubernetes' to check, when the
 * operator applies the StatefulSet (the swarm's Degraded condition then says why). A value the CRD lets
 * through but a StatefulSet refuses (a container name with a capital, a label key with a space)
 * would otherwise surface only after `kubectl apply`, as the operator's failed apply.
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { controlPlaneBuilt, startCluster, waitFor, type Cluster } from '../harness/index.js'
import { RestClient, ApiError } from '../../operator/kube/rest.js'
import { isKind, resourcePath } from '../../operator/kube/resources.js'
import { admitted, drawnSwarm, reseedSwarms } from '../operator/api/swarm-samples.js'
import { validateSwarm } from '../../api/v1alpha1/validate.js'
import { withDefaults } from '../../api/v1alpha1/defaults.js'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { DEFAULT_BUILDER_CONFIG } from '../../operator/builders/config.js'
import { buildDesired } from '../../operator/builders/desired.js'
import { ensureIdentityKeys } from '../../operator/builders/identity.js'

const NS = 'ml'
const DRAWS = 120
const skip = controlPlaneBuilt() ? false : 'the control plane is not built: run npm run cluster:build'

describe('admitted swarms on a real API server', { skip, timeout: 300_000 }, () => {
  let cluster: Cluster
  let rest: RestClient

  before(async () => {
    cluster = await startCluster({ gpuNodes: 0, cpuNodes: 0 })
    rest = new RestClient(cluster.kc)
    await cluster.createNamespace(NS, {})
    const applied = await cluster.kubectl('apply', '--server-side', '-f', 'crds/averagingswarm.yaml')
    assert.equal(applied.code, 0, applied.stderr)
    await waitFor('the CRD to be Established', async () => ((await rest.request('GET', resourcePath('CustomResourceDefinition', undefined, 'averagingswarms.averaging.swarm.io'))).status?.conditions ?? [])
      .some((c: { type: string, status: string }) => c.type === 'Established' && c.status === 'True'), 60_000)
  })

  after(async () => { await cluster?.stop() })

  /** The API server's refusal of a dry-run create, or undefined when it takes the object. */
  const verdict = async (path: string, body: unknown): Promise<string | undefined> => {
    try {
      await rest.request('POST', path, { body, query: { dryRun: 'All' } })
      return undefined
    } catch (e) {
      return e instanceof ApiError ? `${e.code} ${e.message}` : String(e)
    }
  }

  test('the API server admits every swarm the local validator admits, and takes every object the operator builds from it', async () => {
    // Another seed explores other draws: AVS_SWARM_SEED=7 node --test dist/test/e2e/admitted-objects.test.js
    reseedSwarms(Number(process.env.AVS_SWARM_SEED ?? 2035))
    const wrong: string[] = []
    let swarms = 0
    let objects = 0
    let refusedBoth = 0
    for (let i = 0; i < DRAWS; i++) {
      // As drawn, most swarms hold a value the CRD refuses somewhere: both validators must say so.
      const drawn = drawnSwarm(i, NS)
      if (drawn === undefined) continue
      const local = validateSwarm(drawn)
      const server = await verdict(resourcePath('AveragingSwarm', NS), drawn)
      if ((local.length === 0) !== (server === undefined)) wrong.push(`drawn ${JSON.stringify(drawn.spec)}: API server ${server ?? 'admits'}, local validator ${local.length === 0 ? 'admits' : local.join('; ')}`)
      else if (server !== undefined) refusedBoth++
      const obj = admitted(drawn)
      if (obj === undefined) continue
      swarms++
      const spec = JSON.stringify(obj.spec)
      const dryRun = async (path: string, body: unknown, what: string): Promise<void> => {
        const refused = await verdict(path, body)
        if (refused !== undefined) wrong.push(`${what} of ${spec}: ${refused}`)
      }
      await dryRun(resourcePath('AveragingSwarm', NS), obj, 'the swarm')
      const swarm = { ...obj, metadata: { ...(obj.metadata as object), uid: `00000000-0000-0000-0000-${String(i).padStart(12, '0')}` }, spec: withDefaults(obj.spec as never) } as AveragingSwarm
      const identityData = await ensureIdentityKeys(undefined, swarm.spec.bootstrap.replicas)
      // An exposed swarm has a Service per agent, alike but for the name: three of a kind are enough.
      const perKind = new Map<string, number>()
      for (const o of buildDesired(swarm, { config: DEFAULT_BUILDER_CONFIG, identityData, podMonitorAvailable: false }).objects) {
        assert.ok(isKind(o.kind), o.kind)
        const seen = perKind.get(o.kind) ?? 0
        perKind.set(o.kind, seen + 1)
        if (seen >= 3) continue
        objects++
        await dryRun(resourcePath(o.kind, NS), o, `${o.kind} ${o.metadata.name}`)
        // A pod of the set: pods are checked further than their template (an image's whitespace).
        // Admission's 403 for a ServiceAccount or PriorityClass the swarm names but this cluster
        // lacks is about that object, not the pod: only an invalid pod (422) counts.
        if (o.kind === 'StatefulSet') {
          const template = (o.spec as { template: { metadata?: Record<string, unknown>, spec: unknown } }).template
          const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { ...template.metadata, name: `${o.metadata.name}-0`, namespace: NS }, spec: template.spec }
          const refused = await verdict(resourcePath('Pod', NS), pod)
          if (refused?.startsWith('422') === true) wrong.push(`a pod of ${o.metadata.name} of ${spec}: ${refused}`)
        }
      }
    }
    assert.ok(swarms >= 100, `only ${swarms} of ${DRAWS} draws admitted`)
    assert.ok(refusedBoth >= 20, `only ${refusedBoth} drawn swarms refused: the draws test one side of the line only`)
    assert.deepEqual(wrong, [], `${wrong.length} refusals among ${swarms} swarms and ${objects} objects`)
  })
})
