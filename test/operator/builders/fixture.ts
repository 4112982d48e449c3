/** A swarm as the API server would return it (defaults applied, uid set), for builder tests. */
import { withDefaults, type PartialSpec } from '../../../api/v1alpha1/defaults.js'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import { DEFAULT_BUILDER_CONFIG } from '../../../operator/builders/config.js'
import { ensureIdentityKeys } from '../../../operator/builders/identity.js'
import { buildDesired, type DesiredInputs } from '../../../operator/builders/desired.js'
import type { KubeObj } from '../../../operator/objects.js'

export function swarm (spec: PartialSpec = {}, name = 'demo', namespace = 'ml'): AveragingSwarm {
  return {
    apiVersion: 'averaging.swarm.io/v1alpha1',
    kind: 'AveragingSwarm',
    metadata: { name, namespace, uid: '6f1c2b1e-0000-4000-8000-000000000001', generation: 1 },
    spec: withDefaults({ replicas: 8, image: 'agent:test', bootstrap: { replicas: 2 }, ...spec })
  }
}

export async function desiredFor (s: AveragingSwarm, extra: Partial<DesiredInputs> = {}) {
  const identityData = await ensureIdentityKeys(undefined, s.spec.bootstrap.replicas)
  return buildDesired(s, { config: DEFAULT_BUILDER_CONFIG, identityData, podMonitorAvailable: false, ...extra })
}

export function find (objects: KubeObj[], kind: string, name: string): any {
  const o = objects.find(x => x.kind === kind && x.metadata.name === name)
  if (o === undefined) throw new Error(`no ${kind} ${name} among ${objects.map(x => `${x.kind}/${x.metadata.name}`).join(', ')}`)
  return o
}
