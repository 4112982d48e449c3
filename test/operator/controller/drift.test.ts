import { test } from 'node:test'
import assert from 'node:assert/strict'
import { driftPaths, needsApply } from '../../../operator/controller/drift.js'

test('fields the server adds do not count as drift; changed or missing ones do', () => {
  const desired = { spec: { replicas: 3, template: { spec: { containers: [{ name: 'a', env: [{ name: 'X', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }] }] } } } }
  const observed = { spec: { replicas: 3, revisionHistoryLimit: 10, template: { spec: { dnsPolicy: 'ClusterFirst', containers: [{ name: 'a', terminationMessagePath: '/dev/x', env: [{ name: 'X', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath: 'status.podIP' } } }] }] } } }, status: {} }
  assert.deepEqual(driftPaths(desired, observed), [])
  assert.deepEqual(driftPaths({ spec: { replicas: 4 } }, observed), ['spec.replicas'])
  assert.deepEqual(driftPaths({ spec: { template: { spec: { containers: [{ name: 'a' }, { name: 'b' }] } } } }, observed), ['spec.template.spec.containers'])
  assert.ok(needsApply(desired, undefined), 'a missing object is applied')
})

test('quantities compare by value and omitted empty values equal empty ones', () => {
  assert.deepEqual(driftPaths({ cpu: '0.5', gpu: 1, mem: '1Gi' }, { cpu: '500m', gpu: '1', mem: '1024Mi' }), [])
  assert.deepEqual(driftPaths({ cpu: '1' }, { cpu: '500m' }), ['cpu'])
  assert.deepEqual(driftPaths({ effect: '', extra: {}, list: [] }, {}), [])
  assert.deepEqual(driftPaths({ labels: { a: 'b' } }, { labels: {} }), ['labels.a'])
})
