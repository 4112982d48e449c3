import { test } from 'node:test'
import assert from 'node:assert/strict'
import { withItemTypeMeta } from '../../../operator/kube/informers.js'
import { needsApply } from '../../../operator/controller/drift.js'

/** A Secret as the operator builds it, and the same Secret as a LIST response returns it (no apiVersion/kind per item). */
const desired = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 's-identity', namespace: 'ml', labels: { 'averaging.swarm.io/swarm': 's' } }, type: 'Opaque', data: { 'bootstrap-0': 'a2V5' } }
const listed = () => ({
  kind: 'SecretList',
  apiVersion: 'v1',
  metadata: { resourceVersion: '42' },
  items: [{ metadata: { ...desired.metadata, uid: 'u1', resourceVersion: '40' }, type: 'Opaque', data: { ...desired.data } }]
})

test('list items lack apiVersion and kind, so as listed they look drifted from what the operator applies', () => {
  assert.equal(needsApply(desired, listed().items[0]), true)
})

test('withItemTypeMeta gives each item its list\'s apiVersion and the kind: an unchanged object then needs no apply', () => {
  const l = withItemTypeMeta(listed(), 'Secret')
  assert.equal((l.items[0] as { apiVersion?: string }).apiVersion, 'v1')
  assert.equal((l.items[0] as { kind?: string }).kind, 'Secret')
  assert.equal(needsApply(desired, l.items[0]), false)
})

test('withItemTypeMeta keeps type metadata an item already has and accepts a list without items', () => {
  const l = withItemTypeMeta({ apiVersion: 'apps/v1', items: [{ apiVersion: 'apps/v1beta9', kind: 'Other' }] }, 'StatefulSet')
  assert.deepEqual(l.items, [{ apiVersion: 'apps/v1beta9', kind: 'Other' }])
  assert.deepEqual(withItemTypeMeta({ apiVersion: 'v1' }, 'Pod'), { apiVersion: 'v1' })
})
