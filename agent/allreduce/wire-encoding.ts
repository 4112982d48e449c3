import type { Codec } from '../compression/types.js'
import type { Flushed } from '../net/frame-channel.js'
import { lendWireMemory, returnWireMemory } from '../net/wire-memory.js'

/**
 * values as the codec puts them on the wire: in lent wire memory where the codec can encode into
 * memory it is given (float16: a part's bytes a round that no longer allocate), else its own output
 * ('none': a view of values itself).
 */
export function encodeForWire (codec: Codec, values: Float32Array): Uint8Array {
  if (codec.encodeInto === undefined) return codec.encode(values)
  return codec.encodeInto(values, lendWireMemory(codec.encodedLength(values.length)))
}

/**
 * The `flushed` to hand each of `writes` writes of the same pieces: once all of them have flushed,
 * `memory` goes back for reuse (none to wait for: at once). A write that fails, or whose channel
 * never says (FrameChannel.write), keeps it from coming back: the collector takes it then, as it
 * would take memory never lent. Giving back what the socket still reads would put other bytes on the wire.
 */
export function returnWhenFlushed (memory: ArrayBufferView, writes: number): Flushed {
  let left = writes
  let failed = false
  if (left === 0) returnWireMemory(memory)
  return (err) => {
    if (err != null) failed = true
    if (--left === 0 && !failed) returnWireMemory(memory)
  }
}
