/**
 * What one reconcile of one swarm knows, handed from phase to phase (cluster-api's scope
 * objects): the swarm, what each phase found or built, and what is to be reported at the end
 * (writes, events, the error). Lives for one reconcile; nothing in it is shared between keys.
 */
import { withDefaults } from '../../api/v1alpha1/defaults.js'
import type { AveragingSwarm, AveragingSwarmStatus } from '../../api/v1alpha1/types.js'
import type { Desired } from '../builders/desired.js'
import type { SecretData } from '../builders/identity.js'
import type { EventInput } from '../kube/api.js'
import type { KubeObj } from '../objects.js'

export interface SwarmScope {
  /** The work-queue key, namespace/name. */
  readonly key: string
  readonly namespace: string
  readonly name: string
  /** The swarm as cached, its spec with defaults applied. */
  readonly swarm: AveragingSwarm

  /** ensureSecrets: data of the identity Secret (a key per bootstrap agent) and of a PSK Secret to generate, if any. */
  secrets?: { identity: SecretData, psk?: SecretData }
  /** checkpointStore: what of the checkpoint store is missing (the pods are then built without it). */
  checkpointProblem?: import('./completion.js').StoreProblem
  /** applyDesired: every object the swarm should own. */
  desired?: Desired
  /** The swarm's own bootstrap multiaddrs: the last status's until applyDesired has built them. */
  bootstrapPeers: string[]
  /** observe: the swarm's StatefulSets and the pods they made, and the status derived from them. */
  statefulSets: KubeObj[]
  pods: KubeObj[]
  status?: AveragingSwarmStatus
  /** writeStatus: milliseconds until a changed status may be written, when its write was put off. */
  statusDeferredMs?: number

  /** Writes sent so far (applies, deletes, status). */
  writes: number
  /** Events to record once status is written, in the order they happened. */
  events: EventInput[]
  /** Why ensureSecrets/applyDesired/pruneUnwanted failed, as a sentence; reported in Degraded. */
  error?: string
}

export function newScope (key: string, cached: AveragingSwarm): SwarmScope {
  const [namespace, name] = key.split('/')
  const swarm: AveragingSwarm = { ...cached, spec: withDefaults(cached.spec as never) }
  return { key, namespace, name, swarm, bootstrapPeers: swarm.status?.bootstrapPeers ?? [], statefulSets: [], pods: [], writes: 0, events: [] }
}
