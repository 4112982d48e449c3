import { Compression } from '../proto/averaging.js'
import type { CompressionName } from '../compression/index.js'
import type { DirectFrameChannel, FrameChannel } from '../net/frame-channel.js'

/** One round per channel: the sender half-closes after its parts, the reducer after its means. */
export function aggregateProtocol (prefix: string): string {
  return `/avs/${prefix}/aggregate/1.0.0`
}

/**
 * The same frames, and a channel kept across rounds: once every part and every mean of a round
 * has crossed it (both sides count them), the sender may send the next round's header on it
 * instead of half-closing, and the reducer waits for one. Direct channels only (a libp2p stream
 * costs no handshake to open); agreed by TLS ALPN, so an agent that speaks only 1.0.0 is served
 * one round per channel as before.
 */
export function keptAggregateProtocol (prefix: string): string {
  return `/avs/${prefix}${KEPT_VERSION}`
}

/** keptAggregateProtocol's id after the prefix: what isKeptChannel recognises whatever the prefix. */
const KEPT_VERSION = '/aggregate/1.1.0'

/** The aggregate protocol's versions a direct channel offers, the preferred first. */
export function directAggregateProtocols (prefix: string): string[] {
  return [keptAggregateProtocol(prefix), aggregateProtocol(prefix)]
}

/** Whether a channel carries more than one round (it agreed on keptAggregateProtocol). */
export function isKeptChannel (channel: FrameChannel): channel is DirectFrameChannel {
  return channel.kind === 'direct' && 'protocol' in channel && typeof channel.protocol === 'string' && channel.protocol.endsWith(KEPT_VERSION)
}

/**
 * How long a sender keeps an idle kept channel for the next round to the same reducer before
 * closing it. Rounds a few seconds apart (Moshpit steps, small models) reuse it; rounds minutes
 * apart (DiLoCo's outer steps) mostly open a new one, whose handshake is small beside them, and no
 * socket waits that long behind a NAT that may have dropped its mapping.
 */
export const KEPT_IDLE_MS = 60_000

/** How long a reducer waits on a kept channel for the next round's header: longer than the sender keeps it, so the sender closes first. */
export const KEPT_HEADER_WAIT_MS = 2 * KEPT_IDLE_MS

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

/**
 * The yamux receive window of an aggregate stream on the libp2p data path (both ends cap their own).
 * Every byte a window lets out waits in the connection ahead of the control messages sent after it
 * on the same connection: a stream's opening, the reducer's acceptance, a liveness check, rendezvous
 * answers. A direction of a connection holds up to two aggregate streams (our parts to the peer, our
 * means to it). With the windows grown to 16 MiB, four agents × 25M floats over libp2p on 100 Mbit/s
 * links failed every round (acceptances 2-5 s late, checks unanswered, healthy members cut off); at
 * 512 KiB the same round took 14.5 s (the direct channel's 13.3-13.5; BENCHMARKS.md). The cost: a
 * stream carries at most a window per round trip (512 KiB at 100 ms is 42 Mbit/s; a member of a group
 * of g runs 2(g - 1) such streams at once). Other streams (state transfer) grow to the node's maximum.
 */
export const AGGREGATE_RECEIVE_WINDOW = 512 * 1024
