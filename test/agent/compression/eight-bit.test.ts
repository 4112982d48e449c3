import { test } from 'node:test'
import assert from 'node:assert/strict'
import { CodecError, codecFor } from '../../../agent/compression/index.js'
import {
  BUCKET_BASE, BUCKET_NEEDS_SEARCH, BUCKET_THRESHOLD, DYNAMIC_MAP, DYNAMIC_MAP_THRESHOLDS, DYNAMIC_MAP_ZERO_INDEX, nearestCode
} from '../../../agent/compression/dynamic-map.js'
import { seededRandom, normalArray } from './random.js'

const uniform = codecFor('uniform8bit')
const blockwise = codecFor('blockwise8bit')

test('uniform8bit round-trips all-equal input exactly, for awkward values and sizes', () => {
  for (const value of [0, -0.1, 1 / 3, 3.4e38, -1e-40, 123456.7]) {
    for (const n of [1, 2, 4097, 10_000]) {
      const values = new Float32Array(n).fill(value)
      assert.deepEqual(uniform.decode(uniform.encode(values), n), values, `value ${value} n ${n}`)
    }
  }
})

test('uniform8bit layout: float32[256] codebook of bin means, then one index byte per value', () => {
  const values = normalArray(10_000, 5)
  const encoded = uniform.encode(values)
  assert.equal(encoded.length, 1024 + values.length)
  const codebook = new Float32Array(encoded.slice(0, 1024).buffer)
  const indices = encoded.subarray(1024)
  // Each codebook entry used by some value equals the mean of the values mapped to it (rounded to float32).
  const sums = new Float64Array(256)
  const counts = new Float64Array(256)
  for (let i = 0; i < values.length; i++) { sums[indices[i]] += values[i]; counts[indices[i]]++ }
  for (let k = 0; k < 256; k++) {
    if (counts[k] > 0) assert.equal(codebook[k], Math.fround(sums[k] / counts[k]))
  }
  // Bins are monotone in the value: a larger value never gets a smaller index.
  const order = [...values.keys()].sort((a, b) => values[a] - values[b])
  for (let j = 1; j < order.length; j++) assert.ok(indices[order[j]] >= indices[order[j - 1]])
  // The codebook is monotone (bin means and clamped empty-bin centres never cross).
  for (let k = 1; k < 256; k++) assert.ok(codebook[k] >= codebook[k - 1], `codebook ${k}`)
  // Empty bins stay inside [min, max] of the input, so huge inputs cannot overflow the codebook.
  const huge = new Float32Array([3.4e38, -3.4e38, 3.4e38, -3.4e38, 0])
  const hugeDecoded = uniform.decode(uniform.encode(huge), huge.length)
  for (const v of hugeDecoded) assert.ok(Number.isFinite(v))
})

test('uniform8bit decode rejects a codebook with NaN or Inf and accepts any index bytes', () => {
  const encoded = uniform.encode(normalArray(100, 1))
  for (const bad of [NaN, Infinity, -Infinity]) {
    const corrupted = encoded.slice()
    new DataView(corrupted.buffer).setFloat32(4 * 17, bad, true)
    assert.throws(() => uniform.decode(corrupted, 100), /uniform8bit codec: codebook entry 17 is not a finite number\./)
  }
  const anyIndices = encoded.slice()
  anyIndices.fill(255, 1024)
  assert.equal(uniform.decode(anyIndices, 100).length, 100)
})

test('dynamic map: 256 sorted distinct codes in [-1, 1], one exact zero, exact 1, symmetric except for 1', () => {
  assert.equal(DYNAMIC_MAP.length, 256)
  for (let k = 1; k < 256; k++) assert.ok(DYNAMIC_MAP[k] > DYNAMIC_MAP[k - 1])
  assert.equal(DYNAMIC_MAP[255], 1)
  assert.ok(DYNAMIC_MAP[0] >= -1)
  assert.equal(DYNAMIC_MAP[DYNAMIC_MAP_ZERO_INDEX], 0)
  const positives = [...DYNAMIC_MAP].filter(v => v > 0 && v < 1)
  const negatives = [...DYNAMIC_MAP].filter(v => v < 0).map(v => -v).sort((a, b) => a - b)
  assert.deepEqual(positives, negatives)
  // Log-spaced: the smallest magnitude is about 1e-6, so tiny values keep their order of magnitude.
  assert.ok(positives[0] > 1e-7 && positives[0] < 1e-6)
})

test('nearestCode picks the nearest code (brute force check on random and boundary inputs)', () => {
  const random = seededRandom(77)
  const probes: number[] = [-1, 1, 0, -0, 2, -2]
  for (let k = 0; k < 256; k++) probes.push(DYNAMIC_MAP[k], DYNAMIC_MAP[k] * (1 + 1e-7), DYNAMIC_MAP[k] * (1 - 1e-7))
  for (let i = 0; i < 20_000; i++) probes.push((random() * 2 - 1) * 10 ** -Math.floor(random() * 7))
  for (const v of probes) {
    const k = nearestCode(v)
    const best = Math.min(...[...DYNAMIC_MAP].map(c => Math.abs(c - v)))
    assert.equal(Math.abs(DYNAMIC_MAP[k] - v), best, `v=${v}`)
  }
})

