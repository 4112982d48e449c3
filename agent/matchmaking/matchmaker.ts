import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { SwarmNode } from '../net/node.js'
import { PeerMode, type PeerInfo } from '../proto/averaging.js'
import { atOwnAddress, ownAddrBytes, rememberAddrs } from '../net/rpc.js'
import { MatchmakingError, describeError } from '../errors.js'
import { Mutex } from '../util/mutex.js'
import { Wakeup } from '../util/wakeable-sleep.js'
import { lateTolerance } from '../util/awake-timeout.js'
import type { Rendezvous } from '../rendezvous/rendezvous.js'
import type { StoredEntry } from '../rendezvous/store.js'
import { Search } from './search.js'
import { Liveness } from './liveness.js'
import { FollowerSide } from './follower-side.js'
import { createJoinHandler } from './join-handler.js'
import { joinProtocol, MAX_JOIN_STREAMS_PER_CONNECTION } from './join-protocol.js'
import type { GroupInfo } from './group-info.js'
import {
  MAX_HEARD, aloneEarly, declaredBeforeSilence, earlyAfter, leftoverSettled, isSilent, aloneUnderKey, assembleEarly, bestCandidate, earlyQuorum, extraUnderKey, heardEntry, meetDue, meetUnderLeftovers, missingPeers, othersLooking, peekHomeDue, probeMissing, seenAfterVisible,
  aloneCutoff, reverseAskAfter, reverseCandidate, reverseKey, shortKeyFewest, shortUnderKey, extraGrace, extrasLookAt, extrasLookDue, silentUntil, triedKey, withHeard, withoutGrouped, type AloneView, type EarlyView
} from './decisions.js'
import { ArrivalClock } from './arrivals.js'
import type { Log } from '../log.js'

export interface MatchmakerConfig {
  readonly prefix: string
  readonly mode: PeerMode
  readonly schemaHash: Uint8Array
  readonly targetGroupSize: number
  readonly minGroupSize: number
  /** Seconds a declaration lasts: a leader assembles or disbands when it runs out. */
  readonly averagingExpiration: number
  /** Seconds to wait for a leader's first reply. */
  readonly requestTimeout: number
  readonly log?: Log
  /** A group we led assembled short of its expiration: how many seconds early. */
  readonly onEarlyAssembly?: (savedSeconds: number) => void
  /** Followers' arrival delays so far (default: none yet). */
  readonly arrivals?: ArrivalClock
}

const POLL_MIN_MS = 20
/** How long a leader whose expiry came late (a stall of ours) lets the I/O that came in meanwhile be read before it assembles (assembleOnExpiry). */
const IO_TURN_MS = 50
const POLL_MAX_MS = 500

/**
 * hivemind's matchmaking: declare under the group key until an expiration, ask better-ranked
 * peers (earlier expiration, then smaller id) to lead us, lead those who ask us; a leader
 * assembles at targetGroupSize at once, or at its expiration with at least minGroupSize.
 */
export class Matchmaker {
  private readonly lock = new Mutex()
  private readonly wakeup = new Wakeup()
  private search: Search | null = null
  private readonly selfId: string
  /** Followers' arrival delays, for assembling short of the expiration (./arrivals.ts). */
  private readonly arrivals: ArrivalClock
  /** Our last declaration we assembled short of its expiration: askers until then came late. */
  private lastEarly: { groupKey: string, declaredAt: number, expiration: number } | null = null
  /** Both sides of the liveness check; the all-reduce asks late members through it too (late-checks.ts). */
  readonly liveness: Liveness
  /** Asking leaders and waiting for their groups (./follower-side.ts). */
  private readonly follower: FollowerSide
  /** When our last search ended (or we started): what a NOT_LOOKING_FOR_GROUP says (decisions.ts formedWithoutUs). */
  private stoppedLookingAt: number
  /** When our last search ended in a group (seconds; null: none yet): a leader that began looking before then is lapped (decisions.ts nextWave). */
  private lastGroupAt: number | null = null
  /** The config's mode, until a client becomes reachable (serveAs). */
  private currentMode: PeerMode

  constructor (
    private readonly node: SwarmNode,
    private readonly rendezvous: Rendezvous,
    private readonly config: MatchmakerConfig,
    private readonly now: () => number = () => Date.now() / 1000
  ) {
    this.selfId = node.peerId.toString()
    this.stoppedLookingAt = this.now()
    this.currentMode = config.mode
    this.arrivals = config.arrivals ?? new ArrivalClock()
    this.liveness = new Liveness(node, config.prefix, config.log, () => this.now())
    this.follower = new FollowerSide({
      node,
      config,
      selfId: this.selfId,
      lock: this.lock,
      arrivals: this.arrivals,
      liveness: this.liveness,
      now: () => this.now(),
      mode: () => this.currentMode,
      notify: () => { this.wakeup.notify() },
      moveToLeftovers: async (search, why) => { await this.moveToLeftovers(search, why) },
      averagedAgo: () => this.lastGroupAt == null ? 0 : Math.max(0, this.now() - this.lastGroupAt)
    })
  }

  async start (): Promise<void> {
    if (this.currentMode === PeerMode.CLIENT) return // nobody can call a client
    await this.serveLeaderSide()
  }

