import { randomBytes } from 'node:crypto'
import { MatchCode, type MessageFromLeader, type PeerInfo } from '../proto/averaging.js'
import { leaderMessage, listedPeers } from './leader-message.js'
import { peerIdToBytes } from '../net/rpc.js'
import { shuffle } from '../util/random.js'
import type { GroupInfo } from './group-info.js'
import type { StoredEntry } from '../rendezvous/store.js'
import { enoughToAssemble, formedWithoutUs, groupFull } from './decisions.js'

export interface Follower {
  readonly peerId: string
  readonly info: PeerInfo
  /** Seconds after our declaration at which it joined (none when it joined before we declared). */
  readonly joinedAfter?: number
  /** Delivers the leader's second message: BEGIN_ALLREDUCE or GROUP_DISBANDED. */
  readonly settle: (message: MessageFromLeader) => void
  /**
   * It confirmed our ACCEPTED (JoinConfirm), or asked as an agent that does not confirm: a member of
   * our group. Until then it holds a place (room, ranking) but is never listed: assemble() sends it away.
   */
  confirmed: boolean
}

/**
 * The state of one group search: our declaration, the followers we lead, the leader we follow.
 * A peer is a leader (followers, no leader) or a follower (a leader, no followers), never both,
 * so it can never end up in two groups.
 */
export class Search {
  declaredExpiration: number | null = null
  /** When the current declaration began: followers' arrival delays count from it. */
  declaredAt: number | null = null
  /**
   * When the current declaration was stored (its replicas answered): nobody saw it before. Under load
   * that can be most of the declaration, or past it (null: not stored, or the store failed).
   */
  storedAt: number | null = null
  /** When our first declaration under the current key was stored (seconds; null: none yet): from then on others could see us there (decisions.ts formedWithoutUs). */
  visibleSince: number | null = null
  /**
   * Seconds our earlier declarations under the current key could be seen (from storedAt to their
   * end), each ending with nobody come: evidence of being alone there that adds up (decisions.ts
   * aloneUnderKey). Zero again under a new key.
   */
  aloneSeconds = 0
  currentLeader: string | null = null
  readonly followers = new Map<string, Follower>()
  readonly tried = new Set<string>()
  /** Peers that did not answer us within a request timeout, until when they count as gone (decisions.ts SilentPeers). */
  readonly silent = new Map<string, number>()
  /** `${peerId}@${expiration}` of the declarations whose peer we probed before assembling without it. */
  readonly probed = new Set<string>()
  readonly rejections: string[] = []
  /** Declarations the replicas we read do not show, by peer id: better-ranked askers we refused (decisions.ts heardEntry), peers a wide look found (Matchmaker.widenIfShort). */
  readonly heard = new Map<string, StoredEntry>()
  /** When each declaration (triedKey) was first seen looking: worse-ranked peers get a while to ask us (decisions.ts reverseCandidate). */
  readonly seenSince = new Map<string, number>()
  /** Refusals under the current key saying a group formed or filled without us (decisions.ts extraUnderKey). */
  turnedAway = 0
  /** Peers seen looking under the current key once we had been visible there a while (decisions.ts extraUnderKey, seenAfterVisible). */
  readonly seenLooking = new Set<string>()
  /** Peers a full group under the current key listed when it turned us away, and when (decisions.ts withoutGrouped). */
  readonly grouped = new Map<string, number>()
  /**
   * Peers under the current key that, with the followers they lead, do not fit in one group with
   * ours: refused by us as full (join-handler.ts), or refusing us so (GROUP_IS_FULL). Groups only
   * grow while they look, so neither joins the other this time: the early assembly does not wait
   * for them (decisions.ts missingPeers).
   */
  readonly noRoom = new Set<string>()
  /**
   * Peers of another wave under the current key (decisions.ts nextWave): askers we turned away as the
   * next wave, and the group that turned us away as its next. Neither is waited for (missingPeers),
   * and their group forming without us is no sign we are one too many (extraUnderKey).
   */
  readonly otherWave = new Set<string>()
  /** When we first turned away an asker of the key's next wave (null: none): our quorum goes at once (decisions.ts earlyAfter). */
  nextWaveAt: number | null = null
  /** When this search began (seconds): an asker whose group formed after it laps us (decisions.ts nextWave). */
  startedAt = -Infinity
  /** The declaration (its expiration) we repeated with a wide exchange (Matchmaker.widenIfShort), and when we last did. */
  widened: number | null = null
  widenedAt = -Infinity
  /** Our looks for extras under the leftover key (decisions.ts shortUnderKey): in which declaration (its expiration), how many, and until when the first holds our early assembly (extraGrace). */
  extraLooks: { expiration: number | null, count: number, graceEnds: number } = { expiration: null, count: 0, graceEnds: -Infinity }
  /**
   * The extras under the leftover key we took our group there for (Matchmaker.takeGroupToExtras): seen
   * looking just then, so a silence of theirs from before is not carried (Matchmaker.carrySilences); a
   * probe decides, as for any peer we wait for.
   */
  readonly cameFor = new Set<string>()
  /** The Moshpit key we led our group from before taking it to the leftover key: its members' next bits come from it. */
  gridKey: string | undefined
  /** The Moshpit key this search began under (groupKey moves to the leftover key and may come back). */
  readonly homeKey: string
  /** When we last looked under homeKey from the leftover key for peers that came there since (Matchmaker.peekHome). */
  peekedHomeAt = -Infinity
  /** Took our short group to the leftover key to meet others (decisions.ts meetUnderLeftovers): not assembled early before this (seconds). */
  holdUntil = -Infinity
  /** How long our last declaration took to be stored (seconds). */
  storeSeconds = 0
  /** What last kept this search's early assembly back (Matchmaker.assembleShort), for the log when it assembles at its expiration instead. */
  earlyHeldBy: string | undefined
  /** The group size the followers we accepted promised with the followers they bring (JoinRequest.bringing), and until when we wait for those (seconds). */
  private broughtSize = 0
  private broughtUntil = -Infinity
  /** Assembles at our declared expiration, whatever the search loop is waiting on then. */
  expiryTimer: NodeJS.Timeout | undefined
  /** The expiry timer of the current declaration has not run yet: the search loop leaves the assembly at the expiration to it (Matchmaker.assembleOnExpiry). */
  expiryPending = false
  /** A join request of ours is out to a better-ranked leader, not yet answered (beginAsk, endAsk). */
  private asking = false
  /** Our expiration came while asking, or while followers we accepted had not yet confirmed: we assemble, if still leading, once those answers are in. */
  private expiryWaiting = false
  private outcome: GroupInfo | null = null
  private finish!: (group: GroupInfo) => void
  readonly done: Promise<GroupInfo>

