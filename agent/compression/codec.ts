import { type Codec, type CompressionName, HOST_IS_LITTLE_ENDIAN } from './types.js'
import { noneCodec } from './none.js'
import { float16Codec } from './float16.js'
import { uniform8bitCodec } from './uniform8bit.js'
import { blockwise8bitCodec } from './blockwise8bit.js'

export { type Codec, type CompressionName, COMPRESSION_NAMES, CodecError, isCompressionName, decodeInto } from './types.js'

const CODECS: Readonly<Record<CompressionName, Codec>> = Object.freeze({
  none: noneCodec,
  float16: float16Codec,
  uniform8bit: uniform8bitCodec,
  blockwise8bit: blockwise8bitCodec
})

/** The codec for a compression name. Throws for an unknown name (check with isCompressionName first). */
export function codecFor (name: CompressionName): Codec {
  if (!HOST_IS_LITTLE_ENDIAN) throw new Error('The tensor codecs need a little-endian host.')
  const codec = Object.hasOwn(CODECS, name) ? CODECS[name] : undefined
  if (codec === undefined) throw new Error(`Unknown compression "${String(name)}"; expected one of none, float16, uniform8bit, blockwise8bit.`)
  return codec
}
