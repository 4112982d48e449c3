export type { CompressionChoice } from './types.js'
export { type Codec, type CompressionName, COMPRESSION_NAMES, CodecError, codecFor, isCompressionName, decodeInto } from './codec.js'
