/** The owner reference every owned object carries, so deleting the swarm cascades. */
import type { V1ObjectMeta, V1OwnerReference } from '@kubernetes/client-node'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { API_GROUP, API_VERSION, KIND } from '../../api/version.js'
import { ownedLabels } from './names.js'

/** client-node's V1OwnerReference with the fields the operator always sets made required. */
export interface OwnerReference extends V1OwnerReference {
  apiVersion: string
  kind: string
  name: string
  uid: string
  controller: boolean
  blockOwnerDeletion: boolean
}

export function ownerReference (s: AveragingSwarm): OwnerReference {
  if (s.metadata.uid === undefined) throw new Error(`AveragingSwarm ${s.metadata.name} has no uid; only objects read from the API server can own others.`)
  return { apiVersion: `${API_GROUP}/${API_VERSION}`, kind: KIND, name: s.metadata.name, uid: s.metadata.uid, controller: true, blockOwnerDeletion: true }
}

/** Metadata of an owned object: name, namespace, the swarm's labels and the owner reference. */
export function ownedMeta (s: AveragingSwarm, name: string, extraLabels: Record<string, string> = {}, annotations?: Record<string, string>) {
  return {
    name,
    namespace: s.metadata.namespace ?? 'default',
    labels: { ...ownedLabels(s), ...extraLabels },
    ...(annotations === undefined ? {} : { annotations }),
    ownerReferences: [ownerReference(s)]
  } satisfies V1ObjectMeta
}
