/**
 * The permissions the operator uses, and nothing more: the chart's ClusterRole (and the e2e
 * test's) are built from this list, and the e2e test runs the operator under it, which proves
 * it is sufficient. Leases are only needed in the operator's own namespace (a Role there).
 */
import { API_GROUP } from '../api/version.js'

export interface PolicyRule { apiGroups: string[], resources: string[], verbs: string[], resourceNames?: string[] }

const OWN = ['get', 'list', 'watch', 'create', 'patch', 'update', 'delete']

export const OPERATOR_CLUSTER_RULES: PolicyRule[] = [
  // delete: ttlSecondsAfterFinished removes a finished swarm, as the TTL controller does a Job.
  { apiGroups: [API_GROUP], resources: ['averagingswarms'], verbs: ['get', 'list', 'watch', 'delete'] },
  { apiGroups: [API_GROUP], resources: ['averagingswarms/status'], verbs: ['get', 'patch', 'update'] },
  // blockOwnerDeletion on owner references needs update on the owner's finalizers.
  { apiGroups: [API_GROUP], resources: ['averagingswarms/finalizers'], verbs: ['update'] },
  { apiGroups: ['apps'], resources: ['statefulsets'], verbs: OWN },
  { apiGroups: [''], resources: ['services', 'configmaps', 'secrets'], verbs: OWN },
  { apiGroups: ['policy'], resources: ['poddisruptionbudgets'], verbs: OWN },
  { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
  // The addresses of exposed agents are their Nodes' (spec.network.expose: HostPort, NodePort).
  { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
  // Watched to see a named checkpoint claim appear; create for claimTemplate. Never update or
  // delete: a checkpoint claim is the user's result.
  { apiGroups: [''], resources: ['persistentvolumeclaims'], verbs: ['get', 'list', 'watch', 'create'] },
  { apiGroups: [''], resources: ['events'], verbs: ['create', 'patch'] },
  { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get'], resourceNames: ['podmonitors.monitoring.coreos.com'] },
  { apiGroups: ['monitoring.coreos.com'], resources: ['podmonitors'], verbs: OWN }
]

/** Leader election, in the operator's namespace. */
export const OPERATOR_LEASE_RULES: PolicyRule[] = [
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] }
]

/**
 * With --watch-namespace the operator touches only that namespace (informers, applies, status,
 * events), so the chart grants the namespaced rules there as a Role and keeps cluster-wide only
 * the one CRD lookup and reading Nodes (cluster-scoped objects, whose addresses exposed agents
 * announce): it can then read no Secret outside the namespace of its swarms.
 */
const clusterScoped = (r: PolicyRule): boolean => r.apiGroups.includes('apiextensions.k8s.io') || r.resources.includes('nodes')
export const OPERATOR_CLUSTER_SCOPED_RULES: PolicyRule[] = OPERATOR_CLUSTER_RULES.filter(clusterScoped)
export const OPERATOR_WATCH_NAMESPACE_RULES: PolicyRule[] = OPERATOR_CLUSTER_RULES.filter(r => !clusterScoped(r))
