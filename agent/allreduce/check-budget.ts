import { AGGREGATE_RECEIVE_WINDOW } from './aggregate-protocol.js'

/**
 * How long a liveness check of a group member (late-checks.ts) may go unanswered before its
 * silence says the member is gone.
 *
 * The check is a libp2p request. Where the member's parts and means take the direct data channel,
 * its libp2p connection carries little else: a request timeout. Where they take libp2p streams, the
 * check travels that same connection both ways, behind whatever the aggregate streams let out: each
 * way, two streams (parts one way, means the other) of at most a yamux window each, and never more
 * than the round exchanges between the two. On top of the request timeout the check gets the time
 * those bytes take at the rate the member's bytes reached us while they were arriving (the other way
 * is taken to be as fast: links are symmetric more often than not).
 *
 * Why: 4 agents over libp2p on 10 Mbit/s tbf links (npm test's bench:links case) failed one run in
 * four under CPU load: a healthy reducer was cut off because a check of 2 s went unanswered. `ss` in
 * the namespaces showed the pair's connection with 330 KB and 713 KB waiting to be sent, and nothing
 * sent either way for ~2.5 s, while both agents' other connections kept flowing: one TCP flow starved
 * behind its siblings. 2 × 2 × 512 KiB at the ~0.4 MB/s a flow gets there is ~5 s.
 *
 * The rate counts from the round's start to the last byte, not to now: a member whose parts all
 * arrived long ago (small tensors, a round held up by someone else) did not get slower meanwhile.
 * No bytes from the member: the group's rate per member. No bytes at all: nothing to judge the link
 * by, and no time added (a member silent from the round's start on a link we know nothing of is
 * judged as before).
 */
export function aliveCheckBudgetMs (requestMs: number, link: SharedLink | undefined): number {
  if (link === undefined) return requestMs
  const rate = link.fromMember.bytes > 0
    ? link.fromMember.bytes / link.fromMember.activeMs
    : link.members > 0 ? link.fromAll.bytes / link.members / link.fromAll.activeMs : 0
  if (!(rate > 0) || !Number.isFinite(rate)) return requestMs
  const aheadEachWay = Math.min(2 * AGGREGATE_RECEIVE_WINDOW, link.exchangeBytes)
  return requestMs + 2 * aheadEachWay / rate
}

/** A libp2p connection that carries a member's parts or means, as our round saw it so far. */
export interface SharedLink {
  /** Bytes of parts and means the round sends each way between us and the member (its span and ours). */
  readonly exchangeBytes: number
  /** What we read from the member this round: bytes, and ms from the round's start to the last of them. */
  readonly fromMember: Arrival
  /** The same from every member. */
  readonly fromAll: Arrival
  /** Members we exchange parts or means with (the group less ourselves). */
  readonly members: number
}

export interface Arrival {
  readonly bytes: number
  readonly activeMs: number
}
