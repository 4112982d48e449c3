import type { MatchCode, MessageFromLeader } from '../proto/averaging.js'
import { peerIdFromBytes } from '../net/rpc.js'

/**
 * A leader's message with every field empty but its code, reason and `fields`: refusals, ACCEPTED,
 * GROUP_DISBANDED and BEGIN_ALLREDUCE all start from it, so a field added to the proto is defaulted
 * in one place.
 */
export function leaderMessage (code: MatchCode, reason: string, fields: Partial<MessageFromLeader> = {}): MessageFromLeader {
  return {
    code,
    groupId: new Uint8Array(0),
    orderedPeerIds: [],
    gathered: [],
    suggestedLeader: new Uint8Array(0),
    reason,
    arrivalDelays: [],
    gridKey: '',
    leaderKey: '',
    noRoomFor: 0,
    stoppedLooking: 0,
    confirmWanted: false,
    ...fields
  }
}

/**
 * The peer ids a full group's message lists (ordered_peer_ids of GROUP_IS_FULL, or of an ACCEPTED that
 * sends some of the asker's followers away): at most `max` read, ids that do not parse skipped.
 */
export function listedPeers (listed: readonly Uint8Array[], max: number): string[] {
  const ids: string[] = []
  for (const bytes of listed.slice(0, max)) {
    try { ids.push(peerIdFromBytes(bytes).toString()) } catch {}
  }
  return ids
}
