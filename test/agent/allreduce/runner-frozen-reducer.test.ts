import { test } from 'node:test'
import assert from 'node:assert/strict'
import { AllReduceRunner, type AllReduceResult } from '../../../agent/allreduce/runner.js'
import type { AggregateDialer, ChannelOptions } from '../../../agent/allreduce/aggregate-dialer.js'
import { AggregateHeader, PeerMode, type PeerInfo } from '../../../agent/proto/averaging.js'
import type { FrameChannel } from '../../../agent/net/frame-channel.js'
import { MemoryChannel } from './memory-channel.js'
import { TimeoutError } from '../../../agent/errors.js'
import { codecFor } from '../../../agent/compression/index.js'
import type { GroupInfo } from '../../../agent/matchmaking/group-info.js'

// Three members and one stopped with SIGSTOP just before the round: it sends nothing, and a
// channel to it never opens (a TLS handshake or a libp2p dial to a stopped process is never
// answered; the dial gives up at its own timeout). The others cut it off as a sender by the
// adaptive deadline; as a reducer they must give up on it then too, not when the dial to it
// times out (the chaos run's rounds that took 5.0 s: the dial's timeout, where the adaptive
// deadline had said ~4 s), and without a second slack on top of the first (those that took ~4.1 s).

const ELEMENTS = 4096
const PART_BYTES = 1024
const SLACK_MS = 1000
/** The fixed timeouts, long enough that a round finishing before them cannot be luck. */
const SENDER_TIMEOUT_MS = 8000
const REDUCER_TIMEOUT_MS = 16_000
const IDS = ['peer-a', 'peer-b', 'peer-c', 'peer-frozen']
const FROZEN = 3

/** How long dials to the frozen member were pending before they ended, and how they ended. */
interface FrozenDial { endedAfterMs?: number, aborted?: boolean }

/**
 * Dials between the live runners: an in-memory pair whose far end goes to the reducer's
 * acceptSender after the header (as the aggregate handler does). A dial to the frozen member is
 * pending until its timeout, or until the caller's signal aborts it.
 */
function dialerFor (from: string, runners: Map<string, AllReduceRunner>, frozenDials: FrozenDial[]): AggregateDialer {
  const open = async (peer: string, _info: PeerInfo, options: ChannelOptions): Promise<FrameChannel> => {
    if (peer === IDS[FROZEN]) {
      const record: FrozenDial = {}
      frozenDials.push(record)
      const started = Date.now()
      return await new Promise<FrameChannel>((_resolve, reject) => {
        const timer = setTimeout(() => { record.endedAfterMs = Date.now() - started; reject(new TimeoutError(`no TLS handshake with ${peer} within ${options.timeoutMs} ms`)) }, options.timeoutMs)
        options.signal?.addEventListener('abort', () => {
          clearTimeout(timer)
          record.endedAfterMs = Date.now() - started
          record.aborted = true
          reject(options.signal!.reason)
        }, { once: true })
      })
    }
    const [mine, theirs] = MemoryChannel.pair(from, peer)
    void (async () => {
      const header = await theirs.read(REDUCER_TIMEOUT_MS)
      if (header == null) return
      AggregateHeader.decode(header)
      await runners.get(peer)!.acceptSender(theirs, from)
    })().catch(() => {})
    return mine
  }
  // Memory channels are never kept across rounds (only direct ones are).
  return { open, openOverLibp2p: async () => { throw new Error('no libp2p in this test') }, takeKept: () => null, keep: () => false } as unknown as AggregateDialer
}

function info (): PeerInfo {
  return { mode: PeerMode.NODE, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 }
}

function values (p: number): Float32Array {
  return Float32Array.from({ length: ELEMENTS }, (_, i) => p * 10 + (i % 7))
}

test('a member frozen before its round is given up on as a reducer once the others have answered: its pending channel is aborted, with no second slack', { timeout: 60_000 }, async () => {
  const groupId = new Uint8Array(20).fill(7)
  const runners = new Map<string, AllReduceRunner>()
  const frozenDials: FrozenDial[] = []
  const tensors = [0, 1, 2].map(values)
  for (let p = 0; p < 3; p++) {
    const group: GroupInfo = { groupId, peerIds: IDS, infos: IDS.map(info), myIndex: p, leader: IDS[0] }
    runners.set(IDS[p], new AllReduceRunner({
      dialer: dialerFor(IDS[p], runners, frozenDials),
      group,
      tensors: [tensors[p]],
      codec: codecFor('none'),
      partSizeBytes: PART_BYTES,
      alpha: 1,
      timeoutMs: 4 * SENDER_TIMEOUT_MS,
      senderTimeoutMs: SENDER_TIMEOUT_MS,
      deadlineSlackMs: SLACK_MS,
      reducerTimeoutMs: REDUCER_TIMEOUT_MS,
      kernels: 'js'
    }))
  }
  const started = Date.now()
  const results: AllReduceResult[] = await Promise.all([...runners.values()].map(async r => await r.run()))
  const wallMs = Date.now() - started
  const frozen = IDS[FROZEN]
  for (const [p, r] of results.entries()) {
    assert.deepEqual(r.cutOffSenders, { adaptive: [frozen], fixed: [] }, `member ${p} cut the frozen member off as a sender by the adaptive deadline`)
    assert.deepEqual(r.cutOffReducers, { adaptive: [frozen], fixed: [] }, `member ${p} cut it off as a reducer by the adaptive deadline`)
    assert.deepEqual(r.failedReducers, [frozen], `member ${p} gave up on the frozen reducer, and only on it`)
    assert.ok(r.partsKeptLocal > 0, `member ${p} kept the frozen member's span local`)
  }
  // Sender cut-off at ~SLACK_MS (the others' waits are a few ms); the reducer one follows as soon as
  // the three live reducers have answered, not SLACK_MS later, and not at the dial's timeout.
  assert.equal(frozenDials.length, 3, 'each live member dialled the frozen one')
  for (const d of frozenDials) {
    assert.equal(d.aborted, true, `the dial to the frozen member was aborted by the cut-off (it ended after ${d.endedAfterMs} ms)`)
  }
  assert.ok(wallMs < 1.5 * SLACK_MS, `the round took ${wallMs} ms: the sender cut-off (${SLACK_MS} ms) plus the live reducers' answers, not a second slack (${2 * SLACK_MS} ms) nor the dial's timeout (${REDUCER_TIMEOUT_MS} ms)`)
  // The live members' spans hold the mean of the three; the frozen member's span, each one's own values.
  const mean = Float32Array.from({ length: ELEMENTS }, (_, i) => (tensors[0][i] + tensors[1][i] + tensors[2][i]) / 3)
  const own = [0, 1, 2].map(values)
  let kept = 0
  for (let i = 0; i < ELEMENTS; i++) {
    const averaged = tensors.every(t => Math.abs(t[i] - mean[i]) < 1e-4)
    const local = tensors.every((t, p) => t[i] === own[p][i])
    if (!averaged && !local) assert.fail(`element ${i}: neither the mean of the three ${mean[i]} nor each one's own value (${tensors.map(t => t[i]).join(', ')})`)
    if (local && !averaged) kept++
  }
  assert.equal(kept, ELEMENTS / 4, 'the frozen member\'s span (a quarter, equal bandwidths) stayed local, the rest was averaged')
})
