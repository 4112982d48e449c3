import { test } from 'node:test'
import assert from 'node:assert/strict'
import { COMPRESSION_NAMES, CodecError, codecFor } from '../../../agent/compression/index.js'
import { seededRandom } from './random.js'

/**
 * Property: for random bytes and random claimed counts, decode either returns exactly n values or throws
 * CodecError — never another error type, never a wrong length.
 */
test('decoding random bytes never throws anything but CodecError and never returns the wrong length', () => {
  const random = seededRandom(20261122)
  const int = (max: number): number => Math.floor(random() * max)
  let decoded = 0
  let rejected = 0
  for (let iteration = 0; iteration < 4000; iteration++) {
    const codec = codecFor(COMPRESSION_NAMES[iteration % COMPRESSION_NAMES.length])
    // Half the time pick a count that matches the length (so content validation is exercised), else anything.
    const n = random() < 0.5 ? int(9000) : [int(9000), -1 - int(5), random() * 100, 2 ** 53, NaN][int(5)]
    let length: number
    try {
      length = random() < 0.6 ? codec.encodedLength(n) : int(12_000)
    } catch (err) {
      assert.ok(err instanceof CodecError, `encodedLength(${n}) threw ${String(err)}`)
      length = int(12_000)
    }
    if (random() < 0.1) length += int(3) - 1
    const offset = int(4)
    const buffer = new Uint8Array(Math.max(0, length) + offset)
    for (let i = 0; i < buffer.length; i++) buffer[i] = int(256)
    // Bias towards plausible headers sometimes: a few finite floats at the start.
    if (random() < 0.5 && buffer.length >= offset + 8) new DataView(buffer.buffer).setFloat32(offset, random(), true)
    const bytes = buffer.subarray(offset, offset + Math.max(0, length))
    let out: Float32Array | undefined
    try {
      out = codec.decode(bytes, n)
    } catch (err) {
      assert.ok(err instanceof CodecError, `${codec.name} decode(${bytes.length} bytes, ${n}) threw ${String(err)}`)
      assert.ok(err.message.length > 0 && !err.message.includes('\n'))
      rejected++
      continue
    }
    assert.ok(out instanceof Float32Array)
    assert.equal(out.length, n)
    assert.equal(out.byteOffset % 4, 0)
    decoded++
  }
  // Both branches must be exercised for the property to mean something.
  assert.ok(decoded > 500, `only ${decoded} inputs decoded`)
  assert.ok(rejected > 500, `only ${rejected} inputs rejected`)
})

test('encode then decode is consistent for random float32 bit patterns (finite ones for 8-bit codecs)', () => {
  const random = seededRandom(5)
  for (let iteration = 0; iteration < 400; iteration++) {
    const n = Math.floor(random() * 5000)
    const bits = new Uint32Array(n)
    for (let i = 0; i < n; i++) bits[i] = Math.floor(random() * 4294967296)
    const values = new Float32Array(bits.buffer)
    for (const name of COMPRESSION_NAMES) {
      const codec = codecFor(name)
      if (name === 'uniform8bit' || name === 'blockwise8bit') {
        for (let i = 0; i < n; i++) if (!Number.isFinite(values[i])) values[i] = 0
      }
      const encoded = codec.encode(values)
      assert.equal(encoded.length, codec.encodedLength(n))
      const out = codec.decode(encoded, n)
      assert.equal(out.length, n)
      if (name !== 'none') for (const v of out) assert.ok(name === 'float16' || Number.isFinite(v))
    }
  }
})
