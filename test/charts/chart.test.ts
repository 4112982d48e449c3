/**
 * The Helm chart rendered by the real helm (lint, template, schema): least-privilege RBAC equal to
 * operator/rbac.ts, a Pod Security "restricted" operator, the CRD templated (upgradable) and kept
 * on uninstall, the Grafana dashboard ConfigMap, optional monitors.
 */
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parse } from 'yaml'
import { OPERATOR_CLUSTER_RULES, OPERATOR_LEASE_RULES } from '../../operator/rbac.js'
import { CHART, find, helmBinary, renderChart, runHelm } from './helm.js'

const helm = helmBinary()
const skip = helm === undefined ? 'the helm layer package is not installed: run npm ci' : false

describe('helm chart', { skip }, () => {
  const h = helm as string

  test('helm lint --strict passes', async () => {
    const r = await runHelm(h, ['lint', '--strict', CHART])
    assert.equal(r.code, 0, r.stdout + r.stderr)
    assert.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/)
  })

  test('the ClusterRole and the leader-election Role are exactly operator/rbac.ts', async () => {
    const objs = await renderChart(h)
    assert.deepEqual(find(objs, 'ClusterRole', 'avs-averaging-swarm')?.rules, OPERATOR_CLUSTER_RULES)
    assert.deepEqual(find(objs, 'Role', 'avs-averaging-swarm-leader-election')?.rules, OPERATOR_LEASE_RULES)
    const crb = find(objs, 'ClusterRoleBinding')!
    assert.deepEqual(crb.subjects, [{ kind: 'ServiceAccount', name: 'avs-averaging-swarm', namespace: 'avs-system' }])
    assert.equal(find(objs, 'Deployment')!.spec.template.spec.serviceAccountName, 'avs-averaging-swarm')
  })

  test('aggregated view and edit ClusterRoles grant averagingswarms to the built-in roles', async () => {
    const objs = await renderChart(h)
    const view = find(objs, 'ClusterRole', 'avs-averaging-swarm-view')!
    const edit = find(objs, 'ClusterRole', 'avs-averaging-swarm-edit')!
    assert.equal(view.metadata.labels?.['rbac.authorization.k8s.io/aggregate-to-view'], 'true')
    assert.equal(edit.metadata.labels?.['rbac.authorization.k8s.io/aggregate-to-edit'], 'true')
    assert.equal(edit.metadata.labels?.['rbac.authorization.k8s.io/aggregate-to-admin'], 'true')
    assert.deepEqual(view.rules[0].verbs, ['get', 'list', 'watch'])
    assert.ok(edit.rules[0].resources.includes('averagingswarms/scale'))
    assert.equal(find(await renderChart(h, ['rbac.aggregateToDefaultRoles=false']), 'ClusterRole', 'avs-averaging-swarm-view'), undefined)
  })

  test('the Deployment: leader election on, replicas from values, a Pod Security restricted security context', async () => {
    const d = find(await renderChart(h), 'Deployment')!
    assert.equal(d.spec.replicas, 1)
    const pod = d.spec.template.spec
    const c = pod.containers[0]
    assert.equal(c.image, 'ghcr.io/averaging-swarm/operator:0.1.0')
    assert.ok(!c.args.includes('--no-leader-elect'))
    assert.deepEqual(pod.securityContext.seccompProfile, { type: 'RuntimeDefault' })
    assert.equal(pod.securityContext.runAsNonRoot, true)
    assert.equal(c.securityContext.allowPrivilegeEscalation, false)
    assert.deepEqual(c.securityContext.capabilities, { drop: ['ALL'] })
    assert.equal(c.securityContext.readOnlyRootFilesystem, true)
    const env = Object.fromEntries(c.env.map((e: { name: string, value?: string }) => [e.name, e.value]))
    assert.equal(env.AGENT_IMAGE, 'ghcr.io/averaging-swarm/agent:0.1.0')
    assert.equal(env.METRICS_BIND_ADDRESS, '$(POD_IP):8080')
    assert.deepEqual(c.ports, [{ name: 'metrics', containerPort: 8080, protocol: 'TCP' }])

    const two = find(await renderChart(h, ['replicas=2', 'image.tag=dev', 'agent.image.tag=dev']), 'Deployment')!
    assert.equal(two.spec.replicas, 2)
    assert.equal(two.spec.template.spec.containers[0].image, 'ghcr.io/averaging-swarm/operator:dev')
    const single = find(await renderChart(h, ['leaderElection.enabled=false']), 'Deployment')!
    assert.ok(single.spec.template.spec.containers[0].args.includes('--no-leader-elect'))
  })

  test('the CRD is templated (helm upgrade upgrades it), kept on uninstall with crds.keep, absent with crds.enabled=false', async () => {
    const fromRepo = parse(readFileSync('crds/averagingswarm.yaml', 'utf8'))
    const crd = find(await renderChart(h), 'CustomResourceDefinition')!
    assert.equal(crd.metadata.annotations?.['helm.sh/resource-policy'], 'keep')
    const { annotations, ...meta } = crd.metadata
    assert.deepEqual({ ...crd, metadata: meta }, fromRepo, 'the chart\'s CRD is crds/averagingswarm.yaml')
    const notKept = find(await renderChart(h, ['crds.keep=false']), 'CustomResourceDefinition')!
    assert.equal(notKept.metadata.annotations?.['helm.sh/resource-policy'], undefined)
    assert.equal(find(await renderChart(h, ['crds.enabled=false']), 'CustomResourceDefinition'), undefined)
  })

  test('the Grafana dashboard ConfigMap carries dashboards/averaging-swarm.json and the sidecar label', async () => {
    const cm = find(await renderChart(h), 'ConfigMap', 'avs-averaging-swarm-dashboard')!
    assert.equal(cm.metadata.labels?.grafana_dashboard, '1')
    assert.deepEqual(JSON.parse(cm.data['averaging-swarm.json']), JSON.parse(readFileSync('dashboards/averaging-swarm.json', 'utf8')))
    assert.equal(find(await renderChart(h, ['dashboard.enabled=false']), 'ConfigMap', 'avs-averaging-swarm-dashboard'), undefined)
  })

  test('ServiceMonitor and PodMonitor only when asked; the metrics Service selects the operator', async () => {
    const plain = await renderChart(h)
    assert.equal(find(plain, 'ServiceMonitor'), undefined)
    assert.equal(find(plain, 'PodMonitor'), undefined)
    const svc = find(plain, 'Service', 'avs-averaging-swarm-metrics')!
    assert.deepEqual(svc.spec.selector, find(plain, 'Deployment')!.spec.selector.matchLabels)
    const mon = await renderChart(h, ['serviceMonitor.enabled=true', 'podMonitor.enabled=true'])
    assert.equal(find(mon, 'ServiceMonitor')!.spec.endpoints[0].port, 'metrics')
    assert.equal(find(mon, 'ServiceMonitor')!.spec.endpoints[0].honorLabels, true, 'the per-swarm gauges keep their own namespace label')
    assert.deepEqual(find(mon, 'PodMonitor')!.spec.selector.matchLabels, { 'app.kubernetes.io/managed-by': 'averaging-swarm-operator' })
  })

  test('helm package resolves the chart\'s links to crds/ and dashboards/: the packaged chart renders the same objects', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'avs-chart-'))
    try {
      const r = await runHelm(h, ['package', CHART, '-d', dir])
      assert.equal(r.code, 0, r.stderr)
      const tgz = join(dir, 'averaging-swarm-0.1.0.tgz')
      assert.ok(existsSync(tgz))
      const fromPackage = await renderChart(h, [], 'avs-system', tgz)
      assert.deepEqual(fromPackage, await renderChart(h))
      assert.ok(find(fromPackage, 'CustomResourceDefinition') !== undefined && find(fromPackage, 'ConfigMap', 'avs-averaging-swarm-dashboard') !== undefined)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  // Messages as helm 4 and helm 3 word them.
  test('values.schema.json rejects unknown keys, bad enums, and two replicas without leader election', async () => {
    for (const [set, message] of [['bogus=1', /(additional properties 'bogus'|Additional property bogus is) not allowed/], ['logLevel=loud', /logLevel/], ['replicas=2,leaderElection.enabled=false', /replicas(': maximum|: Must be less than or equal to 1)/]] as const) {
      const r = await runHelm(h, ['template', 'avs', CHART, '--set', set])
      assert.notEqual(r.code, 0, `${set} was accepted`)
      assert.match(r.stderr, message)
    }
  })
})
