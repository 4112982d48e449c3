import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Compression, TensorPart } from '../../../agent/proto/averaging.js'
import { Uint8ArrayList } from 'uint8arraylist'
import { decodeTensorPartPieces, encodeTensorPartPieces } from '../../../agent/allreduce/tensor-part-pieces.js'

test('TensorPart pieces join to exactly the generated encoding, and the data piece is the caller\'s own bytes', () => {
  for (const partIndex of [0, 1, 127, 128, 300_000]) {
    for (const compression of [Compression.NONE, Compression.FLOAT16, Compression.BLOCKWISE_8BIT]) {
      for (const length of [0, 1, 127, 128, 16_383, 16_384, 65_536, 2_097_152]) {
        const data = new Uint8Array(length).map((_, i) => i * 31)
        const pieces = encodeTensorPartPieces({ partIndex, compression, data })
        const joined = Buffer.concat(pieces)
        assert.deepEqual(new Uint8Array(joined), TensorPart.encode({ partIndex, compression, data }), `part ${partIndex}, ${compression}, ${length} bytes`)
        const decoded = TensorPart.decode(joined)
        assert.equal(decoded.partIndex, partIndex)
        assert.equal(decoded.compression, compression)
        assert.equal(decoded.data.byteLength, length)
        if (length > 0) assert.equal(pieces[1], data)
      }
    }
  }
})

/** The bytes cut into chunks at the given sizes, cycling. */
function chunked (bytes: Uint8Array, sizes: number[]): Uint8ArrayList {
  const list = new Uint8ArrayList()
  for (let at = 0, i = 0; at < bytes.length; i++) {
    const size = sizes[i % sizes.length]
    list.append(bytes.subarray(at, at + size))
    at += size
  }
  return list
}

test('TensorPart frames decode from any chunking exactly as the generated decoder reads them joined', () => {
  for (const data of [new Uint8Array(0), new Uint8Array([7]), new Uint8Array(70_000).map((_, i) => i)]) {
    const encoded = TensorPart.encode({ partIndex: 300, compression: Compression.FLOAT16, data })
    // Unknown fields (a later protocol version) before and after the data are skipped as protobuf says.
    const withExtras = new Uint8Array([0x20, 0x05, ...encoded, 0x2a, 0x02, 0xaa, 0xbb, 0x35, 1, 2, 3, 4, 0x39, 1, 2, 3, 4, 5, 6, 7, 8])
    for (const bytes of [encoded, withExtras]) {
      for (const sizes of [[bytes.length], [1], [3, 16384], [5, 7, 11]]) {
        const got = decodeTensorPartPieces(chunked(bytes, sizes))
        const want = TensorPart.decode(bytes)
        assert.equal(got.partIndex, want.partIndex)
        assert.equal(got.compression, want.compression)
        assert.deepEqual(got.data.subarray(), want.data)
      }
    }
  }
})

test('malformed TensorPart frames throw a protocol error, never allocate what they announce', () => {
  const good = TensorPart.encode({ partIndex: 1, compression: Compression.NONE, data: new Uint8Array(100) })
  const cases: Array<[string, Uint8Array]> = [
    ['truncated varint', new Uint8Array([0x08, 0x80])],
    ['varint above 5 bytes', new Uint8Array([0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01])],
    ['length beyond the frame', new Uint8Array([0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2])],
    ['data cut short', good.subarray(0, good.length - 1)],
    ['group wire type', new Uint8Array([0x0b, 0x0c])],
    ['wire type 7', new Uint8Array([0x0f])],
    ['fixed64 cut short', new Uint8Array([0x09, 1, 2])],
    ['data twice', new Uint8Array([...good, 0x1a, 0x01, 0x00])],
    ['a compression this agent does not know', new Uint8Array([0x08, 0x01, 0x10, 0x09, 0x1a, 0x01, 0x00])]
  ]
  for (const [what, bytes] of cases) {
    assert.throws(() => decodeTensorPartPieces(chunked(bytes, [2])), (err: Error) => err.name === 'ProtocolError' || /tensor part|index out of range|invalid wire type/i.test(err.message), what)
  }
})

test('a leaving reducer\'s hand-off frame: part index and flag, no data; other frames are not handed off', () => {
  const pieces = encodeTensorPartPieces({ partIndex: 300, compression: Compression.FLOAT16, data: new Uint8Array(0), handedOff: true })
  const joined = new Uint8Array(Buffer.concat(pieces))
  assert.deepEqual(joined, TensorPart.encode({ partIndex: 300, compression: Compression.FLOAT16, data: new Uint8Array(0), handedOff: true }))
  const decoded = decodeTensorPartPieces(new Uint8ArrayList(joined))
  assert.deepEqual([decoded.partIndex, decoded.compression, decoded.data.byteLength, decoded.handedOff], [300, Compression.FLOAT16, 0, true])
  const mean = Buffer.concat(encodeTensorPartPieces({ partIndex: 300, compression: Compression.NONE, data: new Uint8Array(8) }))
  assert.equal(decodeTensorPartPieces(new Uint8ArrayList(mean)).handedOff, false)
  // An agent that does not know the field skips it: to it the frame is an empty part, which it keeps local.
  const fieldless = TensorPart.decode(joined.subarray(0, joined.byteLength - 2))
  assert.deepEqual([fieldless.partIndex, fieldless.data.byteLength, fieldless.handedOff], [300, 0, false])
})
