import type { PeerInfo } from '../proto/averaging.js'

/** What every member of an assembled group agrees on. */
export interface GroupInfo {
  /** Random id of this round's group (20 bytes). */
  readonly groupId: Uint8Array
  /** Member peer ids in the leader's shuffled order; the order decides who reduces which span. */
  readonly peerIds: readonly string[]
  /** Per-member metadata, aligned with peerIds. */
  readonly infos: readonly PeerInfo[]
  /** Our position in peerIds. */
  readonly myIndex: number
  readonly leader: string
  /** The Moshpit key the leader took this group from to the leftover key (Search.gridKey): the members' next bits come from it. */
  readonly gridKey?: string
}

export const MAX_GROUP_SIZE = 1024

/** The most bytes of gathered data (a member's userData: the JSON of its `gather`) a group carries per member. */
export const MAX_GATHER_BYTES = 16 * 1024

/** The longest base id a member may declare (PeerInfo.base: a group id, which is 20 bytes). */
export const MAX_BASE_ID_BYTES = 32

export function groupIdHex (groupId: Uint8Array): string {
  return Buffer.from(groupId).toString('hex')
}

/** The most rounds a peer may claim (past the CRD's completion bound, and exact in a double). */
export const MAX_ROUND = 1e15

export function validRound (round: number): boolean {
  return Number.isInteger(round) && round >= 0 && round <= MAX_ROUND
}
