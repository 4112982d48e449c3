import { randomBytes } from 'node:crypto'
import { MatchCode, type MessageFromLeader, type PeerInfo } from '../proto/averaging.js'
import { peerIdToBytes } from '../net/rpc.js'
import { shuffle } from '../util/random.js'
import type { GroupInfo } from './group-info.js'

export interface Follower {
  readonly peerId: string
  readonly info: PeerInfo
  /** Delivers the leader's second message: BEGIN_ALLREDUCE or GROUP_DISBANDED. */
  readonly settle: (message: MessageFromLeader) => void
}

/**
 * The state of one group search: our declaration, the followers we lead, the leader we follow.
 * A peer is a leader (followers, no leader) or a follower (a leader, no followers), never both,
 * so it can never end up in two groups.
 */
export class Search {
  declaredExpiration: number | null = null
  currentLeader: string | null = null
  readonly followers = new Map<string, Follower>()
  readonly tried = new Set<string>()
  readonly rejections: string[] = []
  /** Assembles at our declared expiration, whatever the search loop is waiting on then. */
  expiryTimer: NodeJS.Timeout | undefined
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
    readonly leftoverKey?: string
  ) {
    this.done = new Promise(resolve => { this.finish = resolve })
  }

  get assembled (): boolean { return this.outcome != null }
  get group (): GroupInfo | null { return this.outcome }

  /** Becomes a group of our followers and us; every follower learns the same id, order and metadata. */
  assemble (): GroupInfo {
    if (this.outcome != null) return this.outcome
    const members = shuffle([
      ...[...this.followers.values()].map(f => ({ peerId: f.peerId, info: f.info })),
      { peerId: this.selfId, info: this.info }
    ])
    const groupId = randomBytes(20)
    const message: MessageFromLeader = {
      code: MatchCode.BEGIN_ALLREDUCE,
      groupId,
      orderedPeerIds: members.map(m => peerIdToBytes(m.peerId)) as Array<Uint8Array<ArrayBuffer>>,
      gathered: members.map(m => m.info),
      suggestedLeader: new Uint8Array(0),
      reason: ''
    }
    for (const follower of this.followers.values()) follower.settle(message)
    this.followers.clear()
    return this.adopt({
      groupId,
      peerIds: members.map(m => m.peerId),
      infos: members.map(m => m.info),
      myIndex: members.findIndex(m => m.peerId === this.selfId),
      leader: this.selfId
    })
  }

  adopt (group: GroupInfo): GroupInfo {
    if (this.outcome == null) {
      this.outcome = group
      this.finish(group)
    }
    return this.outcome
  }

  /** Sends our followers away, pointing them at our new leader when we joined one. */
  disband (suggestedLeader: string | null, reason: string): void {
    const message: MessageFromLeader = {
      code: MatchCode.GROUP_DISBANDED,
      groupId: new Uint8Array(0),
      orderedPeerIds: [],
      gathered: [],
      suggestedLeader: suggestedLeader != null ? peerIdToBytes(suggestedLeader) as Uint8Array<ArrayBuffer> : new Uint8Array(0),
      reason
    }
    for (const follower of this.followers.values()) follower.settle(message)
    this.followers.clear()
  }
}
