import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import net from 'node:net'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey, peerIdFromString } from '@libp2p/peer-id'
import { startSwarm, fill, weightedMean, maxAbsDiff } from '../../swarm-fixture.js'
import { createDataChannelIdentity } from '../../../../agent/net/direct/identity.js'
import { dialDirect } from '../../../../agent/net/direct/direct-dial.js'
import { mainThreadTransport, type DirectTransport } from '../../../../agent/net/direct/direct-transport.js'
import { DataThreads } from '../../../../agent/net/direct/threads/data-threads.js'
import type { DirectFrameChannel } from '../../../../agent/net/frame-channel.js'
import { aggregateProtocol, directAggregateProtocols, isKeptChannel, keptAggregateProtocol } from '../../../../agent/allreduce/aggregate-protocol.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG, type AveragerConfig, type NamedTensor, type StepResult } from '../../../../agent/averager.js'
import { linesLog } from '../../../../agent/log.js'

// Direct data channels kept across rounds (keptAggregateProtocol): agreed by TLS ALPN with agents
// that speak it, never with those that speak only 1.0.0; a round to the same reducer goes over the
// channel the last one used; a reducer that restarted at the same port is dialled anew.

const ELEMENTS = 50_000
// Equal declared bandwidths: spans stay equal in every round, so every member reduces one and every
// sender needs a channel to each. (Measured on loopback, a member's rate after round 1 can size its
// span to nothing, and nobody sends to it: a clean-clone CI run, 2 channels where 3 were counted.)
const BANDWIDTH = 100e6
const values = (peer: number, round: number): Float32Array => fill(ELEMENTS, peer + 10 * round)
const tensorsOf = (peer: number): NamedTensor[] => [{ name: 'w', shape: [ELEMENTS], data: values(peer, 0) }]

const dataThreads = DataThreads.start(2)
after(async () => { await dataThreads.close() })
const TRANSPORTS: Array<{ name: string, transport: DirectTransport }> = [
  { name: 'main thread', transport: mainThreadTransport },
  { name: '2 data threads', transport: dataThreads }
]

for (const { name, transport } of TRANSPORTS) {
  test(`kept channels (${name}): agreed with an agent that speaks 1.1.0, not with one that speaks only 1.0.0`, async () => {
    const [server, client] = await Promise.all([0, 1].map(async () => {
      const key = await generateKeyPair('Ed25519')
      return { peer: peerIdFromPrivateKey(key), identity: await createDataChannelIdentity(key) }
    }))
    const accepted: DirectFrameChannel[] = []
    const listener = await transport.listen({
      identity: server.identity, host: '127.0.0.1', port: 0, protocols: directAggregateProtocols('test'),
      maxFrameBytes: 1024, maxQueuedFrames: 4, handshakeTimeoutMs: 3000, accept: (channel) => { accepted.push(channel) }
    })
    const dial = async (protocols: string[]): Promise<DirectFrameChannel> => await transport.dial({
      identity: client.identity, host: '127.0.0.1', port: listener.port, protocols, expectedPeer: peerIdFromString(server.peer.toString()),
      timeoutMs: 3000, maxFrameBytes: 1024, maxQueuedFrames: 4
    })
    try {
      const current = await dial(directAggregateProtocols('test'))
      const older = await dial([aggregateProtocol('test')])
      while (accepted.length < 2) await new Promise(resolve => setTimeout(resolve, 5))
      assert.equal(current.protocol, keptAggregateProtocol('test'))
      assert.equal(older.protocol, aggregateProtocol('test'))
      assert.deepEqual(accepted.map(c => c.protocol).sort(), [aggregateProtocol('test'), keptAggregateProtocol('test')].sort(), 'the server agreed on the same versions')
      assert.equal(isKeptChannel(current), true)
      assert.equal(isKeptChannel(older), false, 'a 1.0.0 channel carries one round, as before')
      // Another prefix's protocol is not spoken here at all.
      await assert.rejects(dial(directAggregateProtocols('other')))
      // A current agent dialling an agent that speaks only 1.0.0: 1.0.0.
      const oldAccepted: DirectFrameChannel[] = []
      const oldListener = await transport.listen({
        identity: server.identity, host: '127.0.0.1', port: 0, protocols: [aggregateProtocol('test')],
        maxFrameBytes: 1024, maxQueuedFrames: 4, handshakeTimeoutMs: 3000, accept: (channel) => { oldAccepted.push(channel) }
      })
      try {
        const toOld = await transport.dial({
          identity: client.identity, host: '127.0.0.1', port: oldListener.port, protocols: directAggregateProtocols('test'), expectedPeer: peerIdFromString(server.peer.toString()),
          timeoutMs: 3000, maxFrameBytes: 1024, maxQueuedFrames: 4
        })
        assert.equal(toOld.protocol, aggregateProtocol('test'))
        assert.equal(isKeptChannel(toOld), false)
        toOld.abort(new Error('test over'))
      } finally {
        await oldListener.close()
      }
      for (const channel of [current, older, ...accepted, ...oldAccepted]) channel.abort(new Error('test over'))
    } finally {
      await listener.close()
    }
  })
}

