import { MatchCode, PeerMode, type JoinRequest, type PeerInfo } from '../proto/averaging.js'
import type { StoredEntry } from '../rendezvous/store.js'
import { MAX_BASE_ID_BYTES, MAX_GATHER_BYTES, MAX_GROUP_SIZE, validRound } from './group-info.js'
import { equalBytes } from '../util/bytes.js'

/**
 * Matchmaking's decisions, apart from the network: who leads whom, whom a leader turns away and
 * why, when a leader assembles or disbands, when a peer alone under its key moves on. No libp2p,
 * no timers: the time is an argument, so tests drive them with a fake clock.
 */

/** hivemind's leader order: earlier expiration first, peer id breaks ties. */
export function outranks (expA: number, idA: string, expB: number, idB: string): boolean {
  return expA < expB || (expA === expB && idA < idB)
}

/**
 * What every member's plan relies on: a finite weight and bandwidth, at most MAX_GATHER_BYTES of gathered
 * data, a base id no longer than a group id (MAX_BASE_ID_BYTES).
 */
export function validInfo (info: PeerInfo): boolean {
  return Number.isFinite(info.weight) && info.weight >= 0 && validRound(info.round) &&
    (info.bandwidth == null || (Number.isFinite(info.bandwidth) && info.bandwidth >= 0)) &&
    [info.secondsNone, info.secondsFloat16].every(s => s == null || (Number.isFinite(s) && s >= 0)) &&
    info.userData.byteLength <= MAX_GATHER_BYTES && (info.base == null || info.base.byteLength <= MAX_BASE_ID_BYTES) &&
    (info.outerState == null || info.outerState.byteLength <= MAX_BASE_ID_BYTES)
}

/** What a leader's side of a search looks like to its join handler (a Search is one). */
export interface LeaderState {
  readonly assembled: boolean
  readonly groupKey: string
  readonly declaredExpiration: number | null
  readonly currentLeader: string | null
  readonly followers: ReadonlyMap<string, unknown>
  /** This search's schema, when it averages a subset of the tensors (LeaderConfig.schemaHash otherwise). */
  readonly schemaHash?: Uint8Array
}

/** The leader's own settings that a join request is checked against. */
export interface LeaderConfig {
  readonly selfId: string
  readonly mode: PeerMode
  readonly schemaHash: Uint8Array
  readonly targetGroupSize: number
}

export interface Rejection {
  readonly code: MatchCode
  readonly reason: string
  /** NOT_A_LEADER: the leader we follow ourselves, where the asker may go instead. */
  readonly suggestedLeader?: string
}

/**
 * The leader's answer to a join request from `from`, in hivemind's order (its
 * `_check_reasons_to_reject`: the first failing check wins), or null to accept it.
 */
export function reasonToReject (config: LeaderConfig, state: LeaderState | null, request: JoinRequest, from: string): Rejection | null {
  if (state == null || state.assembled) return { code: MatchCode.NOT_LOOKING_FOR_GROUP, reason: 'not looking for a group' }
  if (config.mode === PeerMode.CLIENT) return { code: MatchCode.PROTOCOL_VIOLATION, reason: 'a client-mode peer cannot lead' }
  // The same checks on the follower's info as every member makes on the group's (validInfo): one
  // the members would refuse, accepted here, made them all drop the group the leader ran with it.
  if (request.info == null || !Number.isFinite(request.expiration) || request.schemaHash.byteLength === 0 || !validInfo(request.info) || request.bringing >= MAX_GROUP_SIZE) {
    return { code: MatchCode.PROTOCOL_VIOLATION, reason: 'malformed join request' }
  }
  if (!equalBytes(request.schemaHash, state.schemaHash ?? config.schemaHash)) return { code: MatchCode.BAD_SCHEMA_HASH, reason: 'tensor schema differs' }
  if (request.groupKey !== state.groupKey) return { code: MatchCode.BAD_GROUP_KEY, reason: `leader is on ${state.groupKey}` }
  if (state.declaredExpiration == null) return { code: MatchCode.NOT_DECLARED, reason: 'leader has not declared yet' }
  // The asker must rank below us, ties of expiration broken by peer id as everywhere (hivemind
  // accepts any tie): an asker that ranks above us (reverseCandidate's asks) following us would
  // let follow relationships run both ways, and two peers asking each other at once under their
  // locks wait for each other until a timeout (64 agents: 16 s, and a ghost member).
  if (outranks(request.expiration, from, state.declaredExpiration, config.selfId)) {
    // A follower names its leader even so: an asker that ranks above it (reverseCandidate) may
    // not see that leader, whose own expiration decides whether it may lead the asker.
    const rejection = { code: MatchCode.BAD_EXPIRATION_TIME, reason: 'leader expires after the follower' }
    return state.currentLeader != null ? { ...rejection, suggestedLeader: state.currentLeader } : rejection
  }
  if (state.currentLeader != null) return { code: MatchCode.NOT_A_LEADER, reason: 'leader follows another peer', suggestedLeader: state.currentLeader }
  if (from === config.selfId || state.followers.has(from)) return { code: MatchCode.DUPLICATE_PEER_ID, reason: 'peer already in the group' }
  if (groupFull(state.followers.size, config.targetGroupSize)) return { code: MatchCode.GROUP_IS_FULL, reason: 'group is full' }
  // A leader that asks us brings its followers (they are sent on to us once we accept it). Without
  // room for them all, an asker that may leave some behind is taken with those that fit (noRoomFor);
  // one that may not (agents before accepts_partial) stays whole under its own group. (Before the
  // leftover key took extras in, a follower left to find room alone sat out its 60 s step: 64 agents
  // losing 10 % a round, a pair joined a leader of three.)
  if (!request.acceptsPartial && noRoomFor(state.followers.size, request.bringing, config.targetGroupSize) > 0) {
    return { code: MatchCode.GROUP_IS_FULL, reason: `no room for the asker and the ${request.bringing} follower(s) it leads` }
  }
  return null
}

