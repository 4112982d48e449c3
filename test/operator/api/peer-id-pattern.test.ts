/**
 * The CRD's peer-id pattern (api/v1alpha1/address-patterns.ts) admits exactly the strings the agent
 * parses as an Ed25519 peer id: random strings of the peer id's form, one-character typos of real
 * ids, and the range's edges, each admitted if and only if @libp2p/peer-id reads an Ed25519 key
 * from it. Before, the pattern took "12D3KooW" and any 44 base58 characters, and ~1 in 60 typos
 * passed it to stop the agent.
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey, peerIdFromString } from '@libp2p/peer-id'
import { seededRandom } from '../../../agent/util/random.js'
import { PEER_ID, base58, base58Range } from '../../../api/v1alpha1/address-patterns.js'

const ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
const random = seededRandom(58)
const randomChar = (): string => ALPHABET[Math.floor(random() * 58)]
const pattern = new RegExp(`^${PEER_ID}$`)

function agentReads (id: string): boolean {
  try { return peerIdFromString(id).type === 'Ed25519' } catch { return false }
}

function check (ids: Iterable<string>): { admitted: number, refused: number } {
  let admitted = 0
  let refused = 0
  for (const id of ids) {
    const admits = pattern.test(id)
    assert.equal(admits, agentReads(id), `${id}: the pattern ${admits ? 'admits' : 'refuses'} it, the agent ${admits ? 'cannot read' : 'reads'} it`)
    if (admits) admitted++
    else refused++
  }
  return { admitted, refused }
}

test('the peer-id pattern admits a string exactly when the agent reads an Ed25519 peer id from it', async () => {
  const ids = await Promise.all(Array.from({ length: 8 }, async () => peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()))
  const typos = ids.flatMap(id => Array.from({ length: id.length * 4 }, () => {
    const at = Math.floor(random() * id.length)
    return id.slice(0, at) + randomChar() + id.slice(at + 1)
  }))
  const sameForm = Array.from({ length: 2000 }, () => '12D3KooW' + Array.from({ length: 44 }, randomChar).join(''))
  // The prefix fixed, the rest at the edges of the key range and one past them.
  const prefix = [0x00, 0x24, 0x08, 0x01, 0x12, 0x20]
  const edges = [
    base58([...prefix, ...new Array(32).fill(0)]),
    base58([...prefix, ...new Array(32).fill(0xff)]),
    base58([...prefix.slice(0, -1), 0x1f, ...new Array(32).fill(0xff)]),
    base58([...prefix.slice(0, -1), 0x21, ...new Array(32).fill(0)]),
    base58([...prefix, 0x80, ...new Array(31).fill(0)])
  ]
  assert.equal(check(ids).admitted, ids.length)
  const t = check(typos)
  const f = check(sameForm)
  assert.deepEqual(check(edges), { admitted: 3, refused: 2 })
  // Both sides of the line occur in the samples, so the comparison above tested something.
  assert.ok(t.admitted > 0 && t.refused > 0, JSON.stringify(t))
  assert.ok(f.admitted > 0 && f.refused > 0, JSON.stringify(f))
})

test('base58Range matches exactly the strings of its length from lo to hi', () => {
  for (let round = 0; round < 200; round++) {
    const n = 1 + Math.floor(random() * 4)
    let lo = Array.from({ length: n }, randomChar).join('')
    let hi = Array.from({ length: n }, randomChar).join('')
    if (lo > hi) [lo, hi] = [hi, lo]
    const re = new RegExp(`^${base58Range(lo, hi)}$`)
    for (let k = 0; k < 200; k++) {
      // Near the bounds as often as anywhere: a random string, or a bound with one character changed.
      const near = [lo, hi][k % 2]
      const at = Math.floor(random() * n)
      const s = k % 3 === 0 ? Array.from({ length: n }, randomChar).join('') : near.slice(0, at) + randomChar() + near.slice(at + 1)
      assert.equal(re.test(s), s >= lo && s <= hi, `${s} against ${lo}..${hi}`)
    }
    assert.ok(re.test(lo) && re.test(hi))
  }
})
