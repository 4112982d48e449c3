import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { SwarmNode } from '../net/node.js'
import { JoinConfirm, JoinRequest, MatchCode, MessageFromLeader, PeerMode } from '../proto/averaging.js'
import { atOwnAddress, openFramed, peerIdFromBytes, rememberAddrs } from '../net/rpc.js'
import type { FramedStream } from '../net/framed-stream.js'
import { MatchmakingError, describeError } from '../errors.js'
import type { Mutex } from '../util/mutex.js'
import { ConnectingError, connectPatiently } from '../rendezvous/connect.js'
import type { Search } from './search.js'
import { listedPeers } from './leader-message.js'
import type { ArrivalClock } from './arrivals.js'
import type { Liveness } from './liveness.js'
import type { MatchmakerConfig } from './matchmaker.js'
import { joinProtocol, MAX_LEADER_MESSAGE_BYTES } from './join-protocol.js'
import { MAX_GROUP_SIZE, type GroupInfo } from './group-info.js'
import { acceptsPartial, followRedirect, redirectKey, reverseKey, sharedArrivals, silentUntil, triedKey, validInfo } from './decisions.js'

const MAX_REDIRECTS = 8

/** What the follower side shares with the matchmaker that runs the search. */
export interface FollowerSideContext {
  readonly node: SwarmNode
  readonly config: MatchmakerConfig
  readonly selfId: string
  /** The matchmaker's lock: a join request of ours and our answers to others' are not interleaved. */
  readonly lock: Mutex
  readonly arrivals: ArrivalClock
  readonly liveness: Liveness
  now (): number
  /** The mode our searches run in (Matchmaker.mode: a client may become a node between searches). */
  mode (): PeerMode
  /** Something the search loop waits on changed (Matchmaker's wakeup). */
  notify (): void
  /** Moves the search under the leftover key (Matchmaker.moveToLeftovers). */
  moveToLeftovers (search: Search, why: string): Promise<void>
  /** Seconds since our last search ended in a group (0: none yet): JoinRequest.averaged_ago. */
  averagedAgo (): number
}

/**
 * The follower side of matchmaking: asks a leader to lead us (one that ranks above us, or, to mend
 * lopsided views, one below: askBelow), waits for its group while checking it is alive, and follows
 * where it sends us. The leader side is join-handler.ts; the search that picks whom to ask, matchmaker.ts.
 */
export class FollowerSide {
  private readonly node: SwarmNode
  private readonly config: MatchmakerConfig
  private readonly selfId: string
  private readonly lock: Mutex
  private readonly arrivals: ArrivalClock
  private readonly liveness: Liveness
  private readonly now: () => number
  private readonly mode: () => PeerMode
  private readonly notify: () => void
  private readonly moveToLeftovers: (search: Search, why: string) => Promise<void>
  private readonly averagedAgo: () => number

  constructor (ctx: FollowerSideContext) {
    this.node = ctx.node
    this.config = ctx.config
    this.selfId = ctx.selfId
    this.lock = ctx.lock
    this.arrivals = ctx.arrivals
    this.liveness = ctx.liveness
    this.now = () => ctx.now()
    this.mode = () => ctx.mode()
    this.notify = () => { ctx.notify() }
    this.moveToLeftovers = async (search, why) => { await ctx.moveToLeftovers(search, why) }
    this.averagedAgo = () => ctx.averagedAgo()
  }

  /**
   * Asks a leader, and if accepted waits for its group; follows where it sends us (a
   * busy leader's own leader, a disbanding leader's new one), at most MAX_REDIRECTS times.
   */
  async followLeader (search: Search, leaderId: string, leaderExpiration: number, addrs: readonly Uint8Array[], below = false): Promise<GroupInfo | null> {
    let next: { leaderId: string, addrs: readonly Uint8Array[] } = { leaderId, addrs }
    for (let redirects = 0; redirects <= MAX_REDIRECTS && !search.assembled; redirects++) {
      const outcome = below && redirects === 0
        ? await this.askBelow(search, next.leaderId, leaderExpiration, next.addrs, true)
        : await this.askLeader(search, next.leaderId, leaderExpiration, next.addrs)
      if (outcome == null) return null
      if ('group' in outcome) return outcome.group
      next = { leaderId: outcome.redirect, addrs: [] }
    }
    return null
  }