/**
 * How many of the `bringing` followers of an asker we accept (with `followers` of our own) the
 * group has no room for (MessageFromLeader.no_room_for): the asker sends them away. Taking the
 * asker with those that fit, not refusing it whole, is what mends a Moshpit key split between two
 * leaders whose groups hold one too many together: under load, five key-mates made groups of two
 * and three, each leader waited for the other until its declaration ended (20 s), and the short key
 * the extra should have completed assembled without it (clean-clone CI and 2 of 21 runs under two
 * CPU burners). Now the two make a full group at once, and the one left out is an extra that meets
 * the short key under the leftover key (extraUnderKey), as when a key's fifth peer asks a full group.
 */
export function noRoomFor (followers: number, bringing: number, targetGroupSize: number): number {
  return Math.max(0, followers + 2 + bringing - targetGroupSize)
}

/**
 * Whether our join request says we may be taken with only some of our followers (JoinRequest
 * accepts_partial): only on our Moshpit key, where those sent away have the leftover key to go to
 * (extraUnderKey). Under the leftover key itself a group stays whole (meetUnderLeftovers).
 */
export function acceptsPartial (search: Pick<KeyView, 'groupKey' | 'leftoverKey'>): boolean {
  return search.leftoverKey != null && search.groupKey !== search.leftoverKey
}

/** A leader with this many followers is full: it assembles at once and turns newcomers away. */
export function groupFull (followers: number, targetGroupSize: number): boolean {
  return followers + 1 >= targetGroupSize
}

/** At its declared expiration a leader assembles with at least one follower and minGroupSize members; else it disbands. */
export function enoughToAssemble (followers: number, minGroupSize: number): boolean {
  return followers > 0 && followers + 1 >= minGroupSize
}

/** Who we are when picking a leader to ask. */
export interface CandidateView {
  readonly selfId: string
  /** Our declared expiration (Infinity for a client, or before we declared: anyone outranks us). */
  readonly myExpiration: number
  /** `${peerId}@${expiration}` of the declarations we already asked. */
  readonly tried: ReadonlySet<string>
  /** Peers that did not answer us within a request timeout (isSilent): not asked again while they count as gone. */
  readonly silent?: SilentPeers
  readonly now: number
}

/** The key under which a declaration counts as asked. */
export function triedKey (peerId: string, expiration: number): string {
  return `${peerId}@${expiration}`
}

/** The `tried` key of a leader we were sent to (by a busy or disbanding leader): asked once per search. */
export function redirectKey (peerId: string): string {
  return `${peerId}@redirect`
}

/**
 * Peers that did not answer us within a request timeout in this search, each with the time until
 * which we take it for gone (unix seconds). A live agent answers a request (a join, a liveness check: no
 * lock, no matchmaking state behind it) within a request timeout, the bound every ask already uses,
 * so one that did not is frozen, cut off or dead for now; waiting for it or asking it again in the
 * same declaration only repeats the timeout (chaos runs: askers sent back to a frozen leader by its
 * followers' NOT_A_LEADER waited a request timeout twice).
 */
export type SilentPeers = ReadonlyMap<string, number>

/** Whether `peerId` did not answer us within a request timeout and still counts as gone at `now`. */
export function isSilent (silent: SilentPeers, peerId: string, now: number): boolean {
  const until = silent.get(peerId)
  return until !== undefined && now < until
}

/**
 * Until when a peer that did not answer at `now` counts as gone: the end of the declaration we
 * saw it under, else one declaration from now (none lasts longer). Then it has declared again or
 * stopped looking: a peer that was only stalled (a long pause, a network blip) is asked and waited
 * for again at its next declaration, so a healthy peer is never shut out of a search for good.
 */
export function silentUntil (now: number, expiration: number | undefined, averagingExpiration: number): number {
  return expiration !== undefined && expiration > now ? Math.min(expiration, now + averagingExpiration) : now + averagingExpiration
}

/**
 * Whether a declaration seen looking was made before its peer last failed to answer us
 * (`silentAt`, unix seconds; Silences), as far as its expiration tells (a declaration lasts
 * averagingExpiration, or less when its step's deadline comes first: then it was made later than
 * this reckons). Such a declaration is a frozen or dead peer's leftover: asking it to lead us costs a
 * request timeout. One made after the silence is the peer back: asked as any other.
 */
export function declaredBeforeSilence (expiration: number, averagingExpiration: number, silentAt: number | undefined): boolean {
  return silentAt !== undefined && expiration - averagingExpiration < silentAt
}

/**
 * Whether to follow a redirect (NOT_A_LEADER's or GROUP_DISBANDED's suggested leader) to `target`:
 * not to ourselves, not twice in a search, and not to a leader that did not answer us within a
 * request timeout (a frozen leader's followers keep naming it until its declaration ends).
 */
