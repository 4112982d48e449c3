/**
 * Names and labels of everything a swarm owns. Names are deterministic so that a create racing a
 * stale cache meets 409 AlreadyExists instead of making a duplicate.
 */
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { LABEL_MANAGED_BY, LABEL_SWARM, MANAGED_BY } from '../objects.js'

export { LABEL_MANAGED_BY, LABEL_SWARM, MANAGED_BY }

export type Role = 'bootstrap' | 'agent' | 'auxiliary'

export const LABEL_ROLE = 'averaging.swarm.io/role'
/** Tells the bootstrap StatefulSets' pods apart, so their selectors do not overlap. */
export const LABEL_BOOTSTRAP_INDEX = 'averaging.swarm.io/bootstrap-index'
export const ANNOTATION_CONFIG_HASH = 'averaging.swarm.io/config-hash'

export const names = {
  service: (s: AveragingSwarm) => `${s.metadata.name}-agents`,
  identitySecret: (s: AveragingSwarm) => `${s.metadata.name}-identity`,
  configMap: (s: AveragingSwarm) => `${s.metadata.name}-config`,
  /** Per-pod announce addresses of an exposed swarm (builders/expose.ts). */
  announceConfigMap: (s: AveragingSwarm) => `${s.metadata.name}-announce`,
  /** The swarm's member counts for the Moshpit grid (builders/members.ts). */
  membersConfigMap: (s: AveragingSwarm) => `${s.metadata.name}-members`,
  bootstrapSet: (s: AveragingSwarm, i: number) => `${s.metadata.name}-bootstrap-${i}`,
  bootstrapPod: (s: AveragingSwarm, i: number) => `${s.metadata.name}-bootstrap-${i}-0`,
  agentSet: (s: AveragingSwarm) => `${s.metadata.name}-agent`,
  auxiliarySet: (s: AveragingSwarm) => `${s.metadata.name}-aux`,
  pdb: (s: AveragingSwarm) => s.metadata.name,
  podMonitor: (s: AveragingSwarm) => s.metadata.name,
  /** The claim made from spec.checkpoint.volume.claimTemplate (the user's afterwards: no owner reference). */
  checkpointClaim: (s: AveragingSwarm) => `${s.metadata.name}-checkpoints`,
  /** Secret data key of bootstrap agent i's private key. */
  identityKey: (i: number) => `bootstrap-${i}`
}

/** Labels on every owned object: the operator finds its objects by these plus the owner uid. */
export function ownedLabels (s: AveragingSwarm): Record<string, string> {
  return {
    'app.kubernetes.io/name': 'averaging-swarm',
    'app.kubernetes.io/instance': s.metadata.name,
    [LABEL_MANAGED_BY]: MANAGED_BY,
    [LABEL_SWARM]: s.metadata.name
  }
}

/** Selector labels of one role's pods. */
export function roleSelector (s: AveragingSwarm, role: Role, bootstrapIndex?: number): Record<string, string> {
  return { [LABEL_SWARM]: s.metadata.name, [LABEL_ROLE]: role, ...(role === 'bootstrap' ? { [LABEL_BOOTSTRAP_INDEX]: String(bootstrapIndex ?? 0) } : {}) }
}

/** The label selector string of all agent pods (bootstrap and regular), for status.selector. */
export function agentSelectorString (s: AveragingSwarm): string {
  return `${LABEL_SWARM}=${s.metadata.name},${LABEL_ROLE} in (agent,bootstrap)`
}
