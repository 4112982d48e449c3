import { test } from 'node:test'
import assert from 'node:assert/strict'
import { DeltaBase, isDeltaRound } from '../../../agent/allreduce/delta-base.js'
import { PeerMode, type PeerInfo } from '../../../agent/proto/averaging.js'

function info (base: number[] | undefined, mode = PeerMode.NODE): PeerInfo {
  return { mode, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0, ...(base !== undefined ? { base: Uint8Array.from(base) } : {}) }
}

test('isDeltaRound: a lossy codec and one non-empty base among every member that holds state', () => {
  assert.equal(isDeltaRound([info([1, 2]), info([1, 2])], 'float16'), true)
  assert.equal(isDeltaRound([info([1, 2]), info([1, 2])], 'uniform8bit'), true)
  assert.equal(isDeltaRound([info([1, 2]), info([1, 2])], 'none'), false, 'exact values need no base')
  assert.equal(isDeltaRound([info([1, 2]), info([1, 3])], 'float16'), false, 'two bases')
  assert.equal(isDeltaRound([info([1, 2]), info([1, 2, 0])], 'float16'), false, 'a longer id is another id')
  assert.equal(isDeltaRound([info([1, 2]), info(undefined)], 'float16'), false, 'an agent that predates bases')
  assert.equal(isDeltaRound([info([]), info([])], 'float16'), false, 'empty: no base')
  assert.equal(isDeltaRound([info([1, 2]), info(undefined, PeerMode.AUXILIARY), info([1, 2])], 'float16'), true, 'auxiliary peers hold no state')
  assert.equal(isDeltaRound([info(undefined, PeerMode.AUXILIARY)], 'float16'), false)
})

test('DeltaBase: a base by tensor, set only when a round landed whole into its buffers', () => {
  const base = new DeltaBase([3, 2], () => true)
  assert.equal(base.idFor([0, 1]).byteLength, 0, 'no base before a round')
  const buffers = base.buffersFor([0, 1])!
  assert.deepEqual(buffers.map(b => b.length), [3, 2])
  assert.equal(base.idFor([0, 1]).byteLength, 0, 'buffers alone are no base: the round must land whole')
  base.landed([0, 1], Uint8Array.of(7))
  assert.deepEqual([...base.idFor([0, 1])], [7])
  assert.equal(base.buffersFor([0])![0], buffers[0], 'the same buffers, round after round')
  // A subset round moves its tensors' base alone: the step over both then has none in common.
  base.landed([1], Uint8Array.of(8))
  assert.deepEqual([...base.idFor([1])], [8])
  assert.equal(base.idFor([0, 1]).byteLength, 0)
  base.forget([0])
  assert.equal(base.idFor([0]).byteLength, 0)
  const id = Uint8Array.of(9)
  base.landed([0], id)
  id[0] = 1
  assert.deepEqual([...base.idFor([0])], [9], 'the id is a copy')
})

test('DeltaBase: buffers that do not fit make no base, and it says so once', () => {
  const said: number[] = []
  const base = new DeltaBase([1000], bytes => bytes < 4000, bytes => { said.push(bytes) })
  assert.equal(base.buffersFor([0]), undefined)
  assert.equal(base.buffersFor([0]), undefined)
  assert.deepEqual(said, [4000])
})