export function followRedirect (target: string, selfId: string, tried: ReadonlySet<string>, silent: SilentPeers, now: number): boolean {
  return target !== selfId && !tried.has(redirectKey(target)) && !isSilent(silent, target, now)
}

/** The best-ranked looking, unexpired peer that outranks us and that we have not asked at this expiration yet (nor found silent). */
export function bestCandidate (entries: readonly StoredEntry[], view: CandidateView): StoredEntry | null {
  let best: StoredEntry | null = null
  for (const e of entries) {
    if (!e.looking || e.expiration <= view.now || e.peerId === view.selfId) continue
    if (view.tried.has(triedKey(e.peerId, e.expiration))) continue
    if (view.silent != null && isSilent(view.silent, e.peerId, view.now)) continue
    if (!outranks(e.expiration, e.peerId, view.myExpiration, view.selfId)) continue
    if (best == null || outranks(e.expiration, e.peerId, best.expiration, best.peerId)) best = e
  }
  return best
}

/** The `tried` key of a declaration we asked though it ranks below us (reverseCandidate): once per declaration. */
export function reverseKey (peerId: string, expiration: number): string {
  return `${peerId}@${expiration}@reverse`
}

/** Entries a leader adds to its view from the join requests of better-ranked askers (heardEntry), at most. */
export const MAX_HEARD = 16

/**
 * A peer that asked us to lead it and was refused because it ranks above us (BAD_EXPIRATION_TIME),
 * as an entry of our view: it declared under our key, and we ask it to lead us as if the replicas
 * had shown it (they did not, or it would not have asked a worse-ranked peer: reverseCandidate).
 * Null for an expiration outside our next declaration (a hostile or confused asker).
 */
export function heardEntry (peerId: string, expiration: number, now: number, averagingExpiration: number): StoredEntry | null {
  if (!Number.isFinite(expiration) || expiration <= now || expiration > now + averagingExpiration) return null
  return { peerId, expiration, looking: true, priority: 0, addrs: [] }
}

/** Our view of the key: the replicas' entries, and the heard ones (heardEntry) the replicas do not hold as fresh, unexpired. */
export function withHeard (known: readonly StoredEntry[], heard: ReadonlyMap<string, StoredEntry>, now: number): StoredEntry[] {
  if (heard.size === 0) return [...known]
  const extra = [...heard.values()].filter(h => h.expiration > now && !known.some(e => e.peerId === h.peerId && e.expiration >= h.expiration))
  return [...known, ...extra]
}

/**
 * Our view less the declarations of peers a full group under our key listed when it turned us away
 * (Search.grouped, MessageFromLeader.ordered_peer_ids): they are in that group, not looking for us,
 * whatever the replicas still show. Under two busy cores their withdrawals took ~2 s to show; the
 * extra among five key-mates waited that long to count itself one too many (extraUnderKey), and asked
 * the full group's leader again meanwhile, by when the short key it should have completed had
 * assembled without it (lopsided-views' five-and-three test, 1 run in 4 under two CPU burners).
 * Only declarations made before they grouped (an expiration within one declaration of it): one made
 * after, for a later step, is theirs to be seen.
 */
export function withoutGrouped (entries: readonly StoredEntry[], grouped: ReadonlyMap<string, number>, averagingExpiration: number): StoredEntry[] {
  if (grouped.size === 0) return [...entries]
  return entries.filter(e => {
    const at = grouped.get(e.peerId)
    return at === undefined || e.expiration > at + averagingExpiration
  })
}

/** What reverseCandidate looks at besides a CandidateView. */
export interface ReverseView extends CandidateView {
  readonly followers: ReadonlyMap<string, unknown>
  readonly targetGroupSize: number
  /** When we first saw each declaration (triedKey) looking. */
  readonly seenSince: ReadonlyMap<string, number>
  /** Seconds a worse-ranked peer is given to ask us (reverseAskAfter). */
  readonly after: number
}

/**
 * Seconds after we first saw a worse-ranked peer looking under our key from which, if it has not
 * joined us, we ask it (reverseCandidate): a peer that sees us asks us within its next poll (at
 * most half a second) and one request, so one that has not by then likely does not see us.
 */
export function reverseAskAfter (requestTimeout: number): number {
  return Math.min(1, requestTimeout / 2)
}

/**
 * A peer to ask though it ranks below us, when nobody better is left to ask (bestCandidate null):
 * the best-ranked worse peer seen looking under our key, not our follower, for at least `after`
 * seconds, not asked at this declaration yet. Views of one key can be lopsided: the replicas a peer
 * reads from may hold some of the key's declarations and not others (64 agents, one of the runs
 * that missed the exact mean: peer A saw B and C looking, worse than A, who followed leader L; neither B, C nor L saw A,
 * and A could not see L, so A waited out its declaration alone and L assembled three of four).
 * Asked, such a follower refuses us naming its leader (BAD_EXPIRATION_TIME with a suggested
 * leader), which decides as for anyone; a worse-ranked leader refuses us and now knows of us
 * (heardEntry), so it asks us in turn. These asks are not ordered by rank: the matchmaker sends
 * them without holding its lock (FollowerSide.askBelow).
 */
