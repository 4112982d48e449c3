/**
 * Pure: which in-cluster object a DNS name asks for. Names are accepted with or without the
 * trailing "cluster.local" (and a trailing dot), because the agents resolve names themselves
 * without resolv.conf search domains.
 *   <svc>.<ns>.svc.cluster.local                 → the Service's ready endpoints
 *   <hostname>.<subdomain>.<ns>.svc.cluster.local → the pod with that hostname/subdomain
 */
export type ClusterName =
  | { readonly kind: 'service', readonly service: string, readonly namespace: string }
  | { readonly kind: 'pod', readonly hostname: string, readonly subdomain: string, readonly namespace: string }

export const CLUSTER_DOMAIN = 'cluster.local'

export function parseClusterName (name: string): ClusterName | undefined {
  let labels = name.toLowerCase().replace(/\.$/, '').split('.')
  const domain = CLUSTER_DOMAIN.split('.')
  if (labels.slice(-domain.length).join('.') === CLUSTER_DOMAIN) labels = labels.slice(0, -domain.length)
  if (labels.at(-1) !== 'svc') return undefined
  labels = labels.slice(0, -1)
  if (labels.length === 2) return { kind: 'service', service: labels[0], namespace: labels[1] }
  if (labels.length === 3) return { kind: 'pod', hostname: labels[0], subdomain: labels[1], namespace: labels[2] }
  return undefined
}

/** True when the name is inside the cluster's zone (answered here, never forwarded). */
export function inClusterZone (name: string): boolean {
  const n = name.toLowerCase().replace(/\.$/, '')
  return n === CLUSTER_DOMAIN || n.endsWith('.' + CLUSTER_DOMAIN) || n.endsWith('.svc')
}