  /**
   * A client that became reachable (its agent reserved a relay slot after it started) takes `mode`
   * from its next search on: it answers join requests and liveness checks, declares and may lead.
   * Only between searches: a search's ranking and waits follow the mode it began in.
   */
  async serveAs (mode: PeerMode): Promise<void> {
    if (mode === this.currentMode) return
    if (this.currentMode !== PeerMode.CLIENT || mode === PeerMode.CLIENT) throw new MatchmakingError(`only a client takes another mode: this matchmaker runs as ${this.currentMode}, asked to run as ${mode}`)
    if (this.search != null) throw new MatchmakingError('the mode cannot change during a group search')
    this.currentMode = mode
    await this.serveLeaderSide()
  }

  /** What others call a peer that is not a client for: join requests and liveness checks. */
  private async serveLeaderSide (): Promise<void> {
    await this.node.handle(joinProtocol(this.config.prefix), createJoinHandler({
      selfId: this.selfId,
      mode: this.currentMode,
      schemaHash: this.config.schemaHash,
      targetGroupSize: this.config.targetGroupSize,
      requestTimeoutMs: this.config.requestTimeout * 1000,
      lock: this.lock,
      ...(this.config.log != null ? { log: this.config.log } : {}),
      current: () => this.search,
      // A search that assembled stopped looking just now; its end, a moment later, is recorded in lookForGroup.
      stoppedLooking: () => this.search != null ? 0 : this.now() - this.stoppedLookingAt,
      onFollowerJoined: () => {
        const search = this.search
        if (search?.declaredAt != null) this.arrivals.record(this.now() - search.declaredAt)
        if (search?.assembleIfFull(this.config.targetGroupSize) !== true) search?.recheckExpiry(this.config.minGroupSize)
        this.wakeup.notify()
      },
      onFollowerLeft: () => {
        // An expiration that waited for its confirmation goes on (assembles, or the search loop disbands).
        this.search?.recheckExpiry(this.config.minGroupSize)
        this.wakeup.notify()
      },
      onTurnedAway: (groupKey) => {
        // Counted only where we cut a declaration short: it would have joined had we waited.
        const last = this.lastEarly
        if (last != null && last.groupKey === groupKey && this.now() < last.expiration) this.arrivals.record(this.now() - last.declaredAt)
      },
      onOutranked: (peerId, expiration) => {
        const search = this.search
        if (search == null || search.assembled || search.currentLeader != null) return
        const entry = heardEntry(peerId, expiration, this.now(), this.config.averagingExpiration)
        if (entry == null || (search.heard.size >= MAX_HEARD && !search.heard.has(peerId))) return
        // It just asked us: alive, whatever an earlier check concluded (a leader slow under load that
        // we had marked silent asked us in turn, and was skipped; its key split in two), and looking
        // for us now, whatever it answered when we asked it at this declaration (the silent leader
        // above had been asked: skipped as tried, the two met only when a declaration ran out).
        this.liveness.silences.noteAlive(peerId, this.now())
        if (search.silent.delete(peerId)) this.config.log?.debug(`${peerId.slice(-6)} asked us, so it is alive: no longer counted silent`)
        search.tried.delete(triedKey(peerId, expiration))
        search.heard.set(peerId, entry)
        this.config.log?.debug(`${peerId.slice(-6)} (exp ${expiration.toFixed(3)}) asked us to lead it and ranks above us: asking it in turn`)
        this.wakeup.notify()
      },
      onNoRoom: () => { this.wakeup.notify() },
      quorum: earlyQuorum(this.config.targetGroupSize, this.config.minGroupSize),
      onNextWave: () => { this.wakeup.notify() },
      now: this.now
    }), { maxInboundStreams: MAX_JOIN_STREAMS_PER_CONNECTION, runOnLimitedConnection: false })
    await this.liveness.serve(this.config.requestTimeout * 1000)
  }

  async stop (): Promise<void> {
    this.search?.disband(null, 'leader is shutting down')
    this.wakeup.notify()
    await this.node.unhandle(joinProtocol(this.config.prefix)).catch(() => {})
    await this.liveness.unserve()
  }

  get looking (): boolean { return this.search != null }

  /**
   * Finds a group under groupKey before the deadline (unix seconds), or throws MatchmakingError.
   * A peer that was alone under groupKey for a whole declaration moves to leftoverKey, if given.
   * `schemaHash`: a round over a subset of the tensors asks and accepts only peers of that subset
   * (default: the config's, all tensors).
   */
  async lookForGroup (groupKey: string, info: PeerInfo, deadline: number, signal?: AbortSignal, leftoverKey?: string, schemaHash?: Uint8Array): Promise<GroupInfo> {
    if (this.search != null) throw new MatchmakingError('a group search is already under way')
    const search = new Search(this.selfId, groupKey, info, deadline, leftoverKey, schemaHash)
    search.startedAt = this.now()
    this.search = search
    const onAbort = (): void => { this.wakeup.notify() }
    signal?.addEventListener('abort', onAbort)
    try {
      const loop = this.searchLoop(search, signal)
      const group = await Promise.race([search.done, loop])
      if (group == null) {
        const why = search.rejections.length > 0 ? `; last answers: ${[...new Set(search.rejections.slice(-4))].join(', ')}` : ''
        throw new MatchmakingError(signal?.aborted === true
          ? 'group search was cancelled'
          : `could not find a group under ${groupKey} before the deadline${why}`)
      }
      this.lastGroupAt = this.now()
      return group
    } finally {
      signal?.removeEventListener('abort', onAbort)
      search.cancelExpiry()
      this.search = null
      this.stoppedLookingAt = this.now()
      search.disband(null, 'search ended')
      this.wakeup.notify()
      if (search.declaredExpiration != null) void this.withdraw(search)
    }
  }

