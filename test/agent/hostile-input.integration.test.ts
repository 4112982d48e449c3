import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { startSwarm, fill, maxAbsDiff, weightedMean } from './swarm-fixture.js'
import { startConnectedNodes } from '../../bench/lib/loopback-nodes.js'
import { RENDEZVOUS_PROTOCOL } from '../../agent/rendezvous/rendezvous.js'
import { DictionaryStore, DEFAULT_STORE_LIMITS, type StoredEntry } from '../../agent/rendezvous/store.js'
import { joinProtocol } from '../../agent/matchmaking/join-protocol.js'
import { aggregateProtocol } from '../../agent/allreduce/aggregate-protocol.js'
import * as pb from '../../agent/proto/averaging.js'
import type { Stream } from '@libp2p/interface'

/** Resolves once the remote closed or reset the stream, or rejects after ms. */
async function closedWithin (stream: Stream, ms: number): Promise<void> {
  if (stream.status !== 'open') return
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => { reject(new Error(`stream still open after ${ms} ms`)) }, ms)
    const done = (): void => { clearTimeout(timer); resolve() }
    stream.addEventListener('close', done)
    stream.addEventListener('remoteCloseWrite', done)
  })
}

function lengthPrefixed (payload: Uint8Array, announced = payload.byteLength): Uint8Array {
  const out = new Uint8Array(4 + payload.byteLength)
  new DataView(out.buffer).setUint32(0, announced, true)
  out.set(payload, 4)
  return out
}

test('garbage, absurd lengths and malformed messages close the stream, never the agent', { timeout: 120_000 }, async () => {
  const tensors = (p: number) => [{ name: 'x', shape: [5000], data: fill(5000, p) }]
  const swarm = await startSwarm(2, { tensors, config: () => ({ targetGroupSize: 2, minGroupSize: 2 }) })
  try {
    const [victim, attacker] = swarm.nodes
    const protocols = [RENDEZVOUS_PROTOCOL, joinProtocol('test'), aggregateProtocol('test')]
    const payloads: Array<[string, Uint8Array]> = [
      ['absurd length prefix', lengthPrefixed(new Uint8Array(8), 0xffffffff)],
      ['random bytes', randomBytes(4096)],
      ['valid frame of protobuf garbage', lengthPrefixed(randomBytes(512))],
      ['truncated frame then close', lengthPrefixed(randomBytes(100), 1000)]
    ]
    for (const protocol of protocols) {
      for (const [label, bytes] of payloads) {
        const stream = await attacker.dialProtocol(victim.peerId, protocol)
        stream.send(bytes)
        if (label.startsWith('truncated')) await stream.close()
        await closedWithin(stream, 15_000).catch((err) => { assert.fail(`${protocol} / ${label}: ${err.message}`) })
      }
    }
    // The agent still serves: a real round between the two succeeds with the exact mean.
    const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
    assert.equal(results[0].groupId, results[1].groupId)
    const expected = weightedMean([0, 1].map(p => tensors(p)[0].data), [1, 1])
    for (const a of swarm.averagers) assert.ok(maxAbsDiff(await a.withTensors(t => t[0].data), expected) < 1e-4)
  } finally { await swarm.stop() }
})

test('protobuf decoders survive random and mutated input', () => {
  const codecs = [pb.JoinRequest, pb.MessageFromLeader, pb.RendezvousRequest, pb.RendezvousResponse, pb.AggregateHeader, pb.TensorPart, pb.AggregateReply, pb.StateHeader, pb.StateChunk]
  const valid = pb.TensorPart.encode({ partIndex: 7, compression: pb.Compression.FLOAT16, data: new Uint8Array(64) })
  let seed = 12345
  const next = (): number => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return seed }
  let decoded = 0; let rejected = 0
  for (let i = 0; i < 20_000; i++) {
    let input: Uint8Array
    if (i % 2 === 0) input = randomBytes(next() % 200)
    else { input = valid.slice(); for (let m = 0; m < 1 + (next() % 4); m++) input[next() % input.length] = next() & 0xff }
    const codec = codecs[i % codecs.length]
    try { codec.decode(input); decoded++ } catch (err) { assert.ok(err instanceof Error); rejected++ }
  }
  assert.ok(decoded > 0 && rejected > 0, `both paths exercised (decoded ${decoded}, rejected ${rejected})`)
})

test('the rendezvous store bounds what one writer and all writers together can hold', () => {
  const store = new DictionaryStore({ ...DEFAULT_STORE_LIMITS, maxKeysPerPeer: 4, maxEntries: 10 })
  const entry = (peerId: string, expiration: number): StoredEntry => ({ peerId, expiration, looking: true, priority: 0, addrs: [] })
  const outcomes = Array.from({ length: 8 }, (_, k) => store.put(`key-${k}`, entry('hostile', 100), 0))
  assert.deepEqual(outcomes, ['stored', 'stored', 'stored', 'stored', 'peer-full', 'peer-full', 'peer-full', 'peer-full'])
  assert.equal(store.keyCount, 4, 'a refused write leaves no empty key behind')
  // Renewing a key it holds is always allowed; a new key only once an old entry expired.
  assert.equal(store.put('key-0', entry('hostile', 200), 0), 'stored')
  assert.equal(store.put('key-9', entry('hostile', 300), 150), 'stored', 'the entries that expired at 100 freed room')
  for (let p = 0; p < 20; p++) store.put('shared', entry(`peer-${p}`, 1000), 150)
  assert.ok(store.size <= 10, `at most maxEntries entries in all (${store.size})`)
  store.prune(2000)
  assert.equal(store.size, 0)
  assert.equal(store.keyCount, 0)
})

test('one peer cannot hold more concurrent streams than a handler allows; idle ones time out', { timeout: 60_000 }, async () => {
  // The node's own rendezvous service serves the protocol.
  const [server, client] = await startConnectedNodes(2, () => ({ rendezvous: { requestTimeoutMs: 1500 } }))
  try {
    // 48 idle rendezvous streams at once: the bound is 32 per peer, the rest are reset unread.
    const streams = await Promise.all(Array.from({ length: 48 }, async () =>
      await client.dialProtocol(server.peerId, RENDEZVOUS_PROTOCOL, { maxOutboundStreams: 1000 })))
    const closedEarly = await Promise.all(streams.map(async s => await closedWithin(s, 500).then(() => true, () => false)))
    const refused = closedEarly.filter(Boolean).length
    assert.ok(refused >= 48 - 32, `at least 16 of 48 streams refused at once (${refused})`)
    // The ones let in sent nothing: the request timeout closes them.
    await Promise.all(streams.map(async s => { await closedWithin(s, 10_000) }))
  } finally {
    await Promise.allSettled([server.stop(), client.stop()])
  }
})
