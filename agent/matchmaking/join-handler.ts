import type { Connection, Stream } from '@libp2p/interface'
import { JoinConfirm, JoinRequest, MatchCode, MessageFromLeader, type PeerMode } from '../proto/averaging.js'
import { FramedStream } from '../net/framed-stream.js'
import { ProtocolError, describeError } from '../errors.js'
import { MAX_JOIN_REQUEST_BYTES, MAX_JOIN_STREAMS_PER_PEER } from './join-protocol.js'
import { PerPeerStreamLimit, peerIdToBytes, refuseStream } from '../net/rpc.js'
import type { Follower, Search } from './search.js'
import { groupFull, nextWave, noRoomFor, reasonToReject, type Rejection } from './decisions.js'
import { leaderMessage } from './leader-message.js'
import type { Mutex } from '../util/mutex.js'
import type { Log } from '../log.js'

export interface JoinHandlerContext {
  readonly selfId: string
  readonly mode: PeerMode
  readonly schemaHash: Uint8Array
  readonly targetGroupSize: number
  readonly requestTimeoutMs: number
  readonly lock: Mutex
  /** The search under way, if any. */
  current (): Search | null
  /** Seconds since we stopped looking (our last search ended or assembled; 0: just now). */
  stoppedLooking (): number
  /** Called after a follower joined (confirmed, where it confirms), so the search loop can react (assemble when full). */
  onFollowerJoined (): void
  /** Called after a follower we accepted left or never confirmed, so that an expiration waiting for it goes on. */
  onFollowerLeft (): void
  /** A peer asked to join while we were not looking (its group key): one that came too late. */
  onTurnedAway (groupKey: string): void
  /** A peer under our key that ranks above us asked us to lead it (refused: BAD_EXPIRATION_TIME): we ask it in turn. */
  onOutranked (peerId: string, expiration: number): void
  /** A peer asked and our group had no room for it and its followers (GROUP_IS_FULL, noted in Search.noRoom): an early assembly need not wait for it. */
  onNoRoom (): void
  /** Members (us included) a leader needs before it turns the key's next wave away (decisions.ts earlyQuorum, nextWave). */
  readonly quorum: number
  /** We turned an asker away as the key's next wave (NEXT_WAVE, noted in Search.otherWave and nextWaveAt): our quorum may go now. */
  onNextWave (): void
  now (): number
  readonly log?: Log
}

