import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { MAX_HEADER_BYTES, SafetensorsError, SafetensorsReader, encodeHeader, parseHeader, parseHeaderLength } from '../../../agent/checkpoint/index.js'

const enc = (v: unknown): Uint8Array => new TextEncoder().encode(typeof v === 'string' ? v : JSON.stringify(v))
const lengthBytes = (n: bigint): Uint8Array => { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, n, true); return b }

/** A one-sentence error: a SafetensorsError whose message is one line ending in a full stop. */
function assertSentence (fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof SafetensorsError, `not a SafetensorsError: ${String(err)}`)
    assert.match(err.message, pattern)
    assert.match(err.message, /^[^\n]+\.$/)
    return true
  })
}

test('encodeHeader pads the JSON with spaces to a multiple of 8 and lays tensors out contiguously', () => {
  const { bytes, entries, dataBytes } = encodeHeader([
    { name: 'a', dtype: 'F32', shape: [2, 3] }, { name: 'b', dtype: 'BF16', shape: [5] }, { name: 'c', dtype: 'F16', shape: [] }, { name: 'z', dtype: 'F32', shape: [0, 4] }
  ], { k: 'v' })
  assert.equal(bytes.length % 8, 0)
  const n = parseHeaderLength(bytes.subarray(0, 8), bytes.length + dataBytes)
  assert.equal(n, bytes.length - 8)
  assert.equal(bytes[bytes.length - 1], 0x20)
  assert.deepEqual(entries.map(e => [e.begin, e.end]), [[0, 24], [24, 34], [34, 36], [36, 36]])
  assert.equal(dataBytes, 36)
  const h = parseHeader(bytes.subarray(8), dataBytes)
  assert.deepEqual(h.metadata, { k: 'v' })
  assert.deepEqual(h.tensors.map(t => [t.name, t.dtype, t.shape]), [['a', 'F32', [2, 3]], ['b', 'BF16', [5]], ['c', 'F16', []], ['z', 'F32', [0, 4]]])
  assert.equal(h.dataStart, bytes.length)
})

test('encodeHeader refuses duplicate, empty and reserved names and unknown dtypes', () => {
  assertSentence(() => encodeHeader([{ name: 'a', dtype: 'F32', shape: [1] }, { name: 'a', dtype: 'F32', shape: [1] }]), /appears twice/)
  assertSentence(() => encodeHeader([{ name: '', dtype: 'F32', shape: [1] }]), /not allowed/)
  assertSentence(() => encodeHeader([{ name: '__metadata__', dtype: 'F32', shape: [1] }]), /not allowed/)
  assertSentence(() => encodeHeader([{ name: 'a', dtype: 'F64' as never, shape: [1] }]), /unsupported dtype/)
  assertSentence(() => encodeHeader([], { k: 1 as never }), /not a string/)
})

test('a hostile header length is refused before anything of its size is allocated', () => {
  // 2^63 and 2^50 bytes could not be allocated at all: a RangeError would surface if the reader tried.
  assertSentence(() => parseHeaderLength(lengthBytes(1n << 63n), 1000), /exceeds the limit of 100000000 bytes/)
  assertSentence(() => parseHeaderLength(lengthBytes(1n << 50n), 1000), /exceeds the limit/)
  assertSentence(() => parseHeaderLength(lengthBytes(BigInt(MAX_HEADER_BYTES) + 1n), 2 * MAX_HEADER_BYTES), /exceeds the limit/)
  assertSentence(() => parseHeaderLength(lengthBytes(90_000_000n), 100), /runs past the end of the 100-byte file/)
  assertSentence(() => parseHeaderLength(lengthBytes(0n), 100), /too short for a JSON object/)
  assertSentence(() => parseHeaderLength(new Uint8Array(3), 3), /too short for the 8-byte header length/)
  assert.equal(parseHeaderLength(lengthBytes(16n), 24), 16)
})

