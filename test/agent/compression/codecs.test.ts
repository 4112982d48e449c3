import { Uint8ArrayList } from 'uint8arraylist'
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { COMPRESSION_NAMES, CodecError, codecFor, decodeInto, isCompressionName } from '../../../agent/compression/index.js'
import { atOffset, normalArray, relativeRmse } from './random.js'

/**
 * Bounds on relative RMSE for N(0, 1) data; the values seen are printed by the round-trip test. uniform8bit's
 * error is dominated by clipping at ±3 std (hivemind's range), not by the bin width.
 */
const MAX_RELATIVE_RMSE = { none: 0, float16: 5e-4, uniform8bit: 2e-2, blockwise8bit: 2.5e-2 } as const
const EDGE_SIZES = [0, 1, 2, 3, 4095, 4096, 4097, 8192 + 5]

test('COMPRESSION_NAMES lists each codec once and isCompressionName accepts exactly them', () => {
  assert.deepEqual([...COMPRESSION_NAMES], ['none', 'float16', 'uniform8bit', 'blockwise8bit'])
  for (const name of COMPRESSION_NAMES) assert.equal(isCompressionName(name), true)
  for (const bad of ['', 'NONE', 'fp16', 'toString', '__proto__', 'quantile8bit']) assert.equal(isCompressionName(bad), false)
})

test('codecFor returns a codec with the requested name and nominal size', () => {
  const expected = { none: 4, float16: 2, uniform8bit: 1, blockwise8bit: 1 }
  for (const name of COMPRESSION_NAMES) {
    const codec = codecFor(name)
    assert.equal(codec.name, name)
    assert.equal(codec.bytesPerElement, expected[name])
  }
  assert.throws(() => codecFor('bogus' as never), /Unknown compression "bogus"/)
  assert.throws(() => codecFor('toString' as never), /Unknown compression/)
})

test('encodedLength follows each documented layout', () => {
  for (const n of EDGE_SIZES) {
    assert.equal(codecFor('none').encodedLength(n), 4 * n)
    assert.equal(codecFor('float16').encodedLength(n), 2 * n)
    assert.equal(codecFor('uniform8bit').encodedLength(n), 1024 + n)
    assert.equal(codecFor('blockwise8bit').encodedLength(n), 4 * Math.ceil(n / 4096) + n)
  }
  for (const name of COMPRESSION_NAMES) {
    for (const bad of [-1, 1.5, NaN, Infinity]) {
      assert.throws(() => codecFor(name).encodedLength(bad), CodecError, `${name} encodedLength(${bad})`)
    }
  }
})

test('round trip of N(0,1) data stays within each codec\'s error bound', (t) => {
  const values = normalArray(100_003, 42)
  const seen: string[] = []
  for (const name of COMPRESSION_NAMES) {
    const codec = codecFor(name)
    const encoded = codec.encode(values)
    assert.equal(encoded.length, codec.encodedLength(values.length))
    const decoded = codec.decode(encoded, values.length)
    assert.equal(decoded.length, values.length)
    const rmse = relativeRmse(values, decoded)
    seen.push(`${name}=${rmse.toExponential(2)}`)
    assert.ok(rmse <= MAX_RELATIVE_RMSE[name], `${name}: relative RMSE ${rmse} exceeds ${MAX_RELATIVE_RMSE[name]}`)
  }
  t.diagnostic(`relative RMSE on N(0,1): ${seen.join(' ')}`)
})

test('round trip of shifted and scaled data keeps the error relative to the spread', () => {
  // Mean 1000, std 0.01: uniform8bit centres by the mean; blockwise is relative to absmax (~1000), so its
  // error is relative to the magnitude instead.
  const values = normalArray(20_000, 7, 1000, 0.01)
  const u = codecFor('uniform8bit')
  const ud = u.decode(u.encode(values), values.length)
  let squares = 0
  for (let i = 0; i < values.length; i++) squares += (ud[i] - values[i]) ** 2
  const rms = Math.sqrt(squares / values.length)
  assert.ok(rms < 0.025 * 0.01, `uniform8bit RMS error ${rms} should be about 2% of the std 0.01 (clipping plus float32 ulp at 1000)`)
  const b = codecFor('blockwise8bit')
  const bd = b.decode(b.encode(values), values.length)
  for (let i = 0; i < values.length; i++) assert.ok(Math.abs(bd[i] - values[i]) < 1000 * 0.008)
})