  constructor (
    readonly selfId: string,
    /** The key we declare under: our Moshpit key, or the swarm's leftover key once we were alone under it. */
    public groupKey: string,
    readonly info: PeerInfo,
    readonly deadline: number,
    /** Where a peer left alone under its key looks next (none: it stays). */
    readonly leftoverKey?: string,
    /** The schema of a round over a subset of the tensors (none: the matchmaker's, all tensors). */
    readonly schemaHash?: Uint8Array
  ) {
    this.homeKey = groupKey
    this.done = new Promise(resolve => { this.finish = resolve })
  }

  /**
   * Looks under `key` from now on (the leftover key, or home again): what we learned of the old key's
   * peers (who we asked, heard, were refused by, saw looking, how long we were visible or alone there)
   * says nothing about the new one.
   */
  enterKey (key: string): void {
    this.groupKey = key
    this.tried.clear()
    this.heard.clear()
    this.turnedAway = 0
    this.seenLooking.clear()
    this.grouped.clear()
    this.noRoom.clear()
    this.otherWave.clear()
    this.nextWaveAt = null
    this.cameFor.clear()
    this.visibleSince = null
    this.aloneSeconds = 0
  }

  /**
   * A refusal from a peer under our key: counted when it says a group formed or filled without us
   * (decisions.ts formedWithoutUs), and the members a full group lists kept (at most `maxListed` a
   * refusal, and a few full groups' worth in all: a hostile leader's list cannot grow it unbounded).
   */
  noteRefusal (reply: { readonly code: MatchCode, readonly stoppedLooking?: number, readonly orderedPeerIds?: readonly Uint8Array[] } | null, now: number, maxListed: number, from?: string): void {
    if (reply?.code === MatchCode.GROUP_IS_FULL && from !== undefined) this.noteNoRoom(from, maxListed)
    if (reply?.code === MatchCode.NEXT_WAVE) {
      for (const id of [...(from !== undefined ? [from] : []), ...listedPeers(reply.orderedPeerIds ?? [], maxListed)]) this.noteOtherWave(id, maxListed)
      return
    }
    if (!formedWithoutUs(reply, now, this.visibleSince)) return
    this.turnedAway++
    if (reply?.code !== MatchCode.GROUP_IS_FULL) return
    for (const id of listedPeers(reply.orderedPeerIds ?? [], maxListed)) {
      if (id !== this.selfId && this.grouped.size < maxListed * 4) this.grouped.set(id, now)
    }
  }

  /** `peerId` is of another wave under the current key (a few full groups' worth kept, as `grouped`). */
  noteOtherWave (peerId: string, maxListed: number): void {
    if (peerId !== this.selfId && (this.otherWave.size < maxListed * 4 || this.otherWave.has(peerId))) this.otherWave.add(peerId)
  }