test('hostile JSON headers give one-sentence errors', () => {
  const f32 = (shape: number[], offsets: unknown): unknown => ({ dtype: 'F32', shape, data_offsets: offsets })
  const cases: Array<[unknown, number, RegExp]> = [
    ['[1,2]', 0, /does not start with a JSON object/],
    ['{"a":', 0, /not valid JSON/],
    ['{}x', 0, /not valid JSON/],
    [{ a: f32([2], [0, 8]), b: f32([2], [4, 12]) }, 12, /overlaps the tensor before it/],
    [{ a: f32([2], [0, 8]), b: f32([2], [0, 8]) }, 8, /covers|overlaps/],
    [{ a: f32([2], [0, 8]) }, 4, /past the 4 bytes of data/],
    [{ a: f32([2], [0, 1e15]) }, 8, /past the 8 bytes of data/],
    [{ a: f32([2], [8, 0]) }, 8, /end before they begin/],
    [{ a: f32([2], [0, 8]), b: f32([1], [12, 16]) }, 16, /gap before tensor "b"/],
    [{ a: f32([2], [0, 8]) }, 16, /cover 8 bytes but the file has 16/],
    [{ a: f32([3], [0, 8]) }, 20, /shape \[3\] of 12 bytes but data_offsets span 8/],
    [{ a: f32([1 << 30, 1 << 30, 1 << 30], [0, 8]) }, 8, /larger than the 8 bytes available/],
    [{ a: { dtype: 'F64', shape: [1], data_offsets: [0, 8] } }, 8, /unsupported dtype "F64"/],
    [{ a: { dtype: 'I8', shape: [1], data_offsets: [0, 1] } }, 1, /unsupported dtype "I8"/],
    [{ a: f32([-1], [0, 0]) }, 0, /invalid shape/],
    [{ a: f32([1.5], [0, 6]) }, 6, /invalid shape/],
    [{ a: f32([1], [0]) }, 4, /invalid data_offsets/],
    [{ a: f32([1], [0, '4']) }, 4, /invalid data_offsets/],
    [{ a: f32([1], [-4, 0]) }, 4, /invalid data_offsets/],
    [{ a: 7 }, 0, /not described by an object/],
    [{ __metadata__: { k: 1 } }, 0, /Metadata value of "k" is not a string/],
    [{ __metadata__: [] }, 0, /__metadata__ is not an object/],
    [{ '': f32([1], [0, 4]) }, 4, /empty name/]
  ]
  for (const [json, dataBytes, pattern] of cases) assertSentence(() => parseHeader(enc(json), dataBytes), pattern)
  assertSentence(() => parseHeader(new Uint8Array([0x7b, 0xff, 0x7d]), 0), /not valid UTF-8/)
})

test('a __proto__ tensor name is just a name', () => {
  const h = parseHeader(enc('{"__proto__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'), 4)
  assert.deepEqual(h.tensors.map(t => t.name), ['__proto__'])
})

test('SafetensorsReader refuses truncated and garbage files with the reason, without allocating the claimed size', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'st-hostile-'))
  try {
    const write = async (name: string, ...parts: Uint8Array[]): Promise<string> => {
      const path = join(dir, name)
      await writeFile(path, Buffer.concat(parts))
      return path
    }
    const hdr = enc('{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}')
    const hostile: Array<[string, RegExp]> = [
      [await write('empty'), /0 bytes, too short/],
      [await write('huge', lengthBytes(1n << 62n), new Uint8Array(8)), /exceeds the limit/],
      [await write('past', lengthBytes(99_000_000n), new Uint8Array(64)), /runs past the end/],
      [await write('garbage', lengthBytes(8n), enc('\u0000garbage')), /does not start with a JSON object/],
      [await write('truncated', lengthBytes(BigInt(hdr.length)), hdr, new Uint8Array(10)), /past the 10 bytes of data/]
    ]
    for (const [path, pattern] of hostile) {
      await assert.rejects(SafetensorsReader.open(path), (err: unknown) => err instanceof SafetensorsError && pattern.test(err.message))
    }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
})
