import { Compression } from '../proto/averaging.js'
import type { CompressionName } from '../compression/index.js'

export function aggregateProtocol (prefix: string): string {
  return `/avs/${prefix}/aggregate/1.0.0`
}

export const COMPRESSION_WIRE: Record<CompressionName, Compression> = {
  none: Compression.NONE,
  float16: Compression.FLOAT16,
  uniform8bit: Compression.UNIFORM_8BIT,
  blockwise8bit: Compression.BLOCKWISE_8BIT
}

/** Frame bound for a part: its encoded bytes plus protobuf overhead. */
export function maxPartFrameBytes (encodedLength: number): number {
  return encodedLength + 64
}

/** Parts a sender may run ahead of the reducer's slowest part: bounds reducer memory per sender. */
export const PART_WINDOW = 16
