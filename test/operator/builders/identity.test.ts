import { test } from 'node:test'
import assert from 'node:assert/strict'
import { ensureIdentityKeys, peerIdOf, bootstrapMultiaddrs, buildIdentitySecret } from '../../../operator/builders/identity.js'
import { MULTIADDR_PATTERN } from '../../../api/v1alpha1/schema.js'
import { swarm } from './fixture.js'

test('keys are generated once per bootstrap agent and kept on later reconciles', async () => {
  const first = await ensureIdentityKeys(undefined, 2)
  assert.deepEqual(Object.keys(first).sort(), ['bootstrap-0', 'bootstrap-1'])
  const again = await ensureIdentityKeys(first, 2)
  assert.equal(again, first, 'nothing missing: the same data comes back')
  const more = await ensureIdentityKeys(first, 3)
  assert.equal(more['bootstrap-0'], first['bootstrap-0'])
  assert.equal(more['bootstrap-1'], first['bootstrap-1'])
  assert.ok(more['bootstrap-2'])
  const fewer = await ensureIdentityKeys(more, 1)
  assert.equal(fewer['bootstrap-2'], more['bootstrap-2'], 'scaling bootstrap down keeps the identity for later')
})

test('peer ids are Ed25519 ids derived from the stored key, stable across calls', async () => {
  const data = await ensureIdentityKeys(undefined, 2)
  const id0 = peerIdOf(data, 0)
  assert.match(id0, /^12D3KooW/)
  assert.equal(peerIdOf(data, 0), id0)
  assert.notEqual(peerIdOf(data, 1), id0)
  assert.throws(() => peerIdOf({ 'bootstrap-0': 'bm9wZQ==' }, 0), /not a base64 protobuf libp2p private key/)
})

test('bootstrap multiaddrs go through the headless Service and pass the CRD pattern', async () => {
  const s = swarm()
  const data = await ensureIdentityKeys(undefined, 2)
  const addrs = bootstrapMultiaddrs(s, data, 2, 'cluster.local')
  assert.equal(addrs[0], `/dns4/demo-bootstrap-0-0.demo-agents.ml.svc.cluster.local/tcp/31337/p2p/${peerIdOf(data, 0)}`)
  for (const a of addrs) assert.match(a, new RegExp(MULTIADDR_PATTERN))
})

test('the identity Secret holds the data as given, owned by the swarm', async () => {
  const data = await ensureIdentityKeys(undefined, 1)
  const sec = buildIdentitySecret(swarm(), data)
  assert.equal(sec.metadata.name, 'demo-identity')
  assert.equal(sec.data, data)
  assert.equal(sec.metadata.ownerReferences[0].uid, swarm().metadata.uid)
})