  private async searchLoop (search: Search, signal?: AbortSignal): Promise<GroupInfo | null> {
    const isClient = this.currentMode === PeerMode.CLIENT
    let pollMs = POLL_MIN_MS
    let known: StoredEntry[] = []
    let knownAt = -Infinity
    while (!search.assembled && signal?.aborted !== true) {
      const now = this.now()
      if (now >= search.deadline) return null
      if (!isClient && search.declaredExpiration != null && now >= search.declaredExpiration && (search.expiryPending || search.waitingForAnswers)) {
        // The expiry timer decides whether we assemble at the expiration (assembleOnExpiry); it runs in
        // a moment. Or it ran, and waits for the answer to our join request or for followers to
        // confirm: that answer decides (Search.recheckExpiry), or the timer assembles despite it.
        await this.wakeup.sleep(IO_TURN_MS)
        continue
      }
      if (!isClient && (search.declaredExpiration == null || now >= search.declaredExpiration)) {
        const outcome = search.expire(now, this.config.minGroupSize)
        if (outcome === 'disbanded') {
          const view = { readAt: knownAt, declaredUntil: search.declaredExpiration ?? now, averagingExpiration: this.config.averagingExpiration, storedAt: search.storedAt ?? Infinity, seenBefore: search.aloneSeconds }
          const pool = this.viewOf(search, known, now)
          if (aloneUnderKey(search, pool, this.selfId, now, view)) await this.moveToLeftovers(search, `alone under ${search.groupKey} for ${search.aloneSeconds > 0 ? 'declarations seen for half of one' : 'a whole declaration'}`)
          else {
            search.aloneSeconds += Math.max(0, view.declaredUntil - view.storedAt)
            this.config.log?.debug(`declaration under ${search.groupKey} ended without a group; staying: view ${(now - knownAt).toFixed(1)} s old, seen ${search.aloneSeconds.toFixed(1)} s in all, ${othersLooking(pool, this.selfId, now).length} others looking`)
          }
        } else if (outcome != null) return outcome
        search.declaredExpiration = Math.min(now + this.config.averagingExpiration, search.deadline)
        search.declaredAt = now
        search.earlyHeldBy = undefined
        this.assembleOnExpiry(search)
        known = await this.declare(search, search.declaredExpiration)
        knownAt = this.now()
        noteSeen(search, known, knownAt, this.config.requestTimeout / 2)
        this.config.log?.debug(`declared exp ${search.declaredExpiration.toFixed(3)}, sees ${known.filter(e => e.looking).length}`)
        pollMs = POLL_MIN_MS
        // Stored only after it ran out (replicas slow under load): nobody could ask us under it, and we
        // rank first in it, so we could ask nobody. A fresh one at once, not after this round of the
        // loop's other lookups (256 agents in one process: 8.7 s of them while the six peers our
        // answer showed looking grouped without us).
        if (!search.assembled && this.now() >= search.declaredExpiration) continue
      } else {
        known = await this.rendezvous.find(search.groupKey).catch((err) => {
          this.config.log?.debug(`rendezvous lookup failed: ${describeError(err)}`)
          return []
        })
        knownAt = this.now()
        noteSeen(search, known, knownAt, this.config.requestTimeout / 2)
      }
      if (search.assembled) break
      // Our view (viewOf): the replicas' answer, the declarations heard of otherwise, less the peers a full group listed.
      let pool = this.viewOf(search, known, this.now())
      this.carrySilences(search, pool)
      if (await this.widenIfShort(search, known, pool)) {
        pool = this.viewOf(search, known, this.now())
        noteSeen(search, pool, this.now(), this.config.requestTimeout / 2)
      }
      if (search.assembled) break
      if (await this.takeGroupToExtras(search, pool)) { pollMs = POLL_MIN_MS; continue }
      if (this.assembleShort(search, pool)) break
      const ranking = {
        selfId: this.selfId,
        myExpiration: isClient ? Infinity : (search.declaredExpiration ?? Infinity),
        tried: search.tried,
        silent: search.silent,
        now: this.now()
      }
      // Not the peers of another wave under our key (nextWave): asked, they only turn us away again, or we them.
      const ours = search.otherWave.size === 0 ? pool : pool.filter(e => !search.otherWave.has(e.peerId))
      const candidate = bestCandidate(ours, ranking)
      if (candidate != null) {
        search.tried.add(triedKey(candidate.peerId, candidate.expiration))
        this.config.log?.debug(`asking ${candidate.peerId.slice(-6)} exp ${candidate.expiration.toFixed(3)} (mine ${search.declaredExpiration?.toFixed(3)}) known=${known.length}`)
        const group = await this.follower.followLeader(search, candidate.peerId, candidate.expiration, candidate.addrs)
        if (group != null) return search.adopt(group)
        pollMs = POLL_MIN_MS
        // Turned away by a full group that holds everyone else we saw looking: one too many now, not
        // after a fresh lookup (under two busy cores one took a second, while the short key this
        // extra should complete assembled without it).
        if (!isClient) await this.leaveIfOneTooMany(search, this.viewOf(search, known, this.now()))
        continue
      }
      const reverse = isClient ? null : reverseCandidate(ours, { ...ranking, followers: search.followers, targetGroupSize: this.config.targetGroupSize, seenSince: search.seenSince, after: reverseAskAfter(this.config.requestTimeout) })
      if (reverse != null) {
        search.tried.add(reverseKey(reverse.peerId, reverse.expiration))
        this.config.log?.debug(`asking ${reverse.peerId.slice(-6)} exp ${reverse.expiration.toFixed(3)} though it ranks below us (mine ${search.declaredExpiration?.toFixed(3)}): seen looking under our key without joining us`)
        const group = await this.follower.followLeader(search, reverse.peerId, reverse.expiration, reverse.addrs, true)
        if (group != null) return search.adopt(group)
        pollMs = POLL_MIN_MS
        continue
      }
      const alone = !isClient && search.currentLeader == null && search.declaredAt != null && search.declaredExpiration != null &&
        aloneEarly(search, pool, this.selfId, ranking.now, this.aloneView(search, search.declaredAt, knownAt))
      if (alone) {
        await this.leaveForLeftovers(search, `alone under ${search.groupKey} ${(ranking.now - search.declaredAt!).toFixed(1)} s after declaring, past the usual arrival time`)
        continue
      }
      if (!isClient && await this.leaveIfOneTooMany(search, pool)) continue
      if (!isClient && search.currentLeader == null && search.declaredAt != null && await this.peekHome(search, pool, knownAt)) {
        pollMs = POLL_MIN_MS
        continue
      }
      const untilExpiry = search.declaredExpiration != null ? (search.declaredExpiration - this.now()) * 1000 : Infinity
      const untilDeadline = (search.deadline - this.now()) * 1000
      const untilLook = (this.nextExtrasLook(search) - this.now()) * 1000
      await this.wakeup.sleep(Math.max(0, Math.min(pollMs, untilExpiry, untilDeadline, untilLook)))
      pollMs = Math.min(POLL_MAX_MS, pollMs * 2)
    }
    return search.group
  }

