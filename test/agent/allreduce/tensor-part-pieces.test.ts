import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Compression, TensorPart } from '../../../agent/proto/averaging.js'
import { encodeTensorPartPieces } from '../../../agent/allreduce/tensor-part-pieces.js'

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