export function reverseCandidate (entries: readonly StoredEntry[], view: ReverseView): StoredEntry | null {
  // Full, we have no room for it: asked by us, it would only ask us in turn, and be refused (a
  // full leader waiting for its followers' confirmations sent the key's extra back to ask it again).
  if (groupFull(view.followers.size, view.targetGroupSize)) return null
  let best: StoredEntry | null = null
  for (const e of entries) {
    if (!e.looking || e.expiration <= view.now || e.peerId === view.selfId || view.followers.has(e.peerId)) continue
    if (outranks(e.expiration, e.peerId, view.myExpiration, view.selfId)) continue
    if (view.tried.has(reverseKey(e.peerId, e.expiration))) continue
    if (view.silent != null && isSilent(view.silent, e.peerId, view.now)) continue
    const seen = view.seenSince.get(triedKey(e.peerId, e.expiration))
    if (seen === undefined || view.now - seen < view.after) continue
    if (best == null || outranks(e.expiration, e.peerId, best.expiration, best.peerId)) best = e
  }
  return best
}

/** What aloneUnderKey looks at in a search. */
export interface KeyView {
  readonly groupKey: string
  readonly leftoverKey?: string
  readonly followers: ReadonlyMap<string, unknown>
}

/** When the entries under our key were read, and the declaration they are judged against (seconds). */
export interface ViewAge {
  /** When the replicas' answer arrived. */
  readonly readAt: number
  /** When our declaration ended. */
  readonly declaredUntil: number
  readonly averagingExpiration: number
  /** When our declaration was stored, so that others could see it (Infinity: it never was). */
  readonly storedAt: number
  /** Seconds our earlier declarations under this key in this search could be seen, each ending with nobody come (Search.aloneSeconds). */
  readonly seenBefore?: number
}

/**
 * Whether a whole declaration passed with nobody else looking under our key: the rest of our
 * Moshpit key grouped without us (a group assembled at its expiration one short, a member lost),
 * and nobody will come before the next round. Seen at 16 peers on a 4x4 grid under load: such
 * peers re-declared alone until their step timed out. Only where there is a leftover key to go to,
 * and only on a view read in the second half of the declaration: an agent frozen (SIGSTOP) past
 * its declaration's end woke with the view from before the freeze, in which nobody had come yet,
 * moved to the leftover key and waited there alone for the rest of its step while the others
 * grouped under their grid keys (chaos run at one fault per 15 s: 8 of 15 freezes cost 17-21 s).
 */
export function aloneUnderKey (search: KeyView, known: readonly StoredEntry[], selfId: string, now: number, view: ViewAge): boolean {
  if (search.leftoverKey == null || search.groupKey === search.leftoverKey || search.followers.size > 0) return false
  if (view.readAt < view.declaredUntil - view.averagingExpiration / 2) return false
  // Nor is a declaration that others could see for less than half its time: 256 agents in one
  // process, the four of a key stored theirs 1-17 s after their 20 s expirations had passed (replica
  // timeouts), none saw another, all four went to the leftover key, and one found no group there.
  // The time counts over the search's declarations under this key that ended with nobody come: at
  // 256, a peer whose key-mates grouped without it (it could not connect to their leader in time)
  // was visible 10.3 s and 8.4 s in two declarations of 20 s, judged neither enough, and went to the
  // leftover key a third declaration later, after the last short group there had assembled: its
  // step failed after 180 s.
  if (Math.max(0, view.declaredUntil - view.storedAt) + (view.seenBefore ?? 0) < view.averagingExpiration / 2) return false
  return othersLooking(known, selfId, now).length === 0
}

/** What aloneEarly looks at besides the search: when we declared, the followers' usual arrival time, our last look. */
export interface AloneView {
  /** When the current declaration began (seconds). */
  readonly declaredAt: number
  /** When it was stored, so that others could see it (Infinity: it never was). */
  readonly storedAt: number
  /** When it ends (seconds). */
  readonly expiration: number
  /** Seconds after a declaration by which followers have come (ArrivalClock.cutoff), if known. */
  readonly cutoff: number | undefined
  /** When the entries we judge by were read (seconds). */
  readonly readAt: number
  /** Whether this declaration already looked wide (Rendezvous ExchangeOptions.wide) for peers our replicas do not show. */
  readonly widened: boolean
  readonly requestTimeout: number
}

/**
 * Whether a peer alone under its Moshpit key goes to the leftover key before its declaration ends:
 * nobody follows it, the followers' usual arrival time (the cutoff) has passed since it declared, a
 * wide look found nobody either, and nobody else looks under the key in a view read within a request
 * timeout. Its key-mates crashed, or went to other keys after short groups: 64 agents losing 10 % a
 * round, a peer whose key had emptied waited out its 15 s declaration alone, moved to the leftover
 * key after the other keys' short groups had assembled, found nobody there and sat out its 60 s
 * step. At the cutoff it is under the leftover key before the short keys assemble (a pair waits
 * SHORT_KEY_CUTOFFS cutoffs, and looks there first: shortUnderKey). Without a cutoff (no arrivals
 * seen yet: a swarm's first round) it goes later, but still before the short keys' last look
 * (aloneCutoff).
 */
export function aloneEarly (search: KeyView, known: readonly StoredEntry[], selfId: string, now: number, view: AloneView): boolean {
  if (search.leftoverKey == null || search.groupKey === search.leftoverKey || search.followers.size > 0) return false
  // The cutoff counts from when others could first see us (a store slowed by failing replicas may outlast it).
  if (!view.widened || now - Math.max(view.declaredAt, view.storedAt) < aloneCutoff(view)) return false
  if (now - view.readAt > view.requestTimeout) return false
  return othersLooking(known, selfId, now).length === 0
}

