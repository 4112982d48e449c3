/** REST paths of the kinds the operator reads and writes. */
import { API_GROUP, API_VERSION } from '../../api/version.js'

export interface Resource { group: string, version: string, plural: string, namespaced: boolean }

export const RESOURCES = {
  Service: { group: '', version: 'v1', plural: 'services', namespaced: true },
  Secret: { group: '', version: 'v1', plural: 'secrets', namespaced: true },
  ConfigMap: { group: '', version: 'v1', plural: 'configmaps', namespaced: true },
  Pod: { group: '', version: 'v1', plural: 'pods', namespaced: true },
  PersistentVolumeClaim: { group: '', version: 'v1', plural: 'persistentvolumeclaims', namespaced: true },
  Node: { group: '', version: 'v1', plural: 'nodes', namespaced: false },
  Event: { group: '', version: 'v1', plural: 'events', namespaced: true },
  StatefulSet: { group: 'apps', version: 'v1', plural: 'statefulsets', namespaced: true },
  PodDisruptionBudget: { group: 'policy', version: 'v1', plural: 'poddisruptionbudgets', namespaced: true },
  PodMonitor: { group: 'monitoring.coreos.com', version: 'v1', plural: 'podmonitors', namespaced: true },
  AveragingSwarm: { group: API_GROUP, version: API_VERSION, plural: 'averagingswarms', namespaced: true },
  Lease: { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', namespaced: true },
  CustomResourceDefinition: { group: 'apiextensions.k8s.io', version: 'v1', plural: 'customresourcedefinitions', namespaced: false }
} as const satisfies Record<string, Resource>

export type Kind = keyof typeof RESOURCES

/** Kinds a swarm owns, which the operator watches and prunes. */
export const OWNED_KINDS = ['Service', 'Secret', 'ConfigMap', 'StatefulSet', 'PodDisruptionBudget', 'PodMonitor'] as const satisfies readonly Kind[]
export type OwnedKind = (typeof OWNED_KINDS)[number]

export function isKind (k: string): k is Kind { return k in RESOURCES }

/** /api/v1/namespaces/ns/pods/name/status, /apis/apps/v1/statefulsets, … */
export function resourcePath (kind: Kind, namespace?: string, name?: string, subresource?: string): string {
  const r: Resource = RESOURCES[kind]
  let p = r.group === '' ? `/api/${r.version}` : `/apis/${r.group}/${r.version}`
  if (r.namespaced && namespace !== undefined) p += `/namespaces/${encodeURIComponent(namespace)}`
  p += `/${r.plural}`
  if (name !== undefined) p += `/${encodeURIComponent(name)}`
  if (subresource !== undefined) p += `/${subresource}`
  return p
}