  /** One leader asked: its group, where it sends us next, or null (refused, failed, nothing to follow). */
  private async askLeader (search: Search, leaderId: string, leaderExpiration: number, addrs: readonly Uint8Array[]): Promise<{ group: GroupInfo } | { redirect: string } | null> {
    let leader: PeerId
    try { leader = peerIdFromString(leaderId) } catch { return null }
    if (!await this.reachable(leader, leaderId, addrs)) return null
    const requestMs = this.config.requestTimeout * 1000
    // Connect before taking the lock: a handshake slowed by load neither holds up the join
    // requests others send us meanwhile nor is thrown away at our request timeout.
    try {
      await connectPatiently(this.node, leader, requestMs)
    } catch (err) {
      search.rejections.push(describeError(err))
      this.config.log?.debug(`asking ${leaderId.slice(-6)} failed: ${describeError(err)}`)
      // Still connecting is no answer from the leader: ask it again once connected (whether we
      // came to it as a candidate or by a redirect).
      if (err instanceof ConnectingError) {
        search.tried.delete(triedKey(leaderId, leaderExpiration))
        search.tried.delete(reverseKey(leaderId, leaderExpiration))
        search.tried.delete(redirectKey(leaderId))
      }
      return null
    }
    const ask = await this.lock.run(async () => {
      if (search.assembled || search.currentLeader != null) return null
      // From here until its answer, our own expiration waits (Search.assembleIfEnough says why).
      search.beginAsk()
      const expiration = this.mode() === PeerMode.CLIENT
        ? Math.max(search.deadline, this.now() + this.config.averagingExpiration)
        : search.declaredExpiration ?? Infinity
      const openedAt = Date.now()
      let opened = false
      // While we wait for its answer, a leader that does not answer liveness checks within a request
      // timeout is gone (frozen, cut off): we stop waiting, and stop asking it in this search.
      const watch = new AbortController()
      let framed: FramedStream | undefined
      try {
        framed = await openFramed(this.node, leader, joinProtocol(this.config.prefix), {
          timeoutMs: requestMs, maxFrameBytes: MAX_LEADER_MESSAGE_BYTES, maxQueuedFrames: 2
        })
        opened = true
        const bringing = search.followers.size
        await framed.write(this.joinRequest(search, expiration))
        // Wait for the answer as long as the leader may still assemble with us (its expiration plus
        // one request timeout, as for its second message): a follower that gave up after a bare
        // request timeout while its ACCEPTED was under way was counted by the leader and listed in a
        // group it never ran in (16 peers on two busy cores: groups of 4 listing 3 such ghosts).
        const answerMs = Math.max(requestMs, (leaderExpiration - this.now()) * 1000 + requestMs)
        const first = await Promise.race([framed.read(answerMs), this.liveness.gone(leader, requestMs, watch.signal)])
        if (first === 'gone') {
          this.markSilent(search, leaderId, leaderExpiration)
          await framed.closeWrite()
          return null
        }
        const reply = first != null ? MessageFromLeader.decode(first) : null
        if (reply != null) this.liveness.silences.noteAlive(leaderId, this.now())
        if (reply?.code !== MatchCode.ACCEPTED) {
          search.rejections.push(describeReply(reply))
          search.noteRefusal(reply, this.now(), this.config.targetGroupSize, leaderId)
          this.config.log?.debug(`${leaderId.slice(-6)} refused: ${search.rejections[search.rejections.length - 1]}`)
          await framed.closeWrite()
          // Unlike hivemind (which ignores the hint), follow a busy leader's own leader: chains merge in one hop.
          if (reply?.code === MatchCode.NOT_A_LEADER && reply.suggestedLeader.byteLength > 0) return { redirect: peerIdFromBytes(reply.suggestedLeader).toString() }
          return null
        }
        // Our own group assembled while we waited (our expiration waits for this answer only half a
        // request timeout: assembleOnExpiry): leave, so this leader drops us.
        if (search.assembled) {
          this.config.log?.debug(`${leaderId.slice(-6)} accepted us after our own group assembled: leaving it`)
          await framed.closeWrite()
          return null
        }
        search.currentLeader = leaderId
        this.leaveFollowers(search, leaderId, bringing, reply)
        await this.confirm(search, framed, reply)
        return framed
      } catch (err) {
        // Given up (no answer in time, a broken stream): the stream is reset, so that a leader slow
        // to answer does not count us when it accepts after all (left open, its ACCEPTED went
        // through and it listed us in a group we never ran in).
        framed?.abort(err instanceof Error ? err : new MatchmakingError(describeError(err)))
        search.rejections.push(describeError(err))
        this.config.log?.debug(`asking ${leaderId.slice(-6)} failed: ${describeError(err)}`)
        // Connected, yet no stream to it opened within a request timeout: the leader did not
        // answer (a frozen process never completes the protocol negotiation).
        if (!opened && Date.now() - openedAt >= requestMs) this.markSilent(search, leaderId, leaderExpiration)
        return null
      } finally {
        watch.abort()
        if (search.endAsk(this.config.minGroupSize) != null) this.notify()
      }
    })
    if (ask == null) return null
    if ('redirect' in ask) {
      if (!followRedirect(ask.redirect, this.selfId, search.tried, search.silent, this.now())) return null
      search.tried.add(redirectKey(ask.redirect))
      return ask
    }
    return await this.awaitGroup(search, leader, leaderId, leaderExpiration, ask)
  }

