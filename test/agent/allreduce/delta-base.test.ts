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

test('DeltaBase: keeps a whole round\'s result by tensor, sends changes against it, lands base + change', () => {
  const base = new DeltaBase([3, 2], () => true)
  assert.equal(base.idFor([0, 1]).byteLength, 0, 'no base before a round')
  const t = [Float32Array.of(1, 2, 3), Float32Array.of(10, 20)]
  base.keep([0, 1], t, Uint8Array.of(7))
  assert.deepEqual([...base.idFor([0, 1])], [7])
  t[0].set([1.5, 2, 2]); t[1].set([10, 21])
  base.subtract([0, 1], t)
  assert.deepEqual([...t[0]], [0.5, 0, -1]); assert.deepEqual([...t[1]], [0, 1])
  base.add([0, 1], t)
  assert.deepEqual([...t[0]], [1.5, 2, 2]); assert.deepEqual([...t[1]], [10, 21])
  // A subset round moves its tensors' base alone: the step over both then has none in common.
  base.keep([1], [t[1]], Uint8Array.of(8))
  assert.deepEqual([...base.idFor([1])], [8])
  assert.equal(base.idFor([0, 1]).byteLength, 0)
  base.forget([0])
  assert.equal(base.idFor([0]).byteLength, 0)
})

test('DeltaBase: a copy that does not fit keeps no base and says so once', () => {
  const said: number[] = []
  const base = new DeltaBase([1000], bytes => bytes < 4000, bytes => { said.push(bytes) })
  base.keep([0], [new Float32Array(1000)], Uint8Array.of(1))
  base.keep([0], [new Float32Array(1000)], Uint8Array.of(2))
  assert.equal(base.idFor([0]).byteLength, 0)
  assert.deepEqual(said, [4000])
})
