import type { Stream } from '@libp2p/interface'

/**
 * Caps how much a yamux stream lets its peer send ahead of our reading: its receive window, now and
 * as yamux grows it. yamux takes one window setting for every stream of a connection; this sets one
 * stream's own. Returns false, changing nothing, when the stream is not a yamux stream (the fields
 * are yamux's own, not libp2p's interface: @libp2p/yamux 8).
 */
export function capReceiveWindow (stream: Stream, bytes: number): boolean {
  const s = stream as unknown as { recvWindow?: unknown, maxStreamWindowSize?: unknown }
  if (typeof s.recvWindow !== 'number' || typeof s.maxStreamWindowSize !== 'number') return false
  s.maxStreamWindowSize = Math.min(s.maxStreamWindowSize, bytes)
  s.recvWindow = Math.min(s.recvWindow, bytes)
  return true
}