  /**
   * Asks a peer that ranks below us (decisions.ts reverseCandidate) to lead us, and when it names
   * the leader it follows (`follow`), asks that one the same way: without holding our lock while the
   * answer comes. Ranks do not order these asks, so that peer may be asking us at the same moment,
   * and with both locks held neither could answer the other until a timeout (a frozen-leader test:
   * 20 s). Each answer comes within a request timeout or not at all (no verdict: it may be busy
   * asking someone itself). A worse-ranked leader refuses us and learns of us (heardEntry), so it
   * asks us in turn; a leader that accepts us is followed if we are still free to follow.
   */
  private async askBelow (search: Search, leaderId: string, leaderExpiration: number, addrs: readonly Uint8Array[], follow: boolean): Promise<{ group: GroupInfo } | { redirect: string } | null> {
    let leader: PeerId
    try { leader = peerIdFromString(leaderId) } catch { return null }
    if (!await this.reachable(leader, leaderId, addrs)) return null
    const requestMs = this.config.requestTimeout * 1000
    let framed: FramedStream | undefined
    let reply: MessageFromLeader | null = null
    let bringing = 0
    // Our expiration waits for the answer, as for any ask (Search.assembleIfEnough).
    search.beginAsk()
    try {
      await connectPatiently(this.node, leader, requestMs)
      framed = await openFramed(this.node, leader, joinProtocol(this.config.prefix), { timeoutMs: requestMs, maxFrameBytes: MAX_LEADER_MESSAGE_BYTES, maxQueuedFrames: 2 })
      bringing = search.followers.size
      await framed.write(this.joinRequest(search, search.declaredExpiration ?? Infinity))
      const first = await framed.read(requestMs)
      reply = first != null ? MessageFromLeader.decode(first) : null
    } catch (err) {
      search.rejections.push(describeError(err))
      this.config.log?.debug(`asking ${leaderId.slice(-6)} (below us) failed: ${describeError(err)}`)
      framed?.abort(err instanceof Error ? err : new MatchmakingError(describeError(err)))
      return null
    } finally {
      if (search.endAsk(this.config.minGroupSize) != null) this.notify()
    }
    if (reply?.code === MatchCode.ACCEPTED) {
      const free = await this.lock.run(async () => {
        if (search.assembled || search.currentLeader != null) return false
        search.currentLeader = leaderId
        this.leaveFollowers(search, leaderId, bringing, reply!)
        try {
          await this.confirm(search, framed!, reply!)
        } catch (err) {
          this.config.log?.debug(`could not confirm ${leaderId.slice(-6)}'s ACCEPTED: ${describeError(err)}`)
          search.rejections.push(describeError(err))
          return null
        }
        return true
      })
      if (free == null) { framed.abort(new MatchmakingError('could not confirm the ACCEPTED')); return null }
      // Taken meanwhile (our own group, another leader): leaving closes the stream, and the leader drops us.
      if (!free) {
        this.config.log?.debug(`${leaderId.slice(-6)} (below us) accepted us after we took another group or leader: leaving it`)
        await framed.closeWrite().catch(() => {})
        return null
      }
      return await this.awaitGroup(search, leader, leaderId, leaderExpiration, framed)
    }
    search.rejections.push(describeReply(reply))
    search.noteRefusal(reply, this.now(), this.config.targetGroupSize, leaderId)
    this.config.log?.debug(`${leaderId.slice(-6)} (below us) refused: ${search.rejections[search.rejections.length - 1]}`)
    await framed.closeWrite().catch(() => {})
    if (!follow || reply?.code !== MatchCode.BAD_EXPIRATION_TIME || reply.suggestedLeader.byteLength === 0) return null
    let next: string
    try { next = peerIdFromBytes(reply.suggestedLeader).toString() } catch { return null }
    if (!followRedirect(next, this.selfId, search.tried, search.silent, this.now())) return null
    search.tried.add(redirectKey(next))
    this.config.log?.debug(`${leaderId.slice(-6)} follows ${next.slice(-6)}: asking it`)
    return await this.askBelow(search, next, leaderExpiration, [], false)
  }