  /**
   * A leader assembles at its expiration on a timer, not when the search loop next comes round:
   * a rendezvous lookup stuck on slow replicas held a leader 6 s past its expiration, its
   * followers gave up on it meanwhile, and it listed them in a group they never ran in.
   *
   * A timer that fires late means our process stalled (SIGSTOP, a CPU-starved pod, a long pause),
   * and node runs timers before it reads the I/O that came in meanwhile: followers that gave up on
   * us reset their join streams (follower-side.ts), but we would not know yet. So a late expiry
   * waits IO_TURN_MS for that I/O first: in the chaos harness's freezes a leader that woke assembled
   * at once with the follower that had left, and ran a group of two with a ghost (2.5-5 s more).
   */
  private assembleOnExpiry (search: Search): void {
    search.cancelExpiry()
    const expiration = search.declaredExpiration
    if (expiration == null) return
    search.expiryPending = true
    let readAfterStall = false
    const onExpiry = (): void => {
      if (search.declaredExpiration !== expiration) return
      if (!readAfterStall && (this.now() - expiration) * 1000 > lateTolerance(this.config.requestTimeout * 1000)) {
        readAfterStall = true
        search.expiryTimer = setTimeout(onExpiry, IO_TURN_MS)
        return
      }
      search.expiryPending = false
      this.wakeup.notify()
      const members = search.followers.size + 1
      if (search.assembleIfEnough(this.config.minGroupSize) != null) {
        if (members < this.config.targetGroupSize) this.config.log?.debug(`assembled ${members} of ${this.config.targetGroupSize} at the expiration under ${search.groupKey}; not early for ${search.earlyHeldBy ?? 'no check since its followers came'}`)
        return
      }
      if (!search.waitingForAnswers) return
      // Waiting for the answer to our own join request (Search.assembleIfEnough): our followers wait
      // for us until our expiration plus a request timeout, so we assemble by half of it whatever
      // the answer, and leave that leader should it accept us after.
      search.expiryTimer = setTimeout(() => {
        if (search.declaredExpiration === expiration && search.assembleDespiteAsk(this.config.minGroupSize) != null) this.wakeup.notify()
      }, this.config.requestTimeout * 500)
    }
    search.expiryTimer = setTimeout(onExpiry, Math.max(0, (expiration - this.now()) * 1000))
  }