test('blockwise8bit: zero blocks decode to +0, the positive absmax element is exact, blocks are independent', () => {
  const n = 4096 * 2 + 100
  const values = normalArray(n, 21)
  values.fill(0, 4096, 8192) // block 1 all zeros
  values[10] = 50 // block 0 absmax
  values[8200] = -1e-3 // block 2 has a tiny scale, unaffected by block 0's outlier
  const encoded = blockwise.encode(values)
  const absmax = new Float32Array(encoded.slice(0, 12).buffer)
  assert.equal(absmax[1], 0)
  assert.equal(absmax[0], 50)
  const decoded = blockwise.decode(encoded, n)
  for (let i = 4096; i < 8192; i++) assert.ok(Object.is(decoded[i], 0))
  assert.equal(decoded[10], 50)
  let blockTwoMax = 0
  for (let i = 8192; i < n; i++) blockTwoMax = Math.max(blockTwoMax, Math.abs(values[i]))
  for (let i = 8192; i < n; i++) assert.ok(Math.abs(decoded[i] - values[i]) <= blockTwoMax * 0.008)
  assert.deepEqual(blockwise.decode(blockwise.encode(new Float32Array(5000)), 5000), new Float32Array(5000))
})

test('blockwise8bit keeps small values within their order of magnitude thanks to the log-spaced map', () => {
  // A linear 8-bit map with absmax 1 would round all of these to 0 (its step is 1/127). The dynamic map has
  // 2^d linear steps inside decade d, so values at the bottom of the 1e-3 decade keep about 30% relative accuracy.
  const values = new Float32Array(4096)
  values[0] = 1
  for (let i = 1; i < 4096; i++) values[i] = 1e-3 * (1 + (i % 7) / 10)
  const decoded = blockwise.decode(blockwise.encode(values), 4096)
  for (let i = 1; i < 4096; i++) assert.ok(Math.abs(decoded[i] - values[i]) <= values[i] * 0.3, `${values[i]} → ${decoded[i]}`)
})

test('blockwise8bit decode rejects an absmax that is NaN, infinite or negative', () => {
  const encoded = blockwise.encode(normalArray(9000, 2))
  for (const bad of [NaN, Infinity, -Infinity, -1]) {
    const corrupted = encoded.slice()
    new DataView(corrupted.buffer).setFloat32(8, bad, true)
    assert.throws(() => blockwise.decode(corrupted, 9000), (err: unknown) =>
      err instanceof CodecError && /^blockwise8bit codec: block 2 has absmax .* which is not a finite non-negative number\.$/.test(err.message))
  }
})

test('the bucket lookup used by blockwise8bit agrees with the binary search for every float32 pattern tried', () => {
  const bits = new Uint32Array(1)
  const floats = new Float32Array(bits.buffer)
  const lookup = (): number => {
    const key = bits[0] >>> 16
    return BUCKET_NEEDS_SEARCH[key] === 0 ? BUCKET_BASE[key] + (floats[0] > BUCKET_THRESHOLD[key] ? 1 : 0) : nearestCode(floats[0])
  }
  const random = seededRandom(4242)
  // Every bucket's two ends and a random interior point, for both signs, plus every threshold's float32 neighbours.
  for (let key = 0; key < 65536; key++) {
    for (const low of [0, 0xffff, Math.floor(random() * 0x10000)]) {
      bits[0] = (key << 16) | low
      if (!Number.isFinite(floats[0])) continue
      assert.equal(lookup(), nearestCode(floats[0]), `bits 0x${bits[0].toString(16)}`)
    }
  }
  for (let k = 0; k < 255; k++) {
    floats[0] = DYNAMIC_MAP_THRESHOLDS[k]
    const centre = bits[0]
    for (const delta of [-1, 0, 1]) {
      bits[0] = centre + delta
      assert.equal(lookup(), nearestCode(floats[0]), `near threshold ${k}`)
    }
  }
  // Finite buckets never need the slow path for this map.
  let slow = 0
  for (let key = 0; key < 65536; key++) if (((key >>> 7) & 0xff) !== 0xff) slow += BUCKET_NEEDS_SEARCH[key]
  assert.equal(slow, 0)
})

test('blockwise8bit indices are the nearest codes to the float32-rounded quotient by the block absmax', () => {
  const values = normalArray(4096 * 3 + 17, 8)
  const n = values.length
  const encoded = blockwise.encode(values)
  const nBlocks = 4
  const absmax = new Float32Array(encoded.slice(0, 4 * nBlocks).buffer)
  const indices = encoded.subarray(4 * nBlocks)
  for (let i = 0; i < n; i++) {
    const v = Math.fround(values[i] * (1 / absmax[Math.floor(i / 4096)]))
    assert.equal(indices[i], nearestCode(v), `value ${i}`)
  }
})
