/**
 * Bootstrap identities: one Ed25519 libp2p key per bootstrap agent, generated once and kept in a
 * Secret, so the bootstrap agents' peer ids (hence their multiaddrs) are known before they start.
 * Secret data is held as the API returns it: base64 of the value the agent reads, which is
 * itself the base64 protobuf encoding of the private key (AVS_IDENTITY_KEY).
 */
import { generateKeyPair, privateKeyFromProtobuf, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import type { V1Secret } from '@kubernetes/client-node'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { names } from './names.js'
import { ownedMeta } from './owner.js'

export type SecretData = Record<string, string>

const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64')
const unb64 = (s: string) => Buffer.from(s, 'base64').toString('utf8')

/** A fresh key, as the base64 protobuf string the agent reads from AVS_IDENTITY_KEY. */
export async function newIdentityKey (): Promise<string> {
  const key = await generateKeyPair('Ed25519')
  return Buffer.from(privateKeyToProtobuf(key)).toString('base64')
}

/**
 * The Secret data holding keys for bootstrap agents 0..count-1: existing keys are kept as they
 * are (also those above count, so scaling bootstrap down and up again keeps identities), and
 * only missing ones are generated. Returns the same object when nothing was missing.
 */
export async function ensureIdentityKeys (existing: SecretData | undefined, count: number): Promise<SecretData> {
  const data: SecretData = { ...existing }
  let added = false
  for (let i = 0; i < count; i++) {
    const k = names.identityKey(i)
    if (data[k] === undefined || data[k] === '') { data[k] = b64(await newIdentityKey()); added = true }
  }
  return added || existing === undefined ? data : existing
}

/** Peer id of bootstrap agent i; throws a readable error when the Secret holds no valid key. */
export function peerIdOf (data: SecretData, i: number): string {
  const k = names.identityKey(i)
  const v = data[k]
  if (v === undefined) throw new Error(`identity Secret has no key ${k}`)
  let key: ReturnType<typeof privateKeyFromProtobuf>
  try {
    key = privateKeyFromProtobuf(Buffer.from(unb64(v), 'base64'))
  } catch {
    throw new Error(`identity Secret key ${k} is not a base64 protobuf libp2p private key`)
  }
  // The agent runs with Ed25519 keys only (AVS_IDENTITY_KEY), the peer ids spec.bootstrap.peers admits.
  if (key.type !== 'Ed25519') throw new Error(`identity Secret key ${k} is a key of type ${key.type}; an agent's key is Ed25519`)
  return peerIdFromPrivateKey(key).toString()
}

/** The bootstrap agent's DNS name through the headless Service. */
export function bootstrapHost (s: AveragingSwarm, i: number, clusterDomain: string): string {
  return `${names.bootstrapPod(s, i)}.${names.service(s)}.${s.metadata.namespace ?? 'default'}.svc.${clusterDomain}`
}

/** Multiaddrs of bootstrap agents 0..count-1: /dns4/<pod>.<svc>.<ns>.svc.<domain>/tcp/<port>/p2p/<id>. */
export function bootstrapMultiaddrs (s: AveragingSwarm, data: SecretData, count: number, clusterDomain: string): string[] {
  return Array.from({ length: count }, (_, i) =>
    `/dns4/${bootstrapHost(s, i, clusterDomain)}/tcp/${s.spec.network.port}/p2p/${peerIdOf(data, i)}`)
}

export function buildIdentitySecret (s: AveragingSwarm, data: SecretData) {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: ownedMeta(s, names.identitySecret(s)),
    type: 'Opaque',
    data
  } satisfies V1Secret
}