/**
 * Seconds after it declared (or was stored) by which a peer alone under its Moshpit key stops
 * waiting for key-mates there (aloneEarly, and the wide look before it): the followers' usual arrival
 * time when known, else half its declaration, or ALONE_LEAD request timeouts before it ends if that
 * is later. Not the whole declaration: a short key's leader looks under the leftover key for extras
 * before it assembles at its expiration (extrasLookAt), and a peer alone since the round began (its
 * declaration as old) got there just after (64 peers, seed 302: the first round's only short key
 * assembled three, 0.3 s before its hidden fourth moved, which then sat out its 60 s step alone under
 * the leftover key). It leaves a request timeout before that look, for its wide look, the move and
 * its store.
 */
export function aloneCutoff (view: Pick<AloneView, 'cutoff' | 'declaredAt' | 'expiration' | 'requestTimeout'>): number {
  if (view.cutoff !== undefined) return view.cutoff
  const span = view.expiration - view.declaredAt
  return Math.max(span / 2, span - ALONE_LEAD * view.requestTimeout)
}

/** Request timeouts before its expiration that a short leader first looks for extras (extrasLookAt). */
export const EXTRAS_LOOK_LEAD = 2
/** Request timeouts before its declaration ends that a peer alone under its key, without arrival times, leaves (aloneCutoff). */
export const ALONE_LEAD = EXTRAS_LOOK_LEAD + 1

/**
 * Whether a peer alone under the leftover key looks under its Moshpit key again (`homeKey`) for peers
 * that declared there since it left: nobody follows it, the followers' usual arrival time (a whole
 * declaration while it has none) has passed since others could first see it under the leftover key
 * (`visibleSince`: the extras and short groups of its round would have come by then), nobody else looks
 * there in a view read within a request timeout, and it last looked home a request timeout ago or more.
 *
 * Where peers step at their own pace (the chaos swarm: 8 agents, each trainer on its own cadence), one
 * turned away under its key (extraUnderKey) went to the leftover key, where nobody comes in a swarm
 * without short keys, and sat out its 16 s step while the others' next steps formed some 50 groups under
 * the Moshpit keys; in a swarm stepping in rounds nobody new declares under its key, and it stays. The
 * time counts from the first declaration there, not the current one: each lasts averagingExpiration,
 * and where the arrival time reached that cap (followers often late: freezes, own-paced trainers) no
 * look was ever due within one (a peer sat 14 s there in a churn run until its step failed).
 */
export function peekHomeDue (search: KeyView & { readonly homeKey: string, readonly peekedHomeAt: number, readonly visibleSince: number | null }, known: readonly StoredEntry[], selfId: string, now: number, view: Pick<AloneView, 'cutoff' | 'readAt' | 'requestTimeout'> & { readonly averagingExpiration: number }): boolean {
  if (search.leftoverKey == null || search.groupKey !== search.leftoverKey || search.homeKey === search.leftoverKey || search.followers.size > 0) return false
  // No arrival times yet (an agent's first steps): a whole declaration there. A fault-free run of the
  // chaos swarm lost an agent's second step so: one too many under its key, then 16 s alone here.
  const arrivalTime = view.cutoff ?? view.averagingExpiration
  if (search.visibleSince == null || now - search.visibleSince < arrivalTime || now - view.readAt > view.requestTimeout) return false
  if (now - search.peekedHomeAt < view.requestTimeout) return false
  return othersLooking(known, selfId, now).length === 0
}

/** What extraUnderKey looks at in a search: KeyView, and the signs that the key's groups formed without us. */
export interface ExtraView extends KeyView {
  /** Refusals in this search under this key that say a group formed or filled without us (formedWithoutUs). */
  readonly turnedAway: number
  /** Peers we saw looking under this key in a view read once we had been visible there a while (seenAfterVisible). */
  readonly seenLooking: ReadonlySet<string>
  /** Peers of the wave before ours under this key (NEXT_WAVE named them): their group forming without us is no sign we are one too many. */
  readonly otherWave?: ReadonlySet<string>
}

/**
 * Whether a leader's refusal says a group under our key formed or filled without us (extraUnderKey):
 * GROUP_IS_FULL, or NOT_LOOKING_FOR_GROUP from a peer that stopped looking once our declaration there
 * could be seen (`visibleSince`, when it was first stored; null: not yet). Where peers step at their
 * own pace, a step often begins as the last wave under its key leaves: the view still shows the
 * wave's declarations looking (their withdrawals are on the way), the peer asks one, is refused, and
 * counted itself one too many; under the leftover key nobody came, and it sat out its step while the
 * next wave grouped at home (8 agents at one fault per 15 s, debug run: every one of 11 steps over 4 s,
 * 6 to 16 s each, about 5 % of the swarm's time). A refusal that does not say when (agents before
 * stopped_looking) counts, as it did.
 */
export function formedWithoutUs (reply: { readonly code: MatchCode, readonly stoppedLooking?: number } | null, now: number, visibleSince: number | null): boolean {
  if (reply?.code === MatchCode.GROUP_IS_FULL) return true
  if (reply?.code !== MatchCode.NOT_LOOKING_FOR_GROUP) return false
  const ago = reply.stoppedLooking ?? 0
  if (!(ago > 0)) return true
  return visibleSince != null && now - ago >= visibleSince
}

