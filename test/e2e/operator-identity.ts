import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { waitFor, type Cluster } from '../harness/index.js'
import { RestClient } from '../../operator/kube/rest.js'
import { resourcePath } from '../../operator/kube/resources.js'
import { startOperator, type OperatorProcess } from '../operator/e2e/operator-process.js'
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

/**
 * A suite's start on a fresh test cluster: namespace `ns` (Pod Security restricted), the CRD applied
 * and Established, and the operator running as the chart runs it (operatorKubeconfig) and ready.
 */
export async function installOperator (cluster: Cluster, ns: string): Promise<OperatorProcess> {
  const rest = new RestClient(cluster.kc)
  await cluster.createNamespace(ns, { 'pod-security.kubernetes.io/enforce': 'restricted' })
  const applied = await cluster.kubectl('apply', '--server-side', '-f', 'crds/averagingswarm.yaml')
  assert.equal(applied.code, 0, `kubectl apply the CRD: ${applied.stderr}`)
  await waitFor('the CRD to be Established', async () => ((await rest.request('GET', resourcePath('CustomResourceDefinition', undefined, 'averagingswarms.averaging.swarm.io'))).status?.conditions ?? [])
    .some((c: { type: string, status: string }) => c.type === 'Established' && c.status === 'True'), 60_000)
  const op = await startOperator(await operatorKubeconfig(cluster), cluster.logDir, 'operator-a')
  await waitFor('the operator to become ready', async () => await op.ready(), 60_000)
  return op
}
