/**
 * A bootstrap peer the CRD admits (spec.bootstrap.peers) must be one the agent can use: random
 * addresses within the pattern, and its edges, go through the operator's builders into agent env
 * that the agent's config loader accepts with the same addresses; an address just outside (an
 * octet above 255, a port above 65535, a transport the agent cannot dial, a truncated peer id) is
 * refused by the CRD naming the field, and by the agent naming its variable. Before, the pattern
 * admitted such typos and the agent retried them forever, with a warning. Peer ids are Ed25519 on
 * both sides: the pattern admits exactly those (peer-id-pattern.test.ts), and an agent's own key is one.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { generateKeyPair, privateKeyFromProtobuf, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { seededRandom } from '../../../agent/util/random.js'
import { MULTIADDR_PATTERN } from '../../../api/v1alpha1/schema.js'
import { withDefaults } from '../../../api/v1alpha1/defaults.js'
import { validateSwarm } from '../../../api/v1alpha1/validate.js'
import type { AveragingSwarm } from '../../../api/v1alpha1/types.js'
import { DEFAULT_BUILDER_CONFIG } from '../../../operator/builders/config.js'
import { buildDesired } from '../../../operator/builders/desired.js'
import { ensureIdentityKeys, newIdentityKey, peerIdOf } from '../../../operator/builders/identity.js'
import { expandPods } from '../../../cli/local/pods.js'
import { loadAgentConfig } from '../../../agent/config.js'

const random = seededRandom(27)
const between = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1))
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]

const swarm = (peers: string[]) => ({
  apiVersion: 'averaging.swarm.io/v1alpha1', kind: 'AveragingSwarm', metadata: { name: 'peers', namespace: 'team-a' }, spec: { replicas: 2, bootstrap: { replicas: 1, peers } }
})

function randomHost (): string {
  switch (between(0, 3)) {
    case 0: return `/ip4/${pick([0, 9, 10, 99, 100, 199, 200, 249, 250, 255, between(0, 255)])}.${between(0, 255)}.${between(0, 255)}.${pick([1, 255, between(0, 255)])}`
    case 1: return `/ip6/${pick(['::1', '::', 'fe80::1', '2001:db8::8a2e:370:7334', '2001:0db8:0000:0000:0000:ff00:0042:8329', '1::'])}`
    case 2: return `/${pick(['dns', 'dns4', 'dns6', 'dnsaddr'])}/${pick(['a', 'swarm-0.example.com', 'x-1.y-2.z', `${'a'.repeat(63)}.io`, '10.0.0.1', 'UPPER.case'])}`
    default: return `/dns4/avs-${between(0, 99)}.demo.svc.cluster.local`
  }
}

test('every bootstrap peer the CRD admits yields agent env the agent loads, with the same addresses', async () => {
  const identityData = await ensureIdentityKeys(undefined, 1)
  const ids = await Promise.all([0, 1, 2].map(async () => peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()))
  const re = new RegExp(MULTIADDR_PATTERN)
  for (let i = 0; i < 200; i++) {
    const peers = Array.from({ length: between(1, 3) }, () => `${randomHost()}/tcp/${pick([0, 1, 80, 9999, 10000, 59999, 60000, 65000, 65529, 65530, 65535, between(0, 65535)])}/p2p/${pick(ids)}`)
    for (const p of peers) assert.match(p, re, `generated within the pattern: ${p}`)
    const obj = swarm(peers)
    assert.deepEqual(validateSwarm(obj), [], JSON.stringify(peers))
    const s = { ...obj, metadata: { ...obj.metadata, uid: `uid-${i}` }, spec: withDefaults(obj.spec as never) } as AveragingSwarm
    const pods = expandPods(buildDesired(s, { config: DEFAULT_BUILDER_CONFIG, identityData, podMonitorAvailable: false }).objects, 'team-a', DEFAULT_BUILDER_CONFIG.clusterDomain)
    for (const pod of pods) {
      let config: ReturnType<typeof loadAgentConfig>
      try { config = loadAgentConfig(pod.env) } catch (err) { assert.fail(`${pod.name} with ${JSON.stringify(peers)} would exit: ${(err as Error).message}`) }
      for (const p of peers) assert.ok(config.bootstrapPeers.includes(p), `${pod.name} dials ${p}`)
    }
  }
})

test('a bootstrap peer just outside the pattern is refused by the CRD naming the field, and by the agent naming its variable', () => {
  const id = '12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA'
  for (const bad of [
    `/ip4/10.0.0.256/tcp/4001/p2p/${id}`,
    `/ip4/10.0.0/tcp/4001/p2p/${id}`,
    `/ip4/10.0.0.01/tcp/4001/p2p/${id}`,
    `/ip4/10.0.0.1/tcp/65536/p2p/${id}`,
    `/ip4/10.0.0.1/tcp/0080/p2p/${id}`,
    `/ip6/2001:db8::g/tcp/4001/p2p/${id}`,
    `/dns4/bad_host/tcp/4001/p2p/${id}`,
    `/dns4/-a.example/tcp/4001/p2p/${id}`,
    `/ip4/10.0.0.1/tcp/4001/ws/p2p/${id}`,
    `/ip4/10.0.0.1/udp/4001/quic-v1/p2p/${id}`,
    `/ip4/10.0.0.1/tcp/4001/p2p/${id.slice(0, -1)}`,
    `/ip4/10.0.0.1/tcp/4001/p2p/${id}0`,
    // The peer id's form, but no Ed25519 key inside (peer-id-pattern.test.ts), and other key types.
    `/ip4/10.0.0.1/tcp/4001/p2p/12D3KooW${'z'.repeat(44)}`,
    `/ip4/10.0.0.1/tcp/4001/p2p/Qm${'a'.repeat(44)}`
  ]) {
    const problems = validateSwarm(swarm([bad]))
    assert.ok(problems.some(p => p.startsWith('spec.bootstrap.peers[0]')), `${bad} admitted: ${JSON.stringify(problems)}`)
  }
  // The agent's own check, for what reaches it another way (AVS_BOOTSTRAP_PEERS set by hand).
  for (const bad of [`/ip4/10.0.0.256/tcp/4001/p2p/${id}`, `/ip4/10.0.0.1/tcp/65536/p2p/${id}`, '10.0.0.1:4001', `/ip4/10.0.0.1/tcp/4001/p2p/${id.slice(0, -6)}`, `/ip4/10.0.0.1/tcp/4001/p2p/12D3KooW${'z'.repeat(44)}`]) {
    assert.throws(() => loadAgentConfig({ AVS_SWARM: 'peers', AVS_POD_NAME: 'peers-agent-0', AVS_PREFIX: 'team-a_peers', AVS_BOOTSTRAP_PEERS: bad }),
      (err: Error) => err.message.includes('AVS_BOOTSTRAP_PEERS') && err.message.includes(bad) && err.message.includes('spec.bootstrap.peers'), bad)
  }
})

test('an agent runs with an Ed25519 key only, the kind of peer id the CRD admits: another key type, or bytes that are no key, stop it naming its variable', async () => {
  const env = (key: string): Record<string, string> => ({ AVS_SWARM: 'peers', AVS_POD_NAME: 'peers-agent-0', AVS_PREFIX: 'team-a_peers', AVS_IDENTITY_KEY: key })
  const re = new RegExp(MULTIADDR_PATTERN)
  // The operator's keys (one per bootstrap agent) load, and their peer ids are within the pattern.
  const identityData = await ensureIdentityKeys(undefined, 2)
  for (const i of [0, 1]) {
    const config = loadAgentConfig(env(await newIdentityKey()))
    assert.match(`/dns4/a/tcp/1/p2p/${peerIdFromPrivateKey(privateKeyFromProtobuf(config.identityKey!)).toString()}`, re)
    assert.match(`/dns4/a/tcp/1/p2p/${peerIdOf(identityData, i)}`, re)
  }
  for (const [key, why] of [
    [Buffer.from(privateKeyToProtobuf(await generateKeyPair('secp256k1'))).toString('base64'), 'is a key of type secp256k1; an agent\'s key is Ed25519'],
    [Buffer.from(new Uint8Array(64).fill(7)).toString('base64'), 'is not a base64 protobuf libp2p private key'],
    ['not base64 at all', 'is not a base64 protobuf libp2p private key']
  ]) {
    assert.throws(() => loadAgentConfig(env(key)), (err: Error) => err.message.includes(`AVS_IDENTITY_KEY ${why}`), why)
  }
})

test('the operator refuses an identity Secret whose key is not Ed25519, naming the key', async () => {
  const secp = Buffer.from(Buffer.from(privateKeyToProtobuf(await generateKeyPair('secp256k1'))).toString('base64'), 'utf8').toString('base64')
  const data = { ...(await ensureIdentityKeys(undefined, 1)) }
  const k = Object.keys(data)[0]
  data[k] = secp
  assert.throws(() => peerIdOf(data, 0), new RegExp(`identity Secret key ${k} is a key of type secp256k1; an agent's key is Ed25519`))
})