/** Steps every averager once with values new for this round; checks the exact mean. */
async function roundAtTheMean (averagers: readonly DecentralizedAverager[], round: number): Promise<StepResult[]> {
  for (let p = 0; p < averagers.length; p++) await averagers[p].withTensors(ts => { ts[0].data.set(values(p, round)) })
  const results = await Promise.all(averagers.map(async a => await a.step({ timeout: 40 })))
  const expected = weightedMean(averagers.map((_, p) => values(p, round)), averagers.map(() => 1))
  for (let p = 0; p < averagers.length; p++) {
    assert.equal(results[p].allreduce.partsKeptLocal, 0, `round ${round}: peer ${p} kept no part local`)
    const got = await averagers[p].withTensors(ts => ts[0].data.slice())
    assert.ok(maxAbsDiff(got, expected) < 1e-5, `round ${round}: peer ${p} at the exact mean (max error ${maxAbsDiff(got, expected)})`)
  }
  return results
}

for (const threads of [0, 2]) {
  test(`kept channels (${threads > 0 ? `${threads} data threads` : 'main thread'}): rounds 2 and 3 go over the channels round 1 opened, each at the exact mean`, { timeout: 120_000 }, async () => {
    const swarm = await startSwarm(4, {
      tensors: tensorsOf,
      config: () => ({ targetGroupSize: 4, minGroupSize: 4, partSizeBytes: 16384, bandwidth: BANDWIDTH, dataChannel: 'direct', dataThreads: threads })
    })
    try {
      for (let round = 0; round < 3; round++) {
        const results = await roundAtTheMean(swarm.averagers, round)
        for (let p = 0; p < 4; p++) {
          const { channels, reusedChannels } = results[p].allreduce
          assert.deepEqual({ ...channels, reusedChannels }, round === 0 ? { direct: 3, libp2p: 0, reusedChannels: 0 } : { direct: 0, libp2p: 0, reusedChannels: 3 },
            `round ${round}: peer ${p} ${round === 0 ? 'opened a channel to each reducer' : 'reused the channels of round 1'}`)
        }
      }
      for (let p = 0; p < 4; p++) {
        assert.deepEqual(swarm.averagers[p].dataChannel.opened, { direct: 3, libp2p: 0 }, `peer ${p} opened 3 channels in 3 rounds`)
        assert.equal(swarm.averagers[p].dataChannel.reused, 6)
      }
    } finally {
      await swarm.stop()
    }
  })
}

test('kept channels: a reducer that restarted at the same data port is dialled anew, and the round is exact', { timeout: 120_000 }, async () => {
  const dataPort = await freePort()
  const logs: string[][] = [[], [], [], []]
  const config = (i: number): Partial<AveragerConfig> => ({ targetGroupSize: 4, minGroupSize: 4, partSizeBytes: 16384, bandwidth: BANDWIDTH, ...(i === 3 ? { dataPort } : {}) })
  const swarm = await startSwarm(4, {
    tensors: tensorsOf,
    config,
    hooks: (i) => ({ log: linesLog((msg) => { logs[i].push(msg) }, 'debug') })
  })
  try {
    await roundAtTheMean(swarm.averagers, 0)
    // Peer 3's averager restarts on the same node and port (a container restarted in its pod): the
    // others' kept channels to it now lead to a socket that no longer exists.
    await swarm.averagers[3].shutdown()
    swarm.averagers[3] = await DecentralizedAverager.create(swarm.nodes[3], tensorsOf(3), {
      ...DEFAULT_AVERAGER_CONFIG, prefix: 'test', averagingExpiration: 3, requestTimeout: 1.5, allreduceTimeout: 30, ...config(3)
    }, { log: linesLog((msg) => { logs[3].push(msg) }, 'debug') })
    assert.equal(swarm.averagers[3].dataChannel.port, dataPort)
    const results = await roundAtTheMean(swarm.averagers, 1)
    for (let p = 0; p < 3; p++) {
      assert.deepEqual(results[p].allreduce.failedReducers, [], `peer ${p} saw no reducer fail`)
      assert.equal(swarm.averagers[p].dataChannel.opened.direct, 4, `peer ${p} opened one new channel, to peer 3`)
      assert.ok(logs[p].some(line => /the kept channel to \S+ closed before the reducer accepted it/.test(line)), `peer ${p} said why it opened a new channel`)
    }
    assert.deepEqual(swarm.averagers[3].dataChannel.opened, { direct: 3, libp2p: 0 }, 'the restarted peer opened its own channels anew')
  } finally {
    await swarm.stop()
  }
})

async function freePort (): Promise<number> {
  const server = net.createServer()
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as net.AddressInfo).port
  await new Promise<void>(resolve => server.close(() => { resolve() }))
  return port
}
