import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Cluster } from '../harness/index.js'
import { OPERATOR_CLUSTER_RULES, OPERATOR_LEASE_RULES } from '../../operator/rbac.js'

/**
 * A kubeconfig for the operator as the chart runs it: a ServiceAccount token bound to
 * operator/rbac.ts's rules only (cluster rules, and the leader-election lease in `default`).
 */
export async function operatorKubeconfig (cluster: Cluster): Promise<string> {
  let n = 0
  const kubectl = async (...args: string[]): Promise<string> => {
    const r = await cluster.kubectl(...args)
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`)
    return r.stdout
  }
  const apply = async (obj: object): Promise<void> => { const f = join(cluster.dir, `rbac-${n++}.json`); writeFileSync(f, JSON.stringify(obj)); await kubectl('apply', '-f', f) }
  const subjects = [{ kind: 'ServiceAccount', name: 'avs-operator', namespace: 'default' }]
  await apply({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'avs-operator', namespace: 'default' } })
  await apply({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: 'avs-operator' }, rules: OPERATOR_CLUSTER_RULES })
  await apply({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: 'avs-operator' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'avs-operator' }, subjects })
  await apply({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'avs-operator-leases', namespace: 'default' }, rules: OPERATOR_LEASE_RULES })
  await apply({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'avs-operator-leases', namespace: 'default' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'avs-operator-leases' }, subjects })
  const token = (await kubectl('create', 'token', 'avs-operator', '-n', 'default', '--duration=1h')).trim()
  const c = cluster.kc.getCurrentCluster()!
  const path = join(cluster.dir, 'operator.kubeconfig')
  writeFileSync(path, JSON.stringify({
    apiVersion: 'v1', kind: 'Config', 'current-context': 'op',
    clusters: [{ name: 'c', cluster: { server: c.server, ...(c.caData !== undefined ? { 'certificate-authority-data': c.caData } : {}), ...(c.caFile !== undefined ? { 'certificate-authority': c.caFile } : {}) } }],
    users: [{ name: 'op', user: { token } }],
    contexts: [{ name: 'op', context: { cluster: 'c', user: 'op' } }]
  }))
  return path
}
