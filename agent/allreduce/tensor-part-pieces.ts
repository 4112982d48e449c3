import { TensorPart } from '../proto/averaging.js'

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