/**
 * Whether a view read at `readAt` counts for seenLooking (extraUnderKey's withdrawn peers): read
 * `settle` seconds or more after our declaration under the key was first stored. A declaration the
 * view shows looking before then may be a wave that grouped before anyone could see us, its
 * withdrawal still on the way (formedWithoutUs).
 */
export function seenAfterVisible (readAt: number, visibleSince: number | null, settle: number): boolean {
  return visibleSince != null && readAt - visibleSince >= settle
}

/**
 * Whether we are one too many under our key: the key's groups formed without us (they turned us
 * away, or peers we saw looking there have withdrawn: grouped, even where we ranked first and
 * waited for them, their views lacking us), nobody follows us, and nobody else looks under it now.
 * Moshpit keys hold targetGroupSize peers when every group of the round before was full; once one
 * was not (a split, a lost member), one key gets a peer too many and another one too few in every
 * later round. The
 * extra went on to the leftover key only after waiting out its whole declaration alone (64 peers:
 * one peer groupless in every round after a split, 60 s steps), by which time the short key had
 * assembled without it. Now it goes at once, and a short key's leader looks for it there
 * (shortUnderKey). Like aloneUnderKey, only where there is a leftover key to go to.
 */
export function extraUnderKey (search: ExtraView, known: readonly StoredEntry[], selfId: string, now: number): boolean {
  if (search.leftoverKey == null || search.groupKey === search.leftoverKey || search.followers.size > 0) return false
  if (othersLooking(known, selfId, now).length > 0) return false
  return search.turnedAway > 0 || known.some(e => !e.looking && e.peerId !== selfId && e.expiration > now && search.seenLooking.has(e.peerId) && search.otherWave?.has(e.peerId) !== true)
}

/**
 * Whether a leader about to assemble short of the target (early, or at its expiration) first looks
 * for extras under the leftover key (extraUnderKey, othersLooking): it leads followers, has room, has
 * looked fewer than EXTRA_LOOKS times in this declaration, and is on its Moshpit key (there is a
 * leftover key, and it is not on it).
 */
export function shortUnderKey (search: KeyView, targetGroupSize: number, looksThisDeclaration: number): boolean {
  return search.leftoverKey != null && search.groupKey !== search.leftoverKey && looksThisDeclaration < EXTRA_LOOKS &&
    search.followers.size > 0 && search.followers.size + 1 < targetGroupSize
}

/** Looks under the leftover key for extras a short leader takes per declaration (shortUnderKey): one, and one more after extraGrace. */
export const EXTRA_LOOKS = 2

/**
 * How long a short leader that found no extra under the leftover key holds its early assembly before
 * it looks there once more (shortUnderKey): an ask and its refusal (a request timeout) and a store
 * (`storeSeconds`, what our own declaration's took). The key with one too many fills about when ours
 * gathers; its extra learns it is one too many at its ask's refusal, and can be seen under the leftover
 * key once its declaration there is stored. Under two busy cores a short key that looked once found
 * none, assembled, and left the extra alone 0.1-0.9 s later (lopsided-views' five-and-three tests, 4
 * runs in 10). Only a leader with a quorum that found none holds (short of a quorum it goes to the
 * leftover key anyway: meetUnderLeftovers), and never past its expiration.
 */
export function extraGrace (requestTimeout: number, storeSeconds: number): number {
  return requestTimeout + Math.max(0, Number.isFinite(storeSeconds) ? storeSeconds : 0)
}

/**
 * When a short leader's next look under the leftover key for extras falls due unless it could assemble
 * early first (extrasLookDue), for the declaration ending at `expiration`: the first EXTRAS_LOOK_LEAD
 * request timeouts before it assembles there, the second once extraGrace passed since the first
 * (`graceEnds`), and half a request timeout before the expiration at the latest. An extra it finds has
 * to see the leader's declaration there and ask before that expiration: with looks in the last request
 * timeout only, a leader that moved 0.2-0.4 s before it assembled three without the extra (0.5 s
 * request timeouts under two CPU burners, lopsided-views' first-round test). A peer alone under its
 * key gets there before the first look (aloneCutoff).
 */
export function extrasLookAt (looks: number, expiration: number, requestTimeout: number, graceEnds: number): number {
  if (looks >= EXTRA_LOOKS) return Infinity
  return looks === 0 ? expiration - EXTRAS_LOOK_LEAD * requestTimeout : Math.min(expiration - requestTimeout / 2, graceEnds)
}

/**
 * Whether a short leader looks under the leftover key for extras now: the first look when it could
 * assemble early (`early`), else at extrasLookAt (`at`), as the second.
 */
export function extrasLookDue (looks: number, early: boolean, now: number, at: number): boolean {
  if (looks >= EXTRA_LOOKS) return false
  return (looks === 0 && early) || now >= at
}

/**
 * Whether a leader about to assemble short (shortUnderKey) takes its group under the leftover key
 * even when no extra waits there: its group is short of the early quorum (a pair, at groups of
 * four), so another such group, or an extra arriving, can make a fuller group with it, and groups of
 * any Moshpit key meet there. With 10 % of 64 peers crashing a round, keys kept their holes round
 * after round (the grid rule has no way to refill them): by round 6, 9 pairs among 15 groups, and
 * the grid did worse than random groups, which repack the live peers into fours every round. The
 * members' next bits still come from our key (Search.gridKey): merged groups refill that key's next
 * places. A leader at the leftover key that finds room for its group there joins it (JoinRequest
 * bringing); a full one refuses it, and the pair assembles as it was.
 */