  /** Accepted by `leader` (`ask` its open join stream): waits for its group, as long as it may assemble with us. */
  private async awaitGroup (search: Search, leader: PeerId, leaderId: string, leaderExpiration: number, ask: FramedStream): Promise<{ group: GroupInfo } | { redirect: string } | null> {
    const requestMs = this.config.requestTimeout * 1000
    // Accepted: while we wait for the group, a leader that stops answering liveness checks for a request
    // timeout (frozen, cut off) is left at once, not at its expiration plus a request timeout
    // (chaos runs: followers of a leader frozen with SIGSTOP lost ~4.6 s per freeze). A live
    // leader answers them on its event loop whatever it waits on (its lock, slow replicas), so a
    // healthy leader that is merely slow to assemble keeps its followers. Should a leader stalled
    // past a request timeout wake and assemble with us after we left, its all-reduce cuts us off
    // as it does any member that does not come (the same race as at the expiration bound).
    const watch = new AbortController()
    try {
      const myExpiration = this.mode() === PeerMode.CLIENT ? leaderExpiration : (search.declaredExpiration ?? leaderExpiration)
      const waitMs = Math.max(0, (Math.max(myExpiration, leaderExpiration) - this.now()) * 1000) + requestMs
      const second = await Promise.race([ask.read(waitMs), this.liveness.gone(leader, requestMs, watch.signal)])
      if (second === 'gone') {
        this.markSilent(search, leaderId, leaderExpiration)
        return null
      }
      if (second == null) { search.rejections.push('leader closed the stream'); return null }
      const reply = MessageFromLeader.decode(second, { limits: { arrivalDelays: MAX_GROUP_SIZE } })
      if (reply.code === MatchCode.BEGIN_ALLREDUCE) {
        const group = this.parseGroup(reply, leaderId)
        if (group == null) return null
        // Our leader's arrivals are the swarm's too: a peer that rarely leads still learns when followers come.
        for (const seconds of sharedArrivals(reply.arrivalDelays, group.peerIds.length, this.config.averagingExpiration)) this.arrivals.record(seconds)
        return { group }
      }
      search.rejections.push(describeReply(reply))
      // Our leader joined a group with no room for us (Search.disband): we are one too many under our key.
      search.noteRefusal(reply, this.now(), this.config.targetGroupSize)
      if (reply.code === MatchCode.GROUP_DISBANDED && reply.suggestedLeader.byteLength > 0) {
        const next = peerIdFromBytes(reply.suggestedLeader).toString()
        if (next === this.selfId) return null
        // Our leader took us under the leftover key and joined a leader there: we ask that one there.
        // (Asked under our own key, it refused us, BAD_GROUP_KEY, and we sat out the step: 64 peers.)
        if (reply.leaderKey !== search.groupKey && reply.leaderKey === search.leftoverKey) {
          await this.moveToLeftovers(search, `our leader ${leaderId.slice(-6)} joined a group under the leftover key`)
        }
        return { redirect: next }
      }
      return null
    } catch (err) {
      search.rejections.push(describeError(err))
      this.config.log?.debug(`stopped waiting for ${leaderId.slice(-6)}'s group: ${describeError(err)}`)
      return null
    } finally {
      watch.abort()
      search.currentLeader = null
      await ask.closeWrite()
    }
  }