  /** `peerId` and its followers do not fit in one group with ours under the current key (a few full groups' worth kept, as `grouped`). */
  noteNoRoom (peerId: string, maxListed: number): void {
    if (this.noRoom.size < maxListed * 4 || this.noRoom.has(peerId)) this.noRoom.add(peerId)
  }

  /** No assembly at the current declaration's expiration by the timer (it ended, or a new one follows). */
  cancelExpiry (): void {
    clearTimeout(this.expiryTimer)
    this.expiryPending = false
  }

  get assembled (): boolean { return this.outcome != null }
  get group (): GroupInfo | null { return this.outcome }

  /**
   * Becomes a group of our followers and us; every follower learns the same id, order and metadata.
   * A follower that has not confirmed is not listed (it may have gone elsewhere): it is told the group
   * formed without it. The callers wait for confirmations first (unconfirmed) where they can.
   */
  assemble (): GroupInfo {
    if (this.outcome != null) return this.outcome
    for (const follower of [...this.followers.values()]) {
      if (follower.confirmed) continue
      this.followers.delete(follower.peerId)
      follower.settle(leaderMessage(MatchCode.GROUP_IS_FULL, 'the group assembled before your confirmation came'))
    }
    const members = shuffle([
      ...[...this.followers.values()].map(f => ({ peerId: f.peerId, info: f.info })),
      { peerId: this.selfId, info: this.info }
    ])
    const groupId = randomBytes(20)
    const message = leaderMessage(MatchCode.BEGIN_ALLREDUCE, '', {
      groupId,
      orderedPeerIds: members.map(m => peerIdToBytes(m.peerId)) as Array<Uint8Array<ArrayBuffer>>,
      gathered: members.map(m => m.info),
      arrivalDelays: [...this.followers.values()].flatMap(f => f.joinedAfter !== undefined ? [f.joinedAfter] : []),
      gridKey: this.gridKey ?? ''
    })
    for (const follower of this.followers.values()) follower.settle(message)
    this.followers.clear()
    return this.adopt({
      groupId,
      peerIds: members.map(m => m.peerId),
      infos: members.map(m => m.info),
      myIndex: members.findIndex(m => m.peerId === this.selfId),
      leader: this.selfId,
      ...(this.gridKey !== undefined ? { gridKey: this.gridKey } : {})
    })
  }

  /**
   * We accepted a follower (already in `followers`) that leads `bringing` followers of its own: it
   * sends them on to us, and we wait for them until `until` before assembling early (awaitingBrought).
   */
  expectBrought (bringing: number, until: number): void {
    if (bringing <= 0) return
    this.broughtSize = Math.max(this.broughtSize, this.followers.size + 1 + bringing)
    this.broughtUntil = Math.max(this.broughtUntil, until)
  }

  /**
   * How many of the followers our followers bring have not joined yet, while we still wait for them.
   * Counted, not named: whoever joins takes a promised place (the group grows either way).
   */
  awaitingBrought (now: number): number {
    return now < this.broughtUntil ? Math.max(0, this.broughtSize - this.followers.size - 1) : 0
  }

  /** Followers we accepted that have not confirmed yet (each does, leaves, or is dropped within a request timeout: join-handler.ts). */
  get unconfirmed (): number {
    let n = 0
    for (const follower of this.followers.values()) if (!follower.confirmed) n++
    return n
  }

  /** `peerId` confirmed our ACCEPTED: a member from now on. False when it is no longer ours (sent away, or we assembled without it). */
  confirmFollower (peerId: string, follower: Follower): boolean {
    if (this.assembled || this.followers.get(peerId) !== follower) return false
    follower.confirmed = true
    return true
  }

  /** An accepted follower left, or never confirmed: no longer ours (unless we assembled with it already). */
  dropFollower (peerId: string, follower: Follower): void {
    if (!this.assembled && this.followers.get(peerId) === follower) this.followers.delete(peerId)
  }

  /** A follower joined (confirmed) while we lead: a full group of confirmed followers assembles at once. Returns whether it did. */
  assembleIfFull (targetGroupSize: number): boolean {
    if (this.assembled || this.currentLeader != null || this.unconfirmed > 0 || !groupFull(this.followers.size, targetGroupSize)) return false
    this.assemble()
    return true
  }