  /**
   * Leading with a quorum, past the followers' arrival cutoff (short of a quorum, past a longer
   * wait: decisions.ts earlyAfter), and everybody we see looking under our key has joined: assemble
   * now rather than wait out the declaration for peers that are not coming (decisions.ts
   * assembleEarly). Returns whether it assembled.
   */
  private assembleShort (search: Search, known: readonly StoredEntry[]): boolean {
    if (search.currentLeader != null || search.followers.size === 0 || search.declaredAt == null || search.declaredExpiration == null) return false
    const held = (why: string): false => {
      search.earlyHeldBy = why
      return false
    }
    // A follower still to confirm is waited for: assembled now, it would be sent away (Search.assemble).
    if (search.unconfirmed > 0) return held('a follower still to confirm')
    const now = this.now()
    // A pair that came to meet other short groups waits for them; once it leads a quorum, no short group fits and leftoverSettled decides.
    if (now < search.holdUntil && search.followers.size + 1 < earlyQuorum(this.config.targetGroupSize, this.config.minGroupSize)) return held('holding for other short groups under the leftover key')
    // Looked for extras under the leftover key once and found none: look once more before assembling (decisions.ts extraGrace),
    // unless the key's next wave came (nextWave): our wave's extras would have come by then.
    if (this.extraLooks(search) === 1 && shortUnderKey(search, this.config.targetGroupSize, 1) && now < search.extraLooks.graceEnds && search.nextWaveAt == null) return held('a second look for extras due')
    // A follower we accepted brings followers of its own, sent on to us: they are coming. (Assembled
    // without them, such a follower was turned away and sat out its step: a pair meeting a pair.)
    if (search.awaitingBrought(now) > 0) return held('followers brought by a follower still to come')
    const view = this.earlyView(search, search.declaredAt)
    if (!assembleEarly(view, known, this.selfId, now)) {
      const after = earlyAfter(view)
      if (!probeMissing(view, now)) return held(after === undefined ? (view.cutoff === undefined ? 'no arrival times yet' : 'too few members to assemble early') : `${after === view.cutoff ? 'the arrival cutoff' : 'settling under the leftover key'}, ${after.toFixed(2)} s after declaring`)
      const missing = missingPeers(view, known, this.selfId, now)
      for (const e of missing) this.probeMissingPeer(search, e)
      return held(`${missing.length} peer(s) seen looking under ${search.groupKey} that answer`)
    }
    const size = search.followers.size + 1
    search.assemble()
    this.lastEarly = { groupKey: search.groupKey, declaredAt: search.declaredAt, expiration: search.declaredExpiration }
    this.config.log?.debug(`assembled ${size} of ${this.config.targetGroupSize} ${(now - search.declaredAt).toFixed(2)} s after declaring, ${(search.declaredExpiration - now).toFixed(2)} s before expiring: nobody else is looking under ${search.groupKey}`)
    this.config.onEarlyAssembly?.(search.declaredExpiration - now)
    return true
  }

  /** What aloneEarly judges a peer alone under its key by; `readAt`: when `known` was read. */
  private aloneView (search: Search, declaredAt: number, readAt: number): AloneView {
    return {
      declaredAt,
      storedAt: search.storedAt ?? Infinity,
      expiration: search.declaredExpiration ?? Infinity,
      cutoff: this.arrivals.cutoff(this.config.requestTimeout, this.config.averagingExpiration),
      readAt,
      widened: search.widened === search.declaredExpiration,
      requestTimeout: this.config.requestTimeout
    }
  }

  /** What assembleEarly judges a leader's search by. */
  private earlyView (search: Search, declaredAt: number): EarlyView {
    return {
      followers: search.followers,
      declaredAt,
      cutoff: this.arrivals.cutoff(this.config.requestTimeout, this.config.averagingExpiration),
      quorum: earlyQuorum(this.config.targetGroupSize, this.config.minGroupSize),
      fewest: shortKeyFewest(this.config.minGroupSize),
      silent: search.silent,
      noRoom: search.noRoom,
      otherWave: search.otherWave,
      ...(search.nextWaveAt != null ? { nextWaveAt: search.nextWaveAt } : {}),
      settledAt: search.groupKey === search.leftoverKey && search.visibleSince != null
        ? leftoverSettled(search.visibleSince, extraGrace(this.config.requestTimeout, search.storeSeconds))
        : undefined
    }
  }