export function meetUnderLeftovers (members: number, targetGroupSize: number, minGroupSize: number): boolean {
  return members >= 2 && members < earlyQuorum(targetGroupSize, minGroupSize)
}

/**
 * Whether a group short of the quorum that found nobody under the leftover key may go there to meet other
 * short groups (meetUnderLeftovers) at `now`: not before a request timeout has passed since it declared,
 * the time its key-mates' declarations take to be stored and asked. Its first look falls EXTRAS_LOOK_LEAD
 * request timeouts before its expiration, which a declaration of two request timeouts or less puts at
 * the declaration itself: a key of four whose views lagged under load (replicas showing two or three of
 * it) formed two pairs, and each went to the leftover key ~0.1 s after declaring, before the pairs could
 * find each other; there they met the pairs of another key, and the grid's second round mixed only two
 * first-round groups (16 peers on a 4×4 grid, six-second declarations and three-second requests: a
 * clean-clone CI run with a build running beside it). With the wait, the pairs of one key find each other
 * under it, or meet the other short groups after it. The early look (when the pair could assemble early:
 * SHORT_KEY_CUTOFFS arrival cutoffs) waits as well; where both come a request timeout or more after
 * declaring, nothing changes.
 */
export function meetDue (declaredAt: number, now: number, requestTimeout: number): boolean {
  return now - declaredAt >= requestTimeout
}

/** The declarations of others that are looking and unexpired at `now`: who else is under a key (the extras a short leader goes to, among others). */
export function othersLooking (known: readonly StoredEntry[], selfId: string, now: number): StoredEntry[] {
  return known.filter(e => e.looking && e.peerId !== selfId && e.expiration > now)
}

/** Members a leader must have (itself included) before it may assemble short of its expiration: a strict majority of the target, and minGroupSize. */
export function earlyQuorum (targetGroupSize: number, minGroupSize: number): number {
  return Math.max(minGroupSize, Math.floor(targetGroupSize / 2) + 1, 2)
}

/**
 * The arrival delays a leader's BEGIN_ALLREDUCE shares that a follower records (arrivals.ts): at
 * most one per other member, each a time within a declaration (0 to our averagingExpiration, the
 * swarm's). A message with more than that is not a leader's own record: none is taken.
 */
export function sharedArrivals (delays: readonly number[], groupSize: number, averagingExpiration: number): number[] {
  if (delays.length > groupSize - 1) return []
  return delays.filter(d => Number.isFinite(d) && d >= 0 && d <= averagingExpiration)
}

/** What assembleEarly looks at: the leader's search, its arrival cutoff and when it declared. */
export interface EarlyView {
  readonly followers: ReadonlyMap<string, unknown>
  /** When the current declaration began (seconds). */
  readonly declaredAt: number
  /** Seconds after a declaration by which followers have come (ArrivalClock.cutoff), if known. */
  readonly cutoff: number | undefined
  readonly quorum: number
  /** Fewest members (itself included) a leader assembles early with below the quorum, later (SHORT_KEY_CUTOFFS); none: never below it. */
  readonly fewest?: number
  /** Peers that did not answer our probe within a request timeout (isSilent): not waited for. */
  readonly silent?: SilentPeers
  /** Peers whose group and ours were found too big for one group under this key (Search.noRoom): not waited for. */
  readonly noRoom?: ReadonlySet<string>
  /** Under the leftover key: when a quorum there stops waiting for the arrival cutoff (leftoverSettled). */
  readonly settledAt?: number
  /** When we first turned away an asker of the key's next wave (nextWave): with a quorum, nobody of ours is still to come. */
  readonly nextWaveAt?: number
  /** Peers of another wave under this key (Search.otherWave): not waited for. */
  readonly otherWave?: ReadonlySet<string>
}

/**
 * When a leader under the leftover key with a quorum stops waiting for the followers' arrival cutoff:
 * once `settle` (extraGrace: an ask, its refusal and a store) has passed since it could be seen there.
 * The cutoff is learnt from followers joining under grid keys, where a key's members come as their
 * steps begin; nobody is due under the leftover key, where peers come only as they find themselves one
 * too many or alone, at once. With trainers that block on their steps under churn, arrivals spread
 * over the whole 3-s declaration, the cutoff reached its cap (the declaration), and 41 of 46 groups of
 * three under the leftover key waited out their declarations there (one debug run of 453 s: ~2 s of
 * three members' steps each), refused as full by everybody else looking there. Peers seen looking
 * there that could still join are waited for as before (assembleEarly).
 */
export function leftoverSettled (visibleSince: number, settle: number): number {
  return visibleSince + settle
}

/** What nextWave looks at in a leader's search. */
export interface WaveView extends KeyView {
  /** When our search began (seconds): the wave we belong to was under way by then. */
  readonly startedAt: number
}

