import { Uint8ArrayList } from 'uint8arraylist'
import { Compression, TensorPart } from '../proto/averaging.js'
import { ProtocolError } from '../errors.js'

/** Protobuf tag of TensorPart.data: field 3, wire type 2 (length-delimited). */
const DATA_TAG = (3 << 3) | 2
/** TensorPart.part_index (field 1) and compression (field 2), both varints. */
const PART_INDEX_TAG = (1 << 3) | 0
const COMPRESSION_TAG = (2 << 3) | 0
/** TensorPart.handed_off (field 4), a varint: a leaving reducer's last frame. */
const HANDED_OFF_TAG = (4 << 3) | 0
/** Compression by its number on the wire (averaging.proto). */
const COMPRESSION_BY_NUMBER: readonly Compression[] = [Compression.NONE, Compression.FLOAT16, Compression.UNIFORM_8BIT, Compression.BLOCKWISE_8BIT]

/**
 * TensorPart's encoding as [head, data]: the generated encoder writes the small fields, then the
 * data field's tag and length, and the data itself goes to the channel as it is. The concatenation
 * is byte for byte TensorPart.encode(part) (protons writes fields in order; the one field after
 * data, handed_off, comes only in a frame without data), without copying a part's values into a
 * new message first.
 */
export function encodeTensorPartPieces (part: Omit<TensorPart, 'handedOff'> & { readonly handedOff?: boolean }): Uint8Array[] {
  const fields = TensorPart.encode({ partIndex: part.partIndex, compression: part.compression, handedOff: part.handedOff === true })
  if (part.data.byteLength === 0) return [fields]
  const head = new Uint8Array(fields.byteLength + 1 + varintLength(part.data.byteLength))
  head.set(fields)
  let at = fields.byteLength
  head[at++] = DATA_TAG
  for (let v = part.data.byteLength; ; v >>>= 7) {
    if (v < 0x80) { head[at++] = v; break }
    head[at++] = (v & 0x7f) | 0x80
  }
  return [head, part.data]
}

function varintLength (v: number): number {
  let n = 1
  while (v >= 0x80) { v >>>= 7; n++ }
  return n
}

export interface TensorPartPieces {
  readonly partIndex: number
  readonly compression: TensorPart['compression']
  /** The data field's bytes, still in the transport's chunks. */
  readonly data: Uint8ArrayList
  /** A leaving reducer reduces nothing from partIndex on (averaging.proto, TensorPart.handed_off). */
  readonly handedOff: boolean
}

/**
 * Decodes a TensorPart frame without joining its chunks: one scan over the field tags reads the two
 * varint fields and finds the data field, which stays a list of views for the caller to copy where it
 * needs it. Nothing else is allocated: a part arrives thousands of times a round, and the sublists
 * and the decoder's objects of a full decode per part were garbage V8 kept to its full collections
 * (a heap sampling profile, 4 peers × 25M floats). Malformed framing throws.
 */
export function decodeTensorPartPieces (frame: Uint8ArrayList): TensorPartPieces {
  const end = frame.byteLength
  let at = 0
  const varint = (): number => {
    let value = 0
    for (let shift = 0; shift < 35; shift += 7) {
      if (at >= end) throw new ProtocolError('a tensor part ends inside a varint')
      const byte = frame.get(at++)
      value += (byte & 0x7f) * 2 ** shift
      if (byte < 0x80) return value
    }
    throw new ProtocolError('a tensor part holds a varint longer than 5 bytes')
  }
  let partIndex = 0
  let compression = Compression.NONE
  let dataStart = -1
  let dataEnd = -1
  let handedOff = false
  while (at < end) {
    const tag = varint()
    const wireType = tag % 8
    if (wireType === 0) {
      const value = varint()
      // uint32 as protobuf reads it: the low 32 bits.
      if (tag === PART_INDEX_TAG) partIndex = value % 2 ** 32
      else if (tag === COMPRESSION_TAG) {
        const known = COMPRESSION_BY_NUMBER[value]
        if (known === undefined) throw new ProtocolError(`a tensor part names compression ${value}, which this agent does not know`)
        compression = known
      } else if (tag === HANDED_OFF_TAG) handedOff = value !== 0
    } else if (wireType === 1) at += 8
    else if (wireType === 5) at += 4
    else if (wireType === 2) {
      const length = varint()
      if (length > end - at) throw new ProtocolError(`a tensor part field announces ${length} bytes, more than the frame holds`)
      if (tag === DATA_TAG) {
        if (dataStart >= 0) throw new ProtocolError('a tensor part holds its data twice')
        dataStart = at
        dataEnd = at + length
      }
      at += length
    } else throw new ProtocolError(`a tensor part holds a field of wire type ${wireType}`)
    if (at > end) throw new ProtocolError('a tensor part ends inside a field')
  }
  return { partIndex, compression, data: dataStart < 0 ? new Uint8ArrayList() : frame.sublist(dataStart, dataEnd), handedOff }
}