  /**
   * Short of the target when we could assemble early, or a request timeout before our expiration
   * (alone included): declares again with a wide exchange (Rendezvous ExchangeOptions.wide: three
   * times the replicas), once per declaration and again while only the peers it found hold us,
   * in case the replicas we use and those the rest of our key uses drifted apart (64 agents: a key
   * split into two pairs, and a peer alone for its whole step beside a group of three, each side
   * seeing only its own replicas). The peers it shows looking that `known` lacks are kept in
   * Search.heard (the replicas we read will not show them), so that we ask them or wait for them,
   * until a later wide look shows them withdrawn. Returns whether it looked.
   */
  private async widenIfShort (search: Search, known: readonly StoredEntry[], pool: readonly StoredEntry[]): Promise<boolean> {
    const expiration = search.declaredExpiration
    if (this.currentMode === PeerMode.CLIENT || search.currentLeader != null || expiration == null || search.declaredAt == null) return false
    if (search.followers.size + 1 >= this.config.targetGroupSize) return false
    // A declaration stored with less than a request timeout left (slow replicas) is nearly spent: a
    // wide look cannot help it (256 agents in one process: 7.5-8 s of one, replicas timing out, while
    // key-mates that could not see us grouped), and the loop declares afresh when it runs out.
    if (search.storedAt != null && expiration - search.storedAt < this.config.requestTimeout) return false
    const now = this.now()
    const view = this.earlyView(search, search.declaredAt)
    const early = search.followers.size > 0 && assembleEarly(view, pool, this.selfId, now)
    // Alone past the followers' usual arrival time (aloneCutoff): look wide before going to the leftover key (aloneEarly).
    const aloneLate = search.followers.size === 0 && now - search.declaredAt >= aloneCutoff(this.aloneView(search, search.declaredAt, now)) &&
      othersLooking(pool, this.selfId, now).length === 0
    const due = search.widened !== expiration
      ? early || aloneLate || now >= expiration - this.config.requestTimeout
      // Only peers heard of this way hold our early assembly: look again, a request timeout after the
      // last look, whether they are still looking (they may have grouped elsewhere meanwhile).
      : !early && search.followers.size > 0 && assembleEarly(view, known, this.selfId, now) && now - search.widenedAt >= this.config.requestTimeout
    if (!due) return false
    search.widened = expiration
    search.widenedAt = now
    const wider = await this.rendezvous.declare(search.groupKey, {
      peerId: this.selfId, expiration, looking: true, priority: 0, addrs: ownAddrBytes(this.node)
    }, { wide: true }).catch((err) => {
      this.config.log?.debug(`a wide declaration under ${search.groupKey} failed: ${describeError(err)}`)
      return null
    })
    if (wider == null || search.declaredExpiration !== expiration) return false
    const later = this.now()
    for (const e of wider) if (search.heard.has(e.peerId) && (!e.looking || e.expiration <= later)) search.heard.delete(e.peerId)
    const unseen = othersLooking(wider, this.selfId, later).filter(e => !known.some(k => k.peerId === e.peerId))
    for (const e of unseen) if (search.heard.size < MAX_HEARD || search.heard.has(e.peerId)) search.heard.set(e.peerId, e)
    if (unseen.length > 0) this.config.log?.info(`a wider look under ${search.groupKey} found ${unseen.length} peer(s) looking that our replicas did not show`)
    return true
  }

  /**
   * About to assemble short of the target on our Moshpit key (decisions.ts shortUnderKey: early,
   * or at our expiration): looks under the leftover key for peers one too many under theirs
   * (extraUnderKey), and once more a while later when none waited (decisions.ts extraGrace: the early
   * assembly holds meanwhile), and if any wait there, takes our group there (our followers stay ours; we
   * declare there with the expiration we had, so they rank below us and ask us). Returns whether it
   * moved. The members' next Moshpit bits come from our key (Search.gridKey, sent with the group),
   * so the extra takes the place the short key lacked and the grid is whole again the round after.
   */
  private async takeGroupToExtras (search: Search, known: readonly StoredEntry[]): Promise<boolean> {
    const look = this.extrasLook(search)
    if (look === undefined || search.declaredAt == null) return false
    const { expiration, looks, leftoverKey } = look
    // Due when it would assemble early (a second look: extraGrace after the first), or ahead of its assembly at its expiration (extrasLookAt).
    const now = this.now()
    const early = assembleEarly(this.earlyView(search, search.declaredAt), known, this.selfId, now)
    if (!extrasLookDue(looks, early, now, look.at)) return false
    const store = search.storedAt != null ? search.storedAt - search.declaredAt : 0
    search.extraLooks = { expiration, count: looks + 1, graceEnds: looks === 0 ? now + extraGrace(this.config.requestTimeout, store) : search.extraLooks.graceEnds }
    const leftovers = await this.rendezvous.find(leftoverKey).catch(() => [])
    const extras = othersLooking(leftovers, this.selfId, this.now())
    const members = search.followers.size + 1
    const meet = extras.length === 0 && meetUnderLeftovers(members, this.config.targetGroupSize, this.config.minGroupSize) && meetDue(search.declaredAt, this.now(), this.config.requestTimeout)
    if (extras.length === 0 && !meet && looks === 0) this.config.log?.debug(`${members} of ${this.config.targetGroupSize} under ${search.groupKey}, nobody under the leftover key yet: looking again in ${(search.extraLooks.graceEnds - now).toFixed(2)} s before assembling`)
    if ((extras.length === 0 && !meet) || search.assembled || search.currentLeader != null || search.declaredExpiration !== expiration) return false
    const from = search.groupKey
    await this.moveToLeftovers(search, meet
      ? `${members} of ${this.config.targetGroupSize} under ${from}, short of a quorum: taking our group under the leftover key to meet other short groups`
      : `${members} of ${this.config.targetGroupSize} under ${from}, and ${extras.length} peer(s) looking under the leftover key: taking our group there`)
    search.gridKey = from
    for (const e of extras.slice(0, this.config.targetGroupSize)) search.cameFor.add(e.peerId)
    // Other short groups get to their own assembly about now: wait for them one arrival cutoff (at most to our expiration, when we assemble anyway).
    if (meet) search.holdUntil = this.now() + (this.arrivals.cutoff(this.config.requestTimeout, this.config.averagingExpiration) ?? 0)
    await this.declare(search, expiration)
    return true
  }

  /**
   * When a short leader's next look for extras under the leftover key falls due (takeGroupToExtras,
   * extrasLookAt), if that is still to come: the loop wakes for it. A loop polling every POLL_MAX_MS
   * slept through the last half request timeout before the expiration, the last look's window, about
   * half the time at a 0.5 s request timeout, and assembled short while an extra waited there.
   */
  private nextExtrasLook (search: Search): number {
    const at = this.extrasLook(search)?.at
    return at !== undefined && at > this.now() ? at : Infinity
  }