  /**
   * At our declared expiration, leading: assemble with enough followers (the group), else nothing
   * happens (null). While a join request of ours awaits its answer, not yet (`expiryWaiting` is
   * then set): that leader may have counted us already, and leaving it for our own group would
   * make us a member it lists but who never comes (256 peers in one busy process: a leader's
   * ACCEPTED reached its asker after the asker's expiration). The answer decides: accepted, we
   * follow and our followers are sent to that leader; refused, endAsk assembles then. Our own
   * followers wait for us only so long past our expiration: the matchmaker assembles anyway
   * (assembleDespiteAsk) before they give up.
   */
  assembleIfEnough (minGroupSize: number): GroupInfo | null {
    if (this.assembled || this.currentLeader != null) return null
    // Followers that have not confirmed yet are waited for too: assembled now, they would be sent away.
    if (this.asking || this.unconfirmed > 0) { this.expiryWaiting = true; return null }
    return this.assembleDespiteAsk(minGroupSize)
  }

  /**
   * As assembleIfEnough, whether or not a join request of ours is out (a leader that accepts us after
   * this is left) or followers are still to confirm (they are sent away, not listed).
   */
  assembleDespiteAsk (minGroupSize: number): GroupInfo | null {
    if (this.assembled || this.currentLeader != null || !enoughToAssemble(this.followers.size - this.unconfirmed, minGroupSize)) return null
    this.expiryWaiting = false
    return this.assemble()
  }

  /** Our expiration came while a join request of ours, or followers' confirmations, were out, and waits for them. */
  get waitingForAnswers (): boolean {
    return this.expiryWaiting && !this.assembled && this.currentLeader == null && (this.asking || this.unconfirmed > 0)
  }

  /** A follower confirmed or was dropped: an expiration that waited for it assembles now, if nothing else is out. */
  recheckExpiry (minGroupSize: number): GroupInfo | null {
    if (!this.expiryWaiting || this.asking) return null
    this.expiryWaiting = false
    return this.assembleIfEnough(minGroupSize)
  }

  /** A join request of ours goes out to a leader: our expiration waits for its answer (assembleIfEnough). */
  beginAsk (): void { this.asking = true }

  /** Its answer is in (or the ask failed): an expiration that came meanwhile assembles now, if we still lead. */
  endAsk (minGroupSize: number): GroupInfo | null {
    this.asking = false
    return this.recheckExpiry(minGroupSize)
  }

  /**
   * Our declaration ran out at `now` while we lead: assemble with enough followers (the group), else
   * send them away ('disbanded'). Null while nothing is due: not declared, not expired, following a
   * leader, or already assembled.
   */
  expire (now: number, minGroupSize: number): GroupInfo | 'disbanded' | null {
    if (this.assembled || this.currentLeader != null || this.asking || this.unconfirmed > 0 || this.declaredExpiration == null || now < this.declaredExpiration) return null
    const group = this.assembleIfEnough(minGroupSize)
    if (group != null) return group
    this.disband(null, 'too few peers before the leader expired')
    return 'disbanded'
  }

  /** Takes a group: the one we assembled, or our leader's. The first group taken is the search's outcome. */
  adopt (group: GroupInfo): GroupInfo {
    if (this.outcome == null) {
      this.outcome = group
      this.finish(group)
    }
    return this.outcome
  }

  /**
   * Sends our followers away, pointing them at our new leader when we joined one. `noRoom`: how many
   * of them that leader had no room for (MessageFromLeader.no_room_for): the last to join us are told
   * so (GROUP_IS_FULL: a group formed without them, decisions.ts extraUnderKey) and not sent on;
   * `leaderMembers`: the members that leader's ACCEPTED listed.
   */
  disband (suggestedLeader: string | null, reason: string, noRoom = 0, leaderMembers: readonly string[] = []): void {
    const away = suggestedLeader != null ? Math.min(Math.max(0, noRoom), this.followers.size) : 0
    const followers = [...this.followers.values()]
    this.followers.clear()
    const none = leaderMessage(MatchCode.GROUP_DISBANDED, reason)
    const turnedAway = followers.splice(followers.length - away, away)
    // The members of that group we know (its leader and those its ACCEPTED listed, us, the followers we
    // send on), as a full group's own refusal lists them (decisions.ts withoutGrouped): those sent away
    // need not wait for their declarations to be withdrawn before counting themselves one too many.
    const members = suggestedLeader != null ? [...new Set([suggestedLeader, ...leaderMembers, this.selfId, ...followers.map(f => f.peerId)])] : []
    const full = leaderMessage(MatchCode.GROUP_IS_FULL, 'no room for us in the group our leader joined', {
      orderedPeerIds: members.map(id => peerIdToBytes(id) as Uint8Array<ArrayBuffer>)
    })
    for (const follower of turnedAway) follower.settle(full)
    const sent = suggestedLeader == null
      ? none
      // The key we asked our new leader under: where our followers must ask it.
      : { ...none, suggestedLeader: peerIdToBytes(suggestedLeader) as Uint8Array<ArrayBuffer>, leaderKey: this.groupKey }
    for (const follower of followers) follower.settle(sent)
  }
}
