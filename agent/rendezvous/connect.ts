import type { PeerId } from '@libp2p/interface'
import type { RpcNode } from '../net/rpc.js'
import { awakeTimeout } from '../util/awake-timeout.js'

/**
 * Makes sure a connection to the peer is open or opening before a request with a short timeout
 * runs on it. The connection outlives the request's patience: libp2p's dial timeout bounds it,
 * not ours. Dialled inside the request (dialProtocol under AbortSignal.timeout(requestTimeout)),
 * a handshake slowed by load was thrown away at the timeout and redone from scratch by the next
 * request, which timed out the same way: 16 peers on two busy cores asked their leaders and
 * replicas again and again ('The operation was aborted due to timeout') and found no group. Left
 * to finish, the handshake serves the next request.
 */
export async function connectPatiently (node: RpcNode, peer: PeerId, waitMs: number): Promise<void> {
  if (node.getConnections(peer).length > 0) return
  const dialling = node.dial(peer)
  // Counted in time our own event loop was awake: a handshake that finished while we stalled is read, not given up on (awake-timeout.ts).
  const timeout = awakeTimeout(waitMs)
  const late = new Promise<'late'>(resolve => { timeout.signal.addEventListener('abort', () => { resolve('late') }, { once: true }) })
  try {
    // A failed dial throws here; one still under way after waitMs fails this request only.
    if (await Promise.race([dialling, late]) === 'late') {
      dialling.catch(() => {})
      throw new ConnectingError(`still connecting to ${peer.toString()} after ${waitMs} ms`)
    }
  } finally {
    timeout.clear()
  }
}

export class ConnectingError extends Error {
  override name = 'ConnectingError'
}