  /**
   * A short leader's looks for extras under the leftover key in its current declaration: how many it
   * took and when the next is due at the latest (extrasLookAt); undefined for a follower, a peer not
   * declared, one without a leftover key, or a group that is not short.
   */
  private extrasLook (search: Search): { expiration: number, looks: number, at: number, leftoverKey: string } | undefined {
    const { declaredExpiration: expiration, leftoverKey } = search
    if (search.currentLeader != null || expiration == null || leftoverKey == null) return undefined
    const looks = this.extraLooks(search)
    if (!shortUnderKey(search, this.config.targetGroupSize, looks)) return undefined
    return { expiration, looks, at: extrasLookAt(looks, expiration, this.config.requestTimeout, search.extraLooks.graceEnds), leftoverKey }
  }

  /** Our view: the replicas' answer, the declarations heard of otherwise (Search.heard), less the peers a full group listed (Search.grouped). */
  private viewOf (search: Search, known: readonly StoredEntry[], now: number): StoredEntry[] {
    return withoutGrouped(withHeard(known, search.heard, now), search.grouped, this.config.averagingExpiration)
  }

  /** How many times we looked for extras under the leftover key in the current declaration (Search.extraLooks). */
  private extraLooks (search: Search): number {
    return search.extraLooks.expiration === search.declaredExpiration ? search.extraLooks.count : 0
  }

  /**
   * Declarations in our view made before their peer last failed to answer us (in an earlier search,
   * an all-reduce's liveness check: Silences) count as silent in this search, as if we had asked them
   * here and waited out the request timeout; those whose peer failed only a rendezvous request
   * (Rendezvous.silentSince) are not asked until a liveness check of theirs decides. Not the
   * extras we took our group to the leftover key for (Search.cameFor): a leader that moved for the
   * one extra waiting there counted it silent from a rendezvous answer it was slow to give under two
   * busy cores, assembled three 0.6 s after moving, and left the extra groupless.
   */
  private carrySilences (search: Search, pool: readonly StoredEntry[]): void {
    const now = this.now()
    for (const e of pool) {
      if (!e.looking || e.peerId === this.selfId || e.expiration <= now || isSilent(search.silent, e.peerId, now) || search.cameFor.has(e.peerId)) continue
      const ours = this.liveness.silences.silentAt(e.peerId)
      if (ours !== undefined && declaredBeforeSilence(e.expiration, this.config.averagingExpiration, ours)) {
        search.silent.set(e.peerId, silentUntil(now, e.expiration, this.config.averagingExpiration))
        this.config.log?.debug(`${e.peerId.slice(-6)} (exp ${e.expiration.toFixed(3)}) did not answer us ${(now - ours).toFixed(1)} s ago, after it declared: counted silent, not asked`)
        continue
      }
      // Only a rendezvous request of ours went unanswered: a replica's handler gives up at a request
      // timeout when its agent is merely busy (eight agents in one process under two CPU burners: a
      // leader so counted silent was never asked, and its key of five stayed a pair and a three). Not
      // asked until a liveness check decides; a frozen peer answers none, and is not asked either way.
      const elsewhere = this.liveness.silences.silentAt(e.peerId, this.rendezvous.silentSince(e.peerId))
      if (elsewhere === undefined || !declaredBeforeSilence(e.expiration, this.config.averagingExpiration, elsewhere)) continue
      const key = triedKey(e.peerId, e.expiration)
      if (search.probed.has(key)) continue
      const hold = now + this.config.requestTimeout
      search.silent.set(e.peerId, hold)
      this.config.log?.debug(`${e.peerId.slice(-6)} (exp ${e.expiration.toFixed(3)}) failed a rendezvous request of ours ${(now - elsewhere).toFixed(1)} s ago, after it declared: checking its liveness before asking it`)
      this.probe(search, e, () => {
        if (search.silent.get(e.peerId) === hold) search.silent.delete(e.peerId)
        this.config.log?.debug(`${e.peerId.slice(-6)} answered a liveness check: asked as any peer`)
      }, 'not asked')
    }
  }

  /**
   * Leading past the time we could assemble early (decisions.ts probeMissing), still waiting for `entry`, a peer seen looking
   * under our key that has not joined: check its liveness once per declaration of its, and if it
   * does not answer within a request timeout, count it as gone until that declaration ends, so
   * that assembleEarly leaves it out (decisions.ts: why a healthy peer is never left out this way).
   */
  private probeMissingPeer (search: Search, entry: StoredEntry): void {
    this.probe(search, entry, () => {}, `seen looking under ${search.groupKey}, not waited for`)
  }

