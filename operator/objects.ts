/**
 * What the pure builders (builders/) and the I/O layer (kube/) share, so that neither imports
 * the other: the shape of a Kubernetes object as the API sends it (raw JSON, see kube/rest.ts),
 * and the labels by which the operator finds its own objects. Imports nothing.
 */

export interface KubeObj {
  apiVersion: string
  kind: string
  metadata: { name: string, namespace?: string, labels?: Record<string, string>, annotations?: Record<string, string>, [k: string]: unknown }
  [k: string]: unknown
}

export const LABEL_SWARM = 'averaging.swarm.io/swarm'
export const LABEL_MANAGED_BY = 'app.kubernetes.io/managed-by'
export const MANAGED_BY = 'averaging-swarm-operator'
