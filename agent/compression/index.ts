export { type Codec, type CompressionName, COMPRESSION_NAMES, CodecError, codecFor, isCompressionName } from './codec.js'
