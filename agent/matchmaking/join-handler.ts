import type { Connection, Stream } from '@libp2p/interface'
import { JoinRequest, MatchCode, MessageFromLeader, PeerMode } from '../proto/averaging.js'
import { FramedStream } from '../net/framed-stream.js'
import { ProtocolError, describeError } from '../errors.js'
import { MAX_JOIN_REQUEST_BYTES, MAX_JOIN_STREAMS_PER_PEER } from './join-protocol.js'
import { PerPeerStreamLimit, peerIdToBytes, refuseStream } from '../net/rpc.js'
import type { Search } from './search.js'
import { validRound } from './group-info.js'
import type { Mutex } from '../util/mutex.js'

export interface JoinHandlerContext {
  readonly selfId: string
  readonly mode: PeerMode
  readonly schemaHash: Uint8Array
  readonly targetGroupSize: number
  readonly requestTimeoutMs: number
  readonly lock: Mutex
  /** The search under way, if any. */
  current (): Search | null
  /** Called after a follower joined, so the search loop can react (assemble when full). */
  onFollowerJoined (): void
  now (): number
}

/**
 * Leader side of matchmaking: checks a join request in hivemind's order (first failing check
 * wins), accepts, then holds the stream open until the group assembles or disbands.
 */
export function createJoinHandler (ctx: JoinHandlerContext) {
  const perPeer = new PerPeerStreamLimit(MAX_JOIN_STREAMS_PER_PEER)
  return (stream: Stream, connection: Connection): void => {
    const from = connection.remotePeer.toString()
    const release = perPeer.tryAcquire(from)
    if (release == null) { refuseStream(stream, 'join'); return }
    const framed = new FramedStream(stream, { maxFrameBytes: MAX_JOIN_REQUEST_BYTES, maxQueuedFrames: 2 })
    void (async () => {
      try {
        const bytes = await framed.read(ctx.requestTimeoutMs)
        if (bytes == null) return
        const request = JoinRequest.decode(bytes)
        let accepted: Promise<MessageFromLeader> | null = null
        const reply = await ctx.lock.run(async () => {
          const search = ctx.current()
          const rejection = check(ctx, search, request, from)
          if (rejection != null) return rejection
          accepted = new Promise<MessageFromLeader>(resolve => {
            search!.followers.set(from, { peerId: from, info: request.info!, settle: resolve })
          })
          return message(MatchCode.ACCEPTED, '')
        })
        await framed.write(MessageFromLeader.encode(reply))
        if (accepted == null) { await framed.closeWrite(); return }
        ctx.onFollowerJoined()
        // The follower keeps the stream open while it waits; if it leaves first, drop it.
        const left = framed.read().then(() => null, () => null)
        const outcome = await Promise.race([accepted, left])
        if (outcome == null) {
          const search = ctx.current()
          if (search != null && !search.assembled) search.followers.delete(from)
          return
        }
        await framed.write(MessageFromLeader.encode(outcome))
        await framed.closeWrite()
      } catch (err) {
        framed.abort(err instanceof Error ? err : new ProtocolError(describeError(err)))
      } finally {
        release()
      }
    })()
  }
}

function check (ctx: JoinHandlerContext, search: Search | null, request: JoinRequest, from: string): MessageFromLeader | null {
  if (search == null || search.assembled) return message(MatchCode.NOT_LOOKING_FOR_GROUP, 'not looking for a group')
  if (ctx.mode === PeerMode.CLIENT) return message(MatchCode.PROTOCOL_VIOLATION, 'a client-mode peer cannot lead')
  if (request.info == null || !Number.isFinite(request.expiration) || request.schemaHash.byteLength === 0 ||
      !Number.isFinite(request.info.weight) || request.info.weight < 0 || !validRound(request.info.round) ||
      (request.info.bandwidth != null && !(request.info.bandwidth >= 0 && Number.isFinite(request.info.bandwidth))) ||
      request.info.userData.byteLength > 16 * 1024) {
    return message(MatchCode.PROTOCOL_VIOLATION, 'malformed join request')
  }
  if (!equalBytes(request.schemaHash, ctx.schemaHash)) return message(MatchCode.BAD_SCHEMA_HASH, 'tensor schema differs')
  if (request.groupKey !== search.groupKey) return message(MatchCode.BAD_GROUP_KEY, `leader is on ${search.groupKey}`)
  if (search.declaredExpiration == null) return message(MatchCode.NOT_DECLARED, 'leader has not declared yet')
  if (search.declaredExpiration > request.expiration) return message(MatchCode.BAD_EXPIRATION_TIME, 'leader expires after the follower')
  if (search.currentLeader != null) return { ...message(MatchCode.NOT_A_LEADER, 'leader follows another peer'), suggestedLeader: peerIdToBytes(search.currentLeader) as Uint8Array<ArrayBuffer> }
  if (from === ctx.selfId || search.followers.has(from)) return message(MatchCode.DUPLICATE_PEER_ID, 'peer already in the group')
  if (search.followers.size + 1 >= ctx.targetGroupSize) return message(MatchCode.GROUP_IS_FULL, 'group is full')
  return null
}

function message (code: MatchCode, reason: string): MessageFromLeader {
  return { code, groupId: new Uint8Array(0), orderedPeerIds: [], gathered: [], suggestedLeader: new Uint8Array(0), reason }
}

function equalBytes (a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false
  return true
}