test('every codec handles edge sizes, and decodes bytes at any byteOffset into an aligned fresh array', () => {
  for (const name of COMPRESSION_NAMES) {
    const codec = codecFor(name)
    for (const n of EDGE_SIZES) {
      const values = normalArray(n, n + 1)
      const copy = values.slice()
      const encoded = codec.encode(values)
      assert.deepEqual(values, copy, `${name} encode must not modify its input`)
      assert.equal(encoded.length, codec.encodedLength(n), `${name} n=${n}`)
      const reference = codec.decode(encoded, n)
      for (const offset of [0, 1, 2, 3, 5]) {
        const shifted = atOffset(encoded, offset)
        const decoded = codec.decode(shifted, n)
        assert.ok(decoded instanceof Float32Array)
        assert.equal(decoded.length, n)
        assert.equal(decoded.byteOffset % 4, 0)
        assert.notEqual(decoded.buffer, shifted.buffer, `${name} must decode into a fresh buffer`)
        assert.deepEqual(decoded, reference, `${name} n=${n} offset=${offset}`)
        // A node Buffer (what sockets hand over) inside a larger chunk with other bytes around it:
        // Buffer's slice() is a view, so a codec copying with slice() would read the wrong bytes.
        const chunk = Buffer.alloc(encoded.length + 2 * offset + 8, 0xa5)
        chunk.set(encoded, offset + 4)
        const inBuffer = chunk.subarray(offset + 4, offset + 4 + encoded.length)
        assert.deepEqual(codec.decode(inBuffer, n), reference, `${name} n=${n} from a Buffer at offset ${offset + 4}`)
        assert.deepEqual(decodeInto(codec, new Uint8ArrayList(inBuffer.subarray(0, 3), inBuffer.subarray(3)), n, new Float32Array(n + 3)), reference, `${name} n=${n} from chunks`)
      }
      if (n > 0) assert.ok(relativeRmse(values, reference) <= Math.max(MAX_RELATIVE_RMSE[name] * 3, 1e-12) || n < 16)
    }
  }
})

test('none round-trips bit-exactly, including NaN payloads, -0, infinities and subnormals', () => {
  const bits = new Uint32Array([0x7fc00001, 0x80000000, 0x7f800000, 0xff800000, 0x00000001, 0x3f800000, 0x7f7fffff])
  const values = new Float32Array(bits.buffer)
  const codec = codecFor('none')
  const decoded = codec.decode(atOffset(codec.encode(values), 3), values.length)
  assert.deepEqual(new Uint32Array(decoded.buffer), bits)
  const random = normalArray(1001, 3)
  assert.deepEqual(codec.decode(codec.encode(random), random.length), random)
})

test('none encode of a Float32Array that views part of a larger buffer encodes only that view', () => {
  const backing = new Float32Array([1, 2, 3, 4, 5])
  const view = backing.subarray(1, 4)
  const codec = codecFor('none')
  const encoded = codec.encode(view)
  assert.equal(encoded.length, 12)
  assert.deepEqual(codec.decode(encoded, 3), new Float32Array([2, 3, 4]))
})

test('lossy codecs encode a view on a fresh buffer, never aliasing the input', () => {
  const values = normalArray(5000, 11)
  for (const name of ['float16', 'uniform8bit', 'blockwise8bit'] as const) {
    const encoded = codecFor(name).encode(values)
    assert.notEqual(encoded.buffer, values.buffer, name)
  }
})

test('decoders reject a wrong length with a one-sentence CodecError before allocating', () => {
  for (const name of COMPRESSION_NAMES) {
    const codec = codecFor(name)
    const good = codec.encode(normalArray(100, 5))
    for (const bytes of [good.subarray(1), atOffset(good, 0).subarray(0, good.length - 1), new Uint8Array(good.length + 1), new Uint8Array(0)]) {
      assert.throws(() => codec.decode(bytes, 100), (err: unknown) => {
        assert.ok(err instanceof CodecError, `${name}: expected CodecError`)
        assert.match(err.message, /^[a-z0-9]+ codec: 100 values need \d+ encoded bytes, got \d+\.$/)
        return true
      })
    }
    // A huge claimed count with a tiny buffer must fail fast instead of allocating gigabytes.
    assert.throws(() => codec.decode(new Uint8Array(8), 2 ** 40), CodecError)
    for (const badN of [-1, 0.5, NaN]) assert.throws(() => codec.decode(good, badN), CodecError)
    assert.throws(() => codec.decode([1, 2, 3] as unknown as Uint8Array, 0), CodecError)
  }
})

test('8-bit codecs refuse to quantise NaN or infinite input with a CodecError', () => {
  for (const name of ['uniform8bit', 'blockwise8bit'] as const) {
    for (const bad of [NaN, Infinity, -Infinity]) {
      const values = normalArray(5000, 9)
      values[4500] = bad
      assert.throws(() => codecFor(name).encode(values), CodecError, `${name} with ${bad}`)
    }
  }
})
