/** spec.network.privateNetworkSecret: the generated Secret, and how pods get the key. */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { preSharedKey } from '@libp2p/pnet'
import { buildPskSecret, newSwarmKey, pskSecretData } from '../../../operator/builders/psk.js'
import { decodeSwarmKey } from '../../../agent/net/pnet/swarm-key.js'
import { ANNOTATION_CONFIG_HASH } from '../../../operator/builders/names.js'
import { desiredFor, find, swarm } from './fixture.js'

const decodeBase64 = (s: string): string => Buffer.from(s, 'base64').toString('utf8')

test('a generated key is the swarm.key v1 text with 32 random bytes, readable by our agent and by @libp2p/pnet', () => {
  const keys = Array.from({ length: 20 }, () => newSwarmKey())
  for (const k of keys) {
    assert.match(k, /^\/key\/swarm\/psk\/1\.0\.0\/\n\/base16\/\n[0-9a-f]{64}\n$/)
    assert.equal(decodeSwarmKey(k).byteLength, 32)
    assert.doesNotThrow(() => preSharedKey({ psk: new TextEncoder().encode(k) })(), '@libp2p/pnet accepts it')
  }
  assert.equal(new Set(keys).size, keys.length, 'no two keys alike')
  // 20 x 32 random bytes: every byte value of a hex digit shows up; a constant or short key would not.
  const hex = keys.map(k => k.split('\n')[2]).join('')
  assert.equal(new Set(hex).size, 16)
})

test('generate: true makes an owned Opaque Secret under the spec\'s key, and keeps a key it already made', () => {
  const s = swarm({ network: { privateNetworkSecret: { name: 'demo-psk', key: 'pnet', generate: true } } })
  const data = pskSecretData(s, undefined)
  assert.deepEqual(Object.keys(data), ['pnet'])
  assert.equal(decodeSwarmKey(decodeBase64(data.pnet)).byteLength, 32)
  const secret = buildPskSecret(s, data)
  assert.equal(secret.kind, 'Secret')
  assert.equal(secret.type, 'Opaque')
  assert.equal(secret.metadata.name, 'demo-psk')
  assert.equal(secret.metadata.namespace, 'ml')
  assert.equal(secret.metadata.ownerReferences[0].uid, s.metadata.uid, 'owned by the swarm, so deleted with it')
  assert.equal(pskSecretData(s, data), data, 'an existing key is never replaced (pods would split into two networks)')
  const extra = { pnet: data.pnet, other: 'eA==' }
  assert.deepEqual(pskSecretData(s, extra), extra)
  assert.notDeepEqual(pskSecretData(s, { other: 'eA==' }).pnet, undefined, 'a Secret without the key gets one')
  assert.equal(pskSecretData(swarm({ network: { privateNetworkSecret: { name: 'p', generate: true } } }), undefined)['swarm.key'] !== undefined, true, 'default key name swarm.key')
  assert.throws(() => buildPskSecret(swarm(), data), /privateNetworkSecret is not set/)
})

test('generated or user-made, pods mount the same Secret key as swarm.key and read it through AVS_PSK_FILE', async () => {
  for (const generate of [false, true]) {
    const s = swarm({ network: { privateNetworkSecret: { name: 'demo-psk', key: 'pnet', generate } } })
    const d = await desiredFor(s, generate ? { pskData: pskSecretData(s, undefined) } : {})
    if (generate) assert.ok(find(d.objects, 'Secret', 'demo-psk').data.pnet !== undefined)
    else assert.ok(!d.objects.some(o => o.kind === 'Secret' && o.metadata.name === 'demo-psk'), 'a user Secret is never built over')
    const sets = d.objects.filter(o => o.kind === 'StatefulSet') as any[]
    assert.ok(sets.length >= 2, 'bootstrap and agent sets')
    for (const set of sets) {
      const pod = set.spec.template.spec
      assert.deepEqual(pod.volumes.find((v: any) => v.name === 'psk').secret, { secretName: 'demo-psk', items: [{ key: 'pnet', path: 'swarm.key' }] }, set.metadata.name)
      const agent = pod.containers[0]
      assert.deepEqual(agent.volumeMounts.find((m: any) => m.name === 'psk'), { name: 'psk', mountPath: '/etc/averaging-swarm/psk', readOnly: true })
      assert.equal(agent.env.find((e: any) => e.name === 'AVS_PSK_FILE').value, '/etc/averaging-swarm/psk/swarm.key')
    }
  }
})

test('no privateNetworkSecret: no key volume, no AVS_PSK_FILE; changing the Secret reference rolls the pods', async () => {
  const plain = find((await desiredFor(swarm())).objects, 'StatefulSet', 'demo-agent').spec.template
  assert.ok(!plain.spec.volumes.some((v: any) => v.name === 'psk'))
  assert.ok(!plain.spec.containers[0].env.some((e: any) => e.name === 'AVS_PSK_FILE'))
  const hash = async (name: string) => find((await desiredFor(swarm({ network: { privateNetworkSecret: { name } } }))).objects, 'StatefulSet', 'demo-agent').spec.template.metadata.annotations[ANNOTATION_CONFIG_HASH]
  assert.notEqual(await hash('psk-a'), await hash('psk-b'))
  assert.notEqual(await hash('psk-a'), plain.metadata.annotations[ANNOTATION_CONFIG_HASH])
})