  /**
   * Checks the liveness of `entry`'s peer once per declaration of its (Search.probed): `answered` if it
   * answers within a request timeout, else it counts as gone until that declaration ends (`verdict`: what that means here).
   */
  private probe (search: Search, entry: StoredEntry, answered: () => void, verdict: string): void {
    const key = triedKey(entry.peerId, entry.expiration)
    if (search.probed.has(key)) return
    search.probed.add(key)
    let peer: PeerId
    try { peer = peerIdFromString(entry.peerId) } catch { return }
    void (async () => {
      if (entry.addrs.length > 0 && this.node.getConnections(peer).length === 0 && !atOwnAddress(this.node, entry.addrs)) {
        await rememberAddrs(this.node, peer, entry.addrs).catch(() => {})
      }
      const alive = await this.liveness.answers(peer, this.config.requestTimeout * 1000)
      if (this.search !== search || search.assembled) return
      if (alive) answered()
      else {
        search.silent.set(entry.peerId, silentUntil(this.now(), entry.expiration, this.config.averagingExpiration))
        this.config.log?.debug(`${entry.peerId.slice(-6)} did not answer a liveness check within ${this.config.requestTimeout} s: ${verdict}`)
      }
      this.wakeup.notify()
    })()
  }

  /**
   * Alone under the leftover key past the usual arrival time (decisions.ts peekHomeDue): looks under our
   * Moshpit key, and goes back there if peers declared there since we saw it last (declarations we
   * saw before we left, a crashed peer's among them, do not count). The search loop declares us there
   * afresh. Returns whether it went back.
   */
  private async peekHome (search: Search, pool: readonly StoredEntry[], readAt: number): Promise<boolean> {
    const view = { ...this.aloneView(search, search.declaredAt!, readAt), averagingExpiration: this.config.averagingExpiration }
    if (!peekHomeDue(search, pool, this.selfId, this.now(), view)) return false
    search.peekedHomeAt = this.now()
    const home = await this.rendezvous.find(search.homeKey).catch(() => [])
    const now = this.now()
    const looking = othersLooking(home, this.selfId, now)
    const arrived = looking.filter(e => !search.seenSince.has(triedKey(e.peerId, e.expiration)))
    if (arrived.length === 0) this.config.log?.debug(`alone under the leftover key ${(now - search.visibleSince!).toFixed(1)} s: ${looking.length} peer(s) looking under ${search.homeKey}, none declared since we left; staying`)
    if (arrived.length === 0 || search.assembled || search.currentLeader != null || search.followers.size > 0 || search.groupKey !== search.leftoverKey) return false
    void this.withdraw(search)
    search.cancelExpiry()
    search.declaredExpiration = null
    search.enterKey(search.homeKey)
    search.gridKey = undefined
    this.config.log?.info(`alone under the leftover key; ${arrived.length} peer(s) declared under ${search.homeKey} since we left: looking there again`)
    return true
  }

  /** Leaves our Moshpit key for the swarm's leftover key, where peers alone or one too many under theirs meet short groups (logs `why`). */
  /** One too many under our Moshpit key (decisions.ts extraUnderKey, on `pool`): goes to the leftover key. Returns whether it went. */
  private async leaveIfOneTooMany (search: Search, pool: readonly StoredEntry[]): Promise<boolean> {
    if (search.currentLeader != null || search.assembled || !extraUnderKey(search, pool, this.selfId, this.now())) return false
    await this.leaveForLeftovers(search, `one too many under ${search.groupKey} (its groups formed without us, nobody else looks there)`)
    return true
  }

  /** The search loop's move to the leftover key: declared there at once, with a fresh expiration (the short leaders that come for us outrank us, and we ask them). */
  private async leaveForLeftovers (search: Search, why: string): Promise<void> {
    await this.moveToLeftovers(search, why)
    search.cancelExpiry()
    search.declaredExpiration = null
  }

  private async moveToLeftovers (search: Search, why: string): Promise<void> {
    if (search.leftoverKey == null) return
    // Withdrawn from the old key beside what comes next (withdraw reads the key before it awaits):
    // a follower our leader sent on asks its new leader at once, which waits for it only so long.
    void this.withdraw(search)
    search.enterKey(search.leftoverKey)
    this.config.log?.info(`${why}; looking under ${search.groupKey}`)
  }

  private async declare (search: Search, expiration: number): Promise<StoredEntry[]> {
    search.storedAt = null
    const started = this.now()
    try {
      const known = await this.rendezvous.declare(search.groupKey, {
        peerId: this.selfId, expiration, looking: true, priority: 0, addrs: ownAddrBytes(this.node)
      })
      search.storedAt = this.now()
      search.storeSeconds = search.storedAt - started
      search.visibleSince ??= search.storedAt
      return known
    } catch (err) {
      this.config.log?.warn(`declaring under ${search.groupKey} failed: ${describeError(err)}`)
      return []
    }
  }

  private async withdraw (search: Search): Promise<void> {
    const expiration = Math.max(search.declaredExpiration ?? 0, this.now()) + 0.001
    await this.rendezvous.declare(search.groupKey, {
      peerId: this.selfId, expiration, looking: false, priority: 0, addrs: []
    }).catch(() => {})
  }
}

/**
 * Records when each declaration in the view was first seen looking (Search.seenSince), and who was
 * seen looking once we had been visible under the key for `settle` seconds (seenLooking).
 */
function noteSeen (search: Search, known: readonly StoredEntry[], now: number, settle: number): void {
  const counts = seenAfterVisible(now, search.visibleSince, settle)
  for (const e of known) {
    if (!e.looking || e.peerId === search.selfId) continue
    const key = triedKey(e.peerId, e.expiration)
    if (!search.seenSince.has(key)) search.seenSince.set(key, now)
    if (counts) search.seenLooking.add(e.peerId)
  }
}