/**
 * Leader side of matchmaking: checks a join request (reasonToReject: hivemind's order, first
 * failing check wins), accepts, then holds the stream open until the group assembles or disbands.
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
        let joined: Search | null = null
        let follower: Follower | null = null
        const reply = await ctx.lock.run(async () => {
          const search = ctx.current()
          const rejection = reasonToReject(ctx, search, request, from) ?? laterWave(ctx, search!, request, from)
          if (rejection != null) {
            if (rejection.code === MatchCode.NOT_LOOKING_FOR_GROUP) ctx.onTurnedAway(request.groupKey)
            if (rejection.code === MatchCode.BAD_EXPIRATION_TIME) ctx.onOutranked(from, request.expiration)
            const reply = leaderMessage(rejection.code, rejection.reason)
            // A full group names its members, so that an asker one too many under our key knows they are
            // not coming, whatever its view still shows (decisions.ts withoutGrouped).
            if (rejection.code === MatchCode.GROUP_IS_FULL && search != null) {
              if (groupFull(search.followers.size, ctx.targetGroupSize)) reply.orderedPeerIds = memberIds(ctx, search)
              search.noteNoRoom(from, ctx.targetGroupSize)
              ctx.onNoRoom()
            }
            // When we stopped looking, so that the asker tells whether our group formed without it or before it came (decisions.ts formedWithoutUs).
            if (rejection.code === MatchCode.NOT_LOOKING_FOR_GROUP) reply.stoppedLooking = Math.max(STOPPED_LOOKING_MIN, ctx.stoppedLooking())
            // The wave that turned it away names its members: their group forming without it says nothing of its own wave.
            if (rejection.code === MatchCode.NEXT_WAVE && search != null) {
              reply.orderedPeerIds = memberIds(ctx, search)
              search.noteOtherWave(from, ctx.targetGroupSize)
              search.nextWaveAt ??= ctx.now()
              ctx.log?.debug(`${from.slice(-6)} averaged ${request.averagedAgo.toFixed(2)} s ago, since we began looking: turned away as ${search.groupKey}'s next wave; our ${search.followers.size + 1} go without it`)
              ctx.onNextWave()
            }
            return rejection.suggestedLeader != null ? { ...reply, suggestedLeader: peerIdToBytes(rejection.suggestedLeader) as Uint8Array<ArrayBuffer> } : reply
          }
          joined = search
          // Room for the asker, not for all it brings: it sends the rest away (decisions.ts noRoomFor).
          const away = noRoomFor(search!.followers.size, request.bringing, ctx.targetGroupSize)
          accepted = new Promise<MessageFromLeader>(resolve => {
            // An asker that confirms holds its place from now, and is a member once it confirms.
            follower = { peerId: from, info: request.info!, joinedAfter: search!.declaredAt != null ? ctx.now() - search!.declaredAt : undefined, settle: resolve, confirmed: !request.confirms }
            search!.followers.set(from, follower)
          })
          // The followers it brings are sent on to us now; each asks us within a request timeout
          // (its old key's withdrawal runs beside the ask): two are slack on a busy machine.
          search!.expectBrought(request.bringing - away, ctx.now() + 2 * ctx.requestTimeoutMs / 1000)
          // Full with it: the members too, which the asker passes to those it sends away (Search.disband).
          return leaderMessage(MatchCode.ACCEPTED, '', { noRoomFor: away, confirmWanted: request.confirms, orderedPeerIds: away > 0 ? memberIds(ctx, search!) : [] })
        })
        try {
          await framed.write(MessageFromLeader.encode(reply))
        } catch (err) {
          // The asker gave up before our ACCEPTED reached it (it resets the stream): not a follower.
          const search = joined as Search | null
          if (search != null && follower != null) search.dropFollower(from, follower)
          ctx.onFollowerLeft()
          throw err
        }
        if (accepted == null) { await framed.closeWrite(); return }
        const search = joined as Search | null
        const entry = follower as Follower | null
        if (search != null && entry != null && !entry.confirmed) {
          // Counted only once it confirms: an asker that went elsewhere while our ACCEPTED was on its
          // way sends none (it closes the stream), and one that says nothing within a request timeout
          // is not waited for (our expiration waits for confirmations: Search.assembleIfEnough).
          let following = false
          try {
            const confirm = await framed.read(ctx.requestTimeoutMs)
            following = confirm != null && JoinConfirm.decode(confirm).following
          } catch {}
          if (!following) {
            search.dropFollower(from, entry)
            ctx.onFollowerLeft()
            ctx.log?.debug(`${from.slice(-6)} did not confirm our ACCEPTED: not a follower`)
            framed.abort(new ProtocolError('no confirmation of our ACCEPTED'))
            return
          }
          if (search.confirmFollower(from, entry)) ctx.onFollowerJoined()
        } else {
          ctx.onFollowerJoined()
        }
        // The follower keeps the stream open while it waits; if it leaves first, drop it.
        const left = framed.read().then(() => null, () => null)
        const outcome = await Promise.race([accepted, left])
        if (outcome == null) {
          if (search != null && entry != null && !search.assembled) {
            search.dropFollower(from, entry)
            ctx.onFollowerLeft()
          // Left after our group took it (its BEGIN_ALLREDUCE may be on the way): listed, it will not come.
          } else ctx.log?.debug(`follower ${from.slice(-6)} left after we assembled: it is listed in our group`)
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

/** NEXT_WAVE for an asker that laps our quorum (decisions.ts nextWave), else null: accepted. */
function laterWave (ctx: JoinHandlerContext, search: Search, request: JoinRequest, from: string): Rejection | null {
  if (!nextWave(search, ctx.quorum, request.averagedAgo, ctx.now())) return null
  return { code: MatchCode.NEXT_WAVE, reason: `asker averaged since we began looking: it is ${search.groupKey}'s next wave (${from.slice(-6)})` }
}

/** The least stopped_looking said: 0 on the wire means "not said" (agents before it). */
const STOPPED_LOOKING_MIN = 0.001

/** Our group's members (us and our followers) as a full group's messages list them (MessageFromLeader.ordered_peer_ids). */
function memberIds (ctx: JoinHandlerContext, search: Search): Array<Uint8Array<ArrayBuffer>> {
  return [ctx.selfId, ...search.followers.keys()].map(id => peerIdToBytes(id) as Uint8Array<ArrayBuffer>)
}
