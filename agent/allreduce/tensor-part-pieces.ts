import { Uint8ArrayList } from 'uint8arraylist'
import { TensorPart } from '../proto/averaging.js'
import { ProtocolError } from '../errors.js'

/** Protobuf tag of TensorPart.data: field 3, wire type 2 (length-delimited). */
const DATA_TAG = (3 << 3) | 2

/**
 * TensorPart's encoding as [head, data]: the generated encoder writes the small fields, then the
 * data field's tag and length, and the data itself goes to the channel as it is. The concatenation
 * is byte for byte TensorPart.encode(part) (protons writes fields in order, data last), without
 * copying a part's values into a new message first.
 */
export function encodeTensorPartPieces (part: TensorPart): Uint8Array[] {
  const fields = TensorPart.encode({ partIndex: part.partIndex, compression: part.compression })
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
}

/**
 * Decodes a TensorPart frame without joining its chunks: a scan over the field tags finds the data
 * field, the generated decoder reads every other field from the bytes around it, and the data
 * stays a list of views for the caller to copy where it needs it. Malformed framing throws.
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
  let field: { start: number, dataStart: number, dataEnd: number } | null = null
  while (at < end) {
    const start = at
    const tag = varint()
    const wireType = tag % 8
    if (wireType === 0) varint()
    else if (wireType === 1) at += 8
    else if (wireType === 5) at += 4
    else if (wireType === 2) {
      const length = varint()
      if (length > end - at) throw new ProtocolError(`a tensor part field announces ${length} bytes, more than the frame holds`)
      if (tag === DATA_TAG) {
        if (field != null) throw new ProtocolError('a tensor part holds its data twice')
        field = { start, dataStart: at, dataEnd: at + length }
      }
      at += length
    } else throw new ProtocolError(`a tensor part holds a field of wire type ${wireType}`)
    if (at > end) throw new ProtocolError('a tensor part ends inside a field')
  }
  if (field == null) return { ...TensorPart.decode(frame.subarray()), data: new Uint8ArrayList() }
  // Every byte but the data field's own (a few bytes from an honest sender).
  const head = new Uint8ArrayList(frame.sublist(0, field.start), frame.sublist(field.dataEnd)).subarray()
  const { partIndex, compression } = TensorPart.decode(head)
  return { partIndex, compression, data: frame.sublist(field.dataStart, field.dataEnd) }
}