/**
 * Whether a leader turns an asker away as the key's next wave (NEXT_WAVE): the leader leads a quorum
 * and has room, is on its Moshpit key (not the leftover key, where short groups of any wave meet),
 * and the asker's last group formed after the leader began looking (`averagedAgo` seconds before
 * `now`; 0: not said). Peers whose steps block on their rounds step in waves: every group of a wave
 * forms at about one time, and the next wave's members come a training step later. After a fault a
 * short key's quorum waited past that, took a member of the next wave as its last, and so formed only
 * as that wave's group did: from then on one group formed at a time, each waiting for a member of the
 * one before (8 blocking trainers under churn: 28-46 % of groups in waves against 94-99 % fault-free,
 * and ~65 % of the fault-free steps a minute while it lasted). Turned away, that member leads its own
 * wave under the key, and the quorum goes at once (earlyAfter): the waves come back. Steps that begin
 * only after every group of the last round formed (a round-based swarm) never lap a leader.
 */
export function nextWave (view: WaveView, quorum: number, averagedAgo: number, now: number): boolean {
  if (!(averagedAgo > 0) || !Number.isFinite(averagedAgo)) return false
  if (view.leftoverKey !== undefined && view.groupKey === view.leftoverKey) return false
  const members = view.followers.size + 1
  return members >= quorum && now - averagedAgo > view.startedAt
}

/**
 * Below the quorum a leader waits this many arrival cutoffs, not one. A key two of four members
 * reach (its other two crashed, or went to other keys after a short group the round before) waited
 * out whole declarations for nobody: 15 s rounds at 64 peers losing one a round, where the rest
 * took 6-9 s. Cutting such a key short risks more than cutting a quorum short (a late pair then
 * meets apart, two pairs where a group of four could have been), so it is given the cutoff twice.
 */
export const SHORT_KEY_CUTOFFS = 2

/** The fewest members a short key assembles early with: minGroupSize, and never one alone. */
export function shortKeyFewest (minGroupSize: number): number {
  return Math.max(minGroupSize, 2)
}

/**
 * Seconds after its declaration from which a leader with this view's followers may assemble short
 * of its expiration (undefined: not before its expiration): the arrival cutoff with a quorum (under
 * the leftover key, its settling if sooner: leftoverSettled; once the key's next wave asked, at once:
 * nextWave, with or without arrival times), SHORT_KEY_CUTOFFS of it with at least `fewest` members.
 */
export function earlyAfter (view: EarlyView): number | undefined {
  const members = view.followers.size + 1
  const lapped = view.nextWaveAt === undefined ? undefined : Math.max(0, view.nextWaveAt - view.declaredAt)
  if (view.cutoff === undefined) return members >= view.quorum ? lapped : undefined
  if (members >= view.quorum) return Math.min(view.cutoff, lapped ?? Infinity, view.settledAt === undefined ? Infinity : Math.max(0, view.settledAt - view.declaredAt))
  if (view.fewest !== undefined && members >= view.fewest) return SHORT_KEY_CUTOFFS * view.cutoff
  return undefined
}

/**
 * Whether a leader assembles now instead of at its expiration: it has a quorum, the arrival
 * cutoff passed since it declared (fewer members than a quorum: earlyAfter's longer wait), and
 * every peer it sees looking under its key (unexpired) has
 * joined it or did not answer us within a request timeout. A peer seen declaring that answers is
 * waited for as before, however late: it may be asking another leader or held by slow replicas,
 * and leaving it out would split its key. Only peers not looking at all (killed, frozen before
 * declaring, not stepping yet), and peers seen looking that did not answer a probe sent after the
 * cutoff within a request timeout (frozen after declaring: chaos runs had leaders wait whole
 * declarations for them), are given up on. A healthy peer that is merely slow to ask still
 * answers the probe (join-protocol.ts aliveProtocol, served without our locks), so it is waited for; one that was
 * stalled past a request timeout is turned away when it asks (counted as a late arrival, which
 * moves the cutoff) and looks again, the cost of any of its asks timing out.
 * Nor is a peer that cannot join us whole (missingPeers: Search.noRoom).
 */
export function assembleEarly (view: EarlyView, known: readonly StoredEntry[], selfId: string, now: number): boolean {
  if (!probeMissing(view, now)) return false
  return missingPeers(view, known, selfId, now).every(e => view.silent != null && isSilent(view.silent, e.peerId, now))
}

/**
 * The peers a leader sees looking under its key (unexpired) that have not joined it and could:
 * whom assembleEarly waits for. A peer whose group and ours were found too big for one (noRoom) is
 * not among them: two groups of three that took themselves to the leftover key for the same lone
 * peer there, each refused by the other as full, waited for each other until their declarations
 * ended (blocking trainers under churn: ~2 s of three members' steps, many times a minute). Nor is a
 * peer of another wave under the key (nextWave).
 */
export function missingPeers (view: Pick<EarlyView, 'followers' | 'noRoom' | 'otherWave'>, known: readonly StoredEntry[], selfId: string, now: number): StoredEntry[] {
  return known.filter(e => e.looking && e.expiration > now && e.peerId !== selfId && !view.followers.has(e.peerId) &&
    view.noRoom?.has(e.peerId) !== true && view.otherWave?.has(e.peerId) !== true)
}

/**
 * Whether a leader probes the peers it waits for (missingPeers): only once it could assemble
 * without them (earlyAfter passed), so a healthy swarm sends no probes at all.
 */
export function probeMissing (view: EarlyView, now: number): boolean {
  const after = earlyAfter(view)
  return after !== undefined && now >= view.declaredAt + after
}

