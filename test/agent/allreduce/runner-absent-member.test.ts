import { test } from 'node:test'
import assert from 'node:assert/strict'
import { AllReduceRunner, type AllReduceResult } from '../../../agent/allreduce/runner.js'
import type { AggregateDialer } from '../../../agent/allreduce/aggregate-dialer.js'
import { AggregateHeader, AggregateReply, MatchCode, PeerMode, type PeerInfo } from '../../../agent/proto/averaging.js'
import type { FrameChannel } from '../../../agent/net/frame-channel.js'
import { codecFor } from '../../../agent/compression/index.js'
import type { GroupInfo } from '../../../agent/matchmaking/group-info.js'
import { MemoryChannel } from './memory-channel.js'

// A member that runs no such round (a span repair it did not take part in, a round it left) answers
// "no such group" as a reducer: it sends nothing either, so the others leave it out as a sender at
// once instead of waiting for it until a deadline; its span stays local, the rest is the exact mean.

const ELEMENTS = 4096
const PART_BYTES = 1024
const SLACK_MS = 2000
const IDS = ['peer-a', 'peer-b', 'peer-c', 'peer-absent']
const ABSENT = 3

function dialerFor (from: string, runners: Map<string, AllReduceRunner>): AggregateDialer {
  const open = async (peer: string): Promise<FrameChannel> => {
    const [mine, theirs] = MemoryChannel.pair(from, peer)
    void (async () => {
      const header = await theirs.read(10_000)
      if (header == null) return
      AggregateHeader.decode(header)
      if (peer === IDS[ABSENT]) {
        await theirs.write(AggregateReply.encode({ code: MatchCode.NOT_LOOKING_FOR_GROUP, reason: 'no repair of that round here' }))
        await theirs.closeWrite()
        return
      }
      await runners.get(peer)!.acceptSender(theirs, from)
    })().catch(() => {})
    return mine
  }
  // Memory channels are never kept across rounds (only direct ones are).
  return { open, openOverLibp2p: async () => { throw new Error('no libp2p in this test') }, takeKept: () => null, keep: () => false } as unknown as AggregateDialer
}

const info = (): PeerInfo => ({ mode: PeerMode.NODE, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 })
/** Member `me` of the group IDS (led by the first), averaging `tensor` with fixed timeouts. */
function runnerOf (dialer: AggregateDialer, groupId: Uint8Array, me: number, tensor: Float32Array): AllReduceRunner {
  const group: GroupInfo = { groupId, peerIds: IDS, infos: IDS.map(info), myIndex: me, leader: IDS[0] }
  return new AllReduceRunner({
    dialer,
    group,
    tensors: [tensor],
    codec: codecFor('none'),
    partSizeBytes: PART_BYTES,
    alpha: 1,
    timeoutMs: 40_000,
    senderTimeoutMs: 10_000,
    deadlineSlackMs: SLACK_MS,
    reducerTimeoutMs: 20_000,
    kernels: 'js'
  })
}

const values = (p: number): Float32Array => Float32Array.from({ length: ELEMENTS }, (_, i) => p * 10 + (i % 7))

test('a member that answers it runs no such round is left out as a sender at once: no deadline waited, its span local, the rest the exact mean', { timeout: 60_000 }, async () => {
  const groupId = new Uint8Array(20).fill(3)
  const runners = new Map<string, AllReduceRunner>()
  const tensors = [0, 1, 2].map(values)
  for (let p = 0; p < 3; p++) {
    runners.set(IDS[p], runnerOf(dialerFor(IDS[p], runners), groupId, p, tensors[p]))
  }
  const started = Date.now()
  const results: AllReduceResult[] = await Promise.all([...runners.values()].map(async r => await r.run()))
  const wallMs = Date.now() - started
  const absent = IDS[ABSENT]
  for (const [p, r] of results.entries()) {
    assert.deepEqual(r.failedReducers, [absent], `member ${p} lost the absent member's span`)
    assert.deepEqual(r.bannedSenders, [absent], `member ${p} left it out as a sender`)
    assert.deepEqual(r.cutOffSenders, { adaptive: [], fixed: [] }, `member ${p} did not wait for a deadline to do so`)
  }
  assert.ok(wallMs < SLACK_MS / 2, `the round took ${wallMs} ms, less than the least slack a late sender gets (${SLACK_MS} ms)`)
  const mean = Float32Array.from({ length: ELEMENTS }, (_, i) => (values(0)[i] + values(1)[i] + values(2)[i]) / 3)
  let kept = 0
  for (let i = 0; i < ELEMENTS; i++) {
    const averaged = tensors.every(t => Math.abs(t[i] - mean[i]) < 1e-4)
    const local = tensors.every((t, p) => t[i] === values(p)[i])
    if (!averaged && !local) assert.fail(`element ${i}: neither the mean of the three nor each one's own value`)
    if (local && !averaged) kept++
  }
  assert.equal(kept, ELEMENTS / 4, 'the absent member\'s span (a quarter) stayed local, the rest was averaged')
})

test('a refusal over a kept direct channel is an answer: no new channel is opened to ask again', { timeout: 60_000 }, async () => {
  // One sender alone runs the round; every other member answers it runs no such round. The channels
  // to them are kept direct channels from an earlier round, the case in which a channel that broke
  // before the reducer accepted is replaced by a new one (the reducer may have restarted).
  const groupId = new Uint8Array(20).fill(4)
  const opened: string[] = []
  const refusing = (peer: string, direct: boolean): FrameChannel => {
    const [mine, theirs] = MemoryChannel.pair(IDS[0], peer)
    if (direct) (mine as { kind: string }).kind = 'direct'
    void (async () => {
      if (await theirs.read(10_000) == null) return
      await theirs.write(AggregateReply.encode({ code: MatchCode.NOT_LOOKING_FOR_GROUP, reason: 'unknown group' }))
      await theirs.closeWrite()
    })().catch(() => {})
    return mine
  }
  const dialer = {
    takeKept: (peer: string) => refusing(peer, true),
    open: async (peer: string) => { opened.push(peer); return refusing(peer, true) },
    openOverLibp2p: async (peer: string) => { opened.push(`${peer} over libp2p`); return refusing(peer, false) },
    keep: () => false
  } as unknown as AggregateDialer
  const result = await runnerOf(dialer, groupId, 0, values(0)).run()
  assert.deepEqual(opened, [], 'no channel opened after the refusals')
  assert.deepEqual([...result.failedReducers].sort(), IDS.slice(1).sort())
  assert.deepEqual([...result.bannedSenders].sort(), IDS.slice(1).sort(), 'each refuser is left out as a sender at once')
})
