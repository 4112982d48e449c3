/**
 * The swarm's membership for the Moshpit grid: how many members (spec.replicas) and how many of
 * them are bootstrap agents, in a ConfigMap the member pods mount as files (AVS_MEMBERS_DIR). A
 * mounted ConfigMap is updated in place when the swarm is scaled, so no pod rolls for it; each
 * agent reads it before every round and places itself on the grid by its rank (agent/moshpit/grid-layout.ts).
 * Swarms whose spec sets initialGroupBits lay out their groups themselves and get none of this.
 */
import type { V1ConfigMap } from '@kubernetes/client-node'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { names } from './names.js'
import { ownedMeta } from './owner.js'
import type { Role } from './names.js'

export const MEMBERS_MOUNT_DIR = '/etc/averaging-swarm/members'
export const MEMBERS_VOLUME = 'avs-members'

/** Whether this role's pods place themselves on the operator's grid: members (not auxiliary peers) of a swarm without its own bits. */
export function followsGrid (s: AveragingSwarm, role: Role): boolean {
  return role !== 'auxiliary' && s.spec.averaging.initialGroupBits === ''
}

/** The files: `members` (every averaging member) and `bootstrap` (how many of them are bootstrap agents, ranked first). */
export function membersData (s: AveragingSwarm): Record<string, string> {
  return { members: String(s.spec.replicas), bootstrap: String(Math.min(s.spec.bootstrap.replicas, s.spec.replicas)) }
}

export function buildMembersConfigMap (s: AveragingSwarm) {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: ownedMeta(s, names.membersConfigMap(s)), data: membersData(s) } satisfies V1ConfigMap
}
