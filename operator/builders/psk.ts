/**
 * The libp2p private-network key Secret, built only when spec.network.privateNetworkSecret has
 * generate: true and no such Secret exists yet (a Secret the user made is never touched).
 */
import { randomBytes } from 'node:crypto'
import type { V1Secret } from '@kubernetes/client-node'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import { ownedMeta } from './owner.js'

/** A fresh pre-shared key in the swarm.key v1 format that @libp2p/pnet reads. */
export function newSwarmKey (): string {
  return `/key/swarm/psk/1.0.0/\n/base16/\n${randomBytes(32).toString('hex')}\n`
}

export function buildPskSecret (s: AveragingSwarm, data: Record<string, string>) {
  const ref = s.spec.network.privateNetworkSecret
  if (ref === undefined) throw new Error('spec.network.privateNetworkSecret is not set')
  return { apiVersion: 'v1', kind: 'Secret', metadata: ownedMeta(s, ref.name), type: 'Opaque', data } satisfies V1Secret
}

/** Secret data for a newly generated key: existing data is kept when it already has the key. */
export function pskSecretData (s: AveragingSwarm, existing: Record<string, string> | undefined): Record<string, string> {
  const key = s.spec.network.privateNetworkSecret?.key ?? 'swarm.key'
  if (existing?.[key] !== undefined) return existing
  return { ...existing, [key]: Buffer.from(newSwarmKey()).toString('base64') }
}