  /**
   * Before asking a peer we are not connected to: its announced addresses go to the peer store; false
   * when they are our own (our previous process, announced before we restarted), which is not asked.
   */
  private async reachable (leader: PeerId, leaderId: string, addrs: readonly Uint8Array[]): Promise<boolean> {
    if (addrs.length === 0 || this.node.getConnections(leader).length > 0) return true
    if (atOwnAddress(this.node, addrs)) {
      this.config.log?.debug(`not asking ${leaderId.slice(-6)}: it was announced at our own address (our previous process)`)
      return false
    }
    await rememberAddrs(this.node, leader, addrs).catch(() => {})
    return true
  }

  /**
   * We follow the leader that accepted us (currentLeader set, our followers sent on): we say so where
   * it asks (confirm_wanted), and it counts us only then. Should the write fail, we follow nobody.
   */
  private async confirm (search: Search, framed: FramedStream, reply: MessageFromLeader): Promise<void> {
    if (!reply.confirmWanted) return
    try {
      await framed.write(JoinConfirm.encode({ following: true }))
    } catch (err) {
      search.currentLeader = null
      throw err
    }
  }

  /** Our join request to a leader, under our current key, with this expiration. */
  private joinRequest (search: Search, expiration: number): Uint8Array {
    return JoinRequest.encode({
      schemaHash: (search.schemaHash ?? this.config.schemaHash) as Uint8Array<ArrayBuffer>,
      expiration,
      groupKey: search.groupKey,
      info: search.info,
      bringing: search.followers.size,
      acceptsPartial: acceptsPartial(search),
      averagedAgo: this.averagedAgo(),
      confirms: true
    })
  }

  /**
   * Accepted by `leaderId`, having told it we bring `bringing` followers: they go on to it, but for the
   * `noRoom` it has no room for, and any that joined us since (askBelow holds no lock), sent away.
   */
  private leaveFollowers (search: Search, leaderId: string, bringing: number, accepted: MessageFromLeader): void {
    const noRoom = accepted.noRoomFor
    const away = noRoom > 0 ? noRoom + Math.max(0, search.followers.size - bringing) : 0
    if (away > 0) this.config.log?.debug(`${leaderId.slice(-6)} took us with ${Math.max(0, search.followers.size - away)} of our ${search.followers.size} follower(s): no room for the rest, sent away`)
    search.disband(leaderId, 'our leader joined another group', away, away > 0 ? listedPeers(accepted.orderedPeerIds, this.config.targetGroupSize) : [])
  }

  private parseGroup (reply: MessageFromLeader, leader: string): GroupInfo | null {
    const n = reply.orderedPeerIds.length
    if (n < 2 || n > MAX_GROUP_SIZE || reply.gathered.length !== n || reply.groupId.byteLength !== 20) return null
    const peerIds = reply.orderedPeerIds.map(b => peerIdFromBytes(b).toString())
    if (new Set(peerIds).size !== n) return null
    const myIndex = peerIds.indexOf(this.selfId)
    if (myIndex < 0 || !peerIds.includes(leader)) return null
    // A hostile leader's NaN or negative weight or bandwidth would poison every member's plan.
    if (!reply.gathered.every(validInfo)) return null
    return { groupId: reply.groupId, peerIds, infos: reply.gathered, myIndex, leader, ...(reply.gridKey !== '' ? { gridKey: reply.gridKey } : {}) }
  }

  /** A leader we asked or followed did not answer within a request timeout: not asked again (nor followed there by a redirect) while it counts as gone. */
  private markSilent (search: Search, leaderId: string, leaderExpiration: number): void {
    search.silent.set(leaderId, silentUntil(this.now(), leaderExpiration, this.config.averagingExpiration))
    this.liveness.silences.noteSilent(leaderId, this.now())
    search.rejections.push('leader stopped answering')
    this.config.log?.debug(`leader ${leaderId.slice(-6)} did not answer within ${this.config.requestTimeout} s: not asked again until ${search.silent.get(leaderId)!.toFixed(3)}`)
  }
}

/** A leader's refusal as the step error names it: its code and reason, or that none came. */
function describeReply (reply: MessageFromLeader | null): string {
  return reply != null ? `${reply.code}${reply.reason !== '' ? ` (${reply.reason})` : ''}` : 'no answer'
}
