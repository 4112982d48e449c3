import { Uint8ArrayList } from 'uint8arraylist'
import type { Stream } from '@libp2p/interface'
import type { SwarmNode } from '../../agent/net/node.js'

/**
 * Rewrites one outgoing frame (u32le length + payload) of a stream: frame 0 is the stream's first
 * frame (an aggregate stream's header). Returns the payload to send in its place, or null to drop it.
 */
export type FrameRewrite = (payload: Uint8Array, index: number) => Uint8Array | null

/**
 * Makes a misbehaving peer: every stream `node` dials for `protocol` from now on has its outgoing
 * frames passed through `rewriteFor()`, asked once per stream when it is dialled. The stream stays
 * open whatever the rewrite drops.
 */
export function rewriteOutgoingFrames (node: SwarmNode, protocol: string, rewriteFor: () => FrameRewrite): void {
  const dial = node.dialProtocol.bind(node)
  node.dialProtocol = (async (peer: Parameters<SwarmNode['dialProtocol']>[0], protocols: string | string[], options?: Parameters<SwarmNode['dialProtocol']>[2]) => {
    const stream = await dial(peer, protocols, options)
    if ((Array.isArray(protocols) ? protocols[0] : protocols) === protocol) rewriteFrames(stream, rewriteFor())
    return stream
  }) as SwarmNode['dialProtocol']
}

/** Passes each whole frame the stream sends through `rewrite`; a partial frame waits for the rest. */
export function rewriteFrames (stream: Stream, rewrite: FrameRewrite): void {
  const send = stream.send.bind(stream)
  const pending = new Uint8ArrayList()
  let frames = 0
  stream.send = (data: Uint8Array | Uint8ArrayList): boolean => {
    pending.append(data)
    const out = new Uint8ArrayList()
    while (pending.byteLength >= 4) {
      const length = pending.getUint32(0, true)
      if (pending.byteLength < 4 + length) break
      const payload = rewrite(pending.subarray(4, 4 + length), frames++)
      pending.consume(4 + length)
      if (payload == null) continue
      const header = new Uint8Array(4)
      new DataView(header.buffer).setUint32(0, payload.byteLength, true)
      out.append(header, payload)
    }
    return out.byteLength > 0 ? send(out) : true
  }
}
