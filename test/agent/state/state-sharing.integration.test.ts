import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { createServer, type AddressInfo } from 'node:net'
import { multiaddr } from '@multiformats/multiaddr'
import type { Stream } from '@libp2p/interface'
import { createSwarmNode, type SwarmNode } from '../../../agent/net/node.js'
import { kadRoutingTable } from '../../../agent/net/kad-routing-table.js'
import { ownAddrBytes } from '../../../agent/net/rpc.js'
import { FramedStream } from '../../../agent/net/framed-stream.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG, type NamedTensor } from '../../../agent/averager.js'
import { StateSharing, type StateSharingOptions } from '../../../agent/state/state-sharing.js'
import { donorKey, stateProtocol } from '../../../agent/state/state-protocol.js'
import { StateChunk, StateHeader } from '../../../agent/proto/averaging.js'
import { fill, weightedMean, maxAbsDiff } from '../swarm-fixture.js'
import { linesLog } from '../../../agent/log.js'
import { testLog } from '../test-log.js'

const PREFIX = 'test'

interface Peers {
  readonly nodes: SwarmNode[]
  stop(): Promise<void>
}

/** n real libp2p nodes on loopback, fully meshed, each running the rendezvous protocol (its rendezvous service). */
async function startPeers (n: number): Promise<Peers> {
  const nodes: SwarmNode[] = []
  const stop = async (): Promise<void> => {
    await Promise.allSettled(nodes.map(async node => { await node.stop() }))
  }
  try {
    for (let i = 0; i < n; i++) nodes.push(await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], rendezvous: { requestTimeoutMs: 2000 } }))
    for (let i = 1; i < n; i++) {
      await Promise.all(nodes.slice(0, i).map(async other => { await dialWithRetries(nodes[i], other) }))
    }
    // Every node must know every other before the rendezvous picks replicas from its routing
    // table, or a donor and a newcomer could pick different replicas for the same key.
    const deadline = Date.now() + 60_000
    const tableSize = (node: SwarmNode): number => kadRoutingTable(node.services.dht).size
    let reidentifyAt = Date.now() + 2000
    while (!nodes.every(node => tableSize(node) >= n - 1)) {
      if (Date.now() > deadline) throw new Error(`routing tables did not fill within 60 s: sizes ${nodes.map(tableSize).join(', ')}`)
      if (Date.now() > reidentifyAt) {
        // On a loaded machine kad-dht's ping that admits a new contact can time out, and the
        // peer then never enters the table: offer the missing peers again.
        reidentifyAt = Date.now() + 2000
        await Promise.allSettled(nodes.filter(node => tableSize(node) < n - 1).flatMap(node =>
          nodes.filter(other => other !== node).map(async other => await kadRoutingTable(node.services.dht).add(other.peerId))))
      }
      await sleep(50)
    }
    return { nodes, stop }
  } catch (err) {
    await stop()
    throw err
  }
}

/** Under a loaded machine a TLS handshake can time out; a second try usually passes. */
async function dialWithRetries (node: SwarmNode, other: SwarmNode): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await node.dial(multiaddr(other.getMultiaddrs()[0].toString()))
      return
    } catch (err) {
      if (attempt === 3) throw err
      await sleep(200 * attempt)
    }
  }
}

async function sleep (ms: number): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, ms))
}

function sharing (peers: Peers, i: number, options: Partial<StateSharingOptions> = {}): StateSharing {
  const log = testLog(`state peer ${i}`)
  return new StateSharing(peers.nodes[i], { prefix: PREFIX, requestTimeoutMs: 1000, log, ...options })
}

function bytesOf (data: Float32Array): Buffer {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength)
}

test('a late joiner downloads the swarm\'s averaged tensors byte for byte, and its metadata, over the donor\'s direct data channel', { timeout: 240_000 }, async () => {
  const peers = await startPeers(3)
  const averagers: DecentralizedAverager[] = []
  const sharings: StateSharing[] = []
  try {
    // 77,100 values: several 64 KiB chunks and a partial last one; a second, tiny tensor after it.
    const tensors = (p: number): NamedTensor[] => [
      { name: 'w', shape: [300, 257], data: fill(300 * 257, p) },
      { name: 'b', shape: [17], data: fill(17, p + 10) }
    ]
    const local = [tensors(0), tensors(1)]
    const initial = [tensors(0), tensors(1)]
    for (let i = 0; i < 2; i++) {
      averagers.push(await DecentralizedAverager.create(peers.nodes[i], local[i], {
        ...DEFAULT_AVERAGER_CONFIG, prefix: PREFIX, targetGroupSize: 2, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1.5, allreduceTimeout: 30
      }, {}))
    }
    await Promise.all(averagers.map(async a => await a.step({ timeout: 60 })))
    const expectedMean = weightedMean([initial[0][0].data, initial[1][0].data], [1, 1])
    assert.ok(maxAbsDiff(local[0][0].data, expectedMean) < 1e-4, 'the donors averaged before the newcomer arrived')

    for (let i = 0; i < 2; i++) {
      const s = sharing(peers, i)
      sharings.push(s)
      await s.start(async () => ({ tensors: local[i], metadata: { step: 1, groupBits: '', donor: i } }), averagers[i].directEndpoint())
      await s.setPriority(1)
    }
    // A progress line after every chunk (5 s apart by default), so the test sees them.
    const lines: string[] = []
    const newcomer = sharing(peers, 2, { progressIntervalMs: 0, log: linesLog((msg) => { lines.push(msg) }) })
    sharings.push(newcomer)
    const result = await newcomer.download(local[0].map(t => ({ name: t.name, shape: t.shape })))
    assert.ok(result != null, 'the newcomer downloaded a state')
    const progress = lines.filter(l => l.startsWith(`info downloading the swarm's state from ${result.donor}: `))
    assert.ok(progress.length >= 3, lines.join('\n'))
    assert.match(progress[0], /: 64\.0 KiB of 301 KiB \(21 %\), [0-9.]+ MB\/s, about [0-9]+ s left$/)
    assert.ok(lines.some(l => /^info downloaded state from \S+ in [0-9]+ ms \(301 KiB, [0-9.]+ MB\/s, direct data channel\)$/.test(l)), lines.join('\n'))
    assert.equal(result.path, 'direct')
    const donorIndex = peers.nodes.findIndex(n => n.peerId.toString() === result.donor)
    assert.ok(donorIndex === 0 || donorIndex === 1, 'the state came from one of the donors')
    assert.deepEqual(result.metadata, { step: 1, groupBits: '', donor: donorIndex })
    assert.deepEqual(result.tensors.map(t => [t.name, t.shape]), [['w', [300, 257]], ['b', [17]]])
    for (const [k, t] of result.tensors.entries()) {
      assert.ok(bytesOf(t.data).equals(bytesOf(local[donorIndex][k].data)), `tensor ${t.name} matches the donor's bytes`)
    }
  } finally {
    await Promise.allSettled(sharings.map(async s => { await s.stop() }))
    await Promise.allSettled(averagers.map(async a => { await a.shutdown() }))
    await peers.stop()
  }
})

test('a donor\'s direct data channel out of reach, or turned off by the newcomer: the same bytes over a libp2p stream; served from a data thread: over it; reached at another port (a node port): there', { timeout: 240_000 }, async () => {
  const peers = await startPeers(3)
  const sharings: StateSharing[] = []
  let averager: DecentralizedAverager | undefined
  try {
    const state: NamedTensor[] = [{ name: 'w', shape: [200, 300], data: fill(200 * 300, 3) }]
    // Its data channel on a data thread: the state's frames cross to the thread as copies, never the tensor's buffer.
    averager = await DecentralizedAverager.create(peers.nodes[0], state, { ...DEFAULT_AVERAGER_CONFIG, prefix: PREFIX, requestTimeout: 1.5, dataThreads: 1 }, {})
    const endpoint = averager.directEndpoint()
    assert.ok(endpoint !== undefined && endpoint.port > 0, 'the averager listens for direct channels')
    // The donor announces a port nobody listens on: the newcomer's TLS dial is refused.
    const closed = await freePort()
    const donor = sharing(peers, 0)
    sharings.push(donor)
    await donor.start(async () => ({ tensors: state, metadata: {} }), { port: closed, serve: endpoint.serve })
    const lines: string[] = []
    const newcomer = sharing(peers, 1, { log: linesLog((msg) => { lines.push(msg) }, 'debug') })
    sharings.push(newcomer)
    const fellBack = await newcomer.download([{ name: 'w', shape: [200, 300] }])
    assert.ok(fellBack != null)
    assert.equal(fellBack.path, 'libp2p')
    assert.ok(bytesOf(fellBack.tensors[0].data).equals(bytesOf(state[0].data)))
    assert.ok(lines.some(l => l.includes(`no direct data channel to state donor ${peers.nodes[0].peerId.toString()}`) && l.includes(`:${closed}`)), lines.join('\n'))
    await donor.stop()

    // The donor's real port, but the newcomer runs with AVS_DATA_CHANNEL libp2p.
    const again = sharing(peers, 0)
    sharings.push(again)
    await again.start(async () => ({ tensors: state, metadata: {} }), endpoint)
    const direct = await sharing(peers, 2).download([{ name: 'w', shape: [200, 300] }])
    assert.equal(direct?.path, 'direct')
    const off = await sharing(peers, 1, { directChannel: false }).download([{ name: 'w', shape: [200, 300] }])
    assert.equal(off?.path, 'libp2p')
    assert.ok(bytesOf(off.tensors[0].data).equals(bytesOf(state[0].data)))
    assert.ok(direct !== null && bytesOf(direct.tensors[0].data).equals(bytesOf(state[0].data)))
    assert.equal(averager.dataChannel.threads, 1)
    assert.equal(state[0].data.byteLength, 200 * 300 * 4, 'the donor\'s tensor was not handed to the thread')

    // Its data port reached at another port on its host (a node port): announced as a data address, dialled there.
    await again.stop()
    const forwarded = sharing(peers, 0, { dataAddrs: () => [multiaddr(`/ip4/127.0.0.1/tcp/${endpoint.port}`)] })
    sharings.push(forwarded)
    await forwarded.start(async () => ({ tensors: state, metadata: {} }), { port: closed, serve: endpoint.serve })
    const viaDataAddr = await sharing(peers, 2).download([{ name: 'w', shape: [200, 300] }])
    assert.equal(viaDataAddr?.path, 'direct', 'the data address named the port that answers')
    assert.ok(bytesOf(viaDataAddr.tensors[0].data).equals(bytesOf(state[0].data)))
  } finally {
    await Promise.allSettled(sharings.map(async s => { await s.stop() }))
    await averager?.shutdown()
    await peers.stop()
  }
})

async function freePort (): Promise<number> {
  const server = createServer()
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  await new Promise<void>(resolve => server.close(() => { resolve() }))
  return port
}

test('six concurrent newcomers spread over three donors, busy donors redirect, all succeed', { timeout: 240_000 }, async () => {
  const peers = await startPeers(9)
  const sharings: StateSharing[] = []
  try {
    const state: NamedTensor[] = [{ name: 'w', shape: [1024, 256], data: fill(1024 * 256, 7) }]
    const uploads = new Map<number, string[]>()
    const maxActive = [0, 0, 0]
    for (let i = 0; i < 3; i++) {
      uploads.set(i, [])
      const s = sharing(peers, i, { maxConcurrentUploads: 2, onUpload: (outcome) => { uploads.get(i)?.push(outcome) } })
      sharings.push(s)
      // A slow source keeps every upload open long enough for the newcomers to overlap.
      await s.start(async () => { await sleep(500); return { tensors: state, metadata: { donor: i } } })
      await s.setPriority(10 + i % 2)
    }
    const probe = setInterval(() => { for (let i = 0; i < 3; i++) maxActive[i] = Math.max(maxActive[i], sharings[i].activeUploads) }, 10)
    const outcomes: string[] = []
    const newcomers = [3, 4, 5, 6, 7, 8].map(i => sharing(peers, i, { onDownload: (o) => { outcomes.push(o) } }))
    sharings.push(...newcomers)
    const results = await Promise.all(newcomers.map(async n => await n.download([{ name: 'w', shape: [1024, 256] }])))
    clearInterval(probe)
    const donors = new Set<string>()
    for (const result of results) {
      assert.ok(result != null, 'every newcomer got the state')
      assert.ok(bytesOf(result.tensors[0].data).equals(bytesOf(state[0].data)))
      donors.add(result.donor)
    }
    assert.deepEqual(outcomes, Array(6).fill('success'))
    assert.ok(donors.size > 1, `downloads spread over ${donors.size} donor(s)`)
    for (let i = 0; i < 3; i++) assert.ok(maxActive[i] <= 2, `donor ${i} served ${maxActive[i]} downloads at once, above its limit of 2`)
    const served = [...uploads.values()].flat().filter(o => o === 'served').length
    // A newcomer whose download timed out retries at another donor, so a busy run serves more than six.
    assert.ok(served >= 6, `at least six uploads were served in all (${served})`)
  } finally {
    await Promise.allSettled(sharings.map(async s => { await s.stop() }))
    await peers.stop()
  }
})

/** Registers a misbehaving state handler on a node and announces it as the best donor. */
async function hostileDonor (peers: Peers, i: number, behave: (stream: Stream) => Promise<void>): Promise<void> {
  await peers.nodes[i].handle(stateProtocol(PREFIX), (stream: Stream) => {
    void behave(stream).catch(() => {})
  })
  await peers.nodes[i].services.rendezvous.declare(donorKey(PREFIX), {
    peerId: peers.nodes[i].peerId.toString(), expiration: Date.now() / 1000 + 30, looking: true, priority: 100, addrs: ownAddrBytes(peers.nodes[i])
  })
}

function framedOf (stream: Stream): FramedStream {
  return new FramedStream(stream, { maxFrameBytes: 1024 })
}

test('hostile donors (garbage, absurd shapes, wrong chunks, half a state then NaN, a trickle, silence) make the newcomer fall back to an honest donor; a download into given tensors leaves them zeros when only those answer', { timeout: 240_000 }, async () => {
  const peers = await startPeers(10)
  const sharings: StateSharing[] = []
  try {
    const state: NamedTensor[] = [{ name: 'w', shape: [40000], data: fill(40000, 3) }]
    const honest = sharing(peers, 0)
    sharings.push(honest)
    await honest.start(async () => ({ tensors: state, metadata: { honest: true } }))
    const goodHeader = StateHeader.encode({ metadata: new TextEncoder().encode('{}'), tensors: [{ name: 'w', shape: [40000] }] })
    const behaviours: Array<[string, (stream: Stream) => Promise<void>]> = [
      ['garbage', async (stream) => { stream.send(randomBytes(4096)); await stream.close() }],
      ['absurd shapes', async (stream) => {
        const f = framedOf(stream)
        await f.write(StateHeader.encode({ metadata: new TextEncoder().encode('{}'), tensors: [{ name: 'w', shape: [0xffffffff, 0xffffffff, 0xffffffff] }] }))
        await f.closeWrite()
      }],
      ['oversized chunk', async (stream) => {
        const f = framedOf(stream)
        await f.write(goodHeader)
        await f.write(StateChunk.encode({ tensorIndex: 0, offset: 0, data: new Uint8Array(40001 * 4) }))
        await f.closeWrite()
      }],
      ['chunk out of place', async (stream) => {
        const f = framedOf(stream)
        await f.write(goodHeader)
        await f.write(StateChunk.encode({ tensorIndex: 0, offset: 39990, data: new Uint8Array(40) }))
        await f.closeWrite()
      }],
      ['ragged chunk', async (stream) => {
        const f = framedOf(stream)
        await f.write(goodHeader)
        await f.write(StateChunk.encode({ tensorIndex: 0, offset: 0, data: new Uint8Array(6) }))
        await f.closeWrite()
      }],
      ['half a state, then NaN', async (stream) => {
        const f = framedOf(stream)
        await f.write(goodHeader)
        await f.write(StateChunk.encode({ tensorIndex: 0, offset: 0, data: bytesOf(fill(16384, 9)) }))
        await f.write(StateChunk.encode({ tensorIndex: 0, offset: 16384, data: bytesOf(new Float32Array(16384).fill(NaN)) }))
        await f.closeWrite()
      }],
      ['trickle of one value per 300 ms', async (stream) => {
        const f = framedOf(stream)
        await f.write(goodHeader)
        for (let offset = 0; offset < 40000 && stream.status === 'open'; offset++) {
          await f.write(StateChunk.encode({ tensorIndex: 0, offset, data: new Uint8Array(4) }))
          await sleep(300)
        }
      }],
      ['silence after the header', async (stream) => {
        const f = framedOf(stream)
        await f.write(goodHeader)
        await sleep(10_000)
        await f.closeWrite()
      }]
    ]
    const hostileIds = new Map<string, string>()
    for (const [k, [name, behave]] of behaviours.entries()) {
      // nodes 1..8 are hostile; node 9 is the newcomer
      await hostileDonor(peers, k + 1, behave)
      hostileIds.set(peers.nodes[k + 1].peerId.toString(), name)
    }
    const into = [{ name: 'w', shape: [40000], data: new Float32Array(40000) }]
    for (const [expected, target] of [[[{ name: 'w', shape: [40000] }], undefined], [undefined, undefined], [[{ name: 'w', shape: [40000] }], into]] as const) {
      const failures: string[] = []
      const newcomer = new StateSharing(peers.nodes[9], {
        prefix: PREFIX,
        requestTimeoutMs: 1000,
        log: linesLog((msg) => { if (msg.includes('failed')) failures.push(msg) })
      })
      const started = Date.now()
      const result = await newcomer.download(expected, undefined, target)
      assert.ok(result != null, 'the newcomer fell back to the honest donor')
      if (target !== undefined) assert.equal(result.tensors[0].data, target[0].data, 'written into the given tensor, not a new one')
      assert.equal(result.donor, peers.nodes[0].peerId.toString())
      assert.deepEqual(result.metadata, { honest: true })
      assert.ok(bytesOf(result.tensors[0].data).equals(bytesOf(state[0].data)))
      for (const [id, name] of hostileIds) {
        assert.ok(failures.some(msg => msg.includes(id)), `the ${name} donor was tried and rejected`)
      }
      // Silence costs one 1 s read timeout, the trickle its ~2.2 s transfer deadline.
      assert.ok(Date.now() - started < 15_000, `the slow donors were given up on within ${Date.now() - started} ms`)
    }
    assert.ok(peers.nodes[9].status === 'started', 'the newcomer is still running')
    // Only hostile donors left: the given tensor, half-written by one of them, is zeros again.
    await honest.stop()
    into[0].data.fill(0)
    const none = await new StateSharing(peers.nodes[9], { prefix: PREFIX, requestTimeoutMs: 1000 }).download([{ name: 'w', shape: [40000] }], undefined, into)
    assert.equal(none, null)
    assert.ok(into[0].data.every(v => v === 0), 'zeros again after the failed downloads')
  } finally {
    await Promise.allSettled(sharings.map(async s => { await s.stop() }))
    await peers.stop()
  }
})

test('with no donor, or only a donor that withdrew, download returns null promptly', { timeout: 60_000 }, async () => {
  const peers = await startPeers(3)
  const sharings: StateSharing[] = []
  try {
    const outcomes: string[] = []
    const newcomer = sharing(peers, 2, { onDownload: (o) => { outcomes.push(o) } })
    let started = Date.now()
    assert.equal(await newcomer.download(), null)
    assert.ok(Date.now() - started < 2000, `download gave up after ${Date.now() - started} ms`)

    const donor = sharing(peers, 0)
    sharings.push(donor)
    await donor.start(async () => ({ tensors: [{ name: 'x', shape: [4], data: new Float32Array(4) }], metadata: {} }))
    await donor.stop()
    started = Date.now()
    assert.equal(await newcomer.download(), null)
    assert.ok(Date.now() - started < 2000, `download gave up after ${Date.now() - started} ms`)
    assert.deepEqual(outcomes, ['no_donors', 'no_donors'])
  } finally {
    await Promise.allSettled(sharings.map(async s => { await s.stop() }))
    await peers.stop()
  }
})

test('a client downloads the swarm\'s state like any newcomer, and offers its own only once it serves (reachable after joining)', { timeout: 60_000 }, async () => {
  const peers = await startPeers(3)
  const sharings: StateSharing[] = []
  try {
    const state = fill(256, 3)
    const donor = sharing(peers, 0)
    sharings.push(donor)
    await donor.start(async () => ({ tensors: [{ name: 'x', shape: [256], data: state }], metadata: { round: '7' } }))
    // A client: it downloads (the agent had not even created one for clients before, so a client
    // newcomer averaged its own initial tensors into the swarm's)...
    const client = sharing(peers, 1, { serving: false })
    sharings.push(client)
    const got = await client.download()
    assert.ok(got != null, 'the client downloaded the state')
    assert.deepEqual(bytesOf(got.tensors[0].data), bytesOf(state))
    assert.equal(got.metadata.round, '7')
    // ...and its start() offers nothing: with the donor gone, a newcomer finds no donor.
    const own = fill(256, 5)
    await client.start(async () => ({ tensors: [{ name: 'x', shape: [256], data: own }], metadata: {} }))
    await donor.stop()
    const outcomes: string[] = []
    const newcomer = sharing(peers, 2, { onDownload: (o) => { outcomes.push(o) } })
    assert.equal(await newcomer.download(), null)
    assert.deepEqual(outcomes, ['no_donors'])
    // Reachable now: it serves what start() was given.
    await client.serve()
    const fromClient = await newcomer.download()
    assert.ok(fromClient != null, 'the newcomer downloaded from the client once it served')
    assert.deepEqual(bytesOf(fromClient.tensors[0].data), bytesOf(own))
    await client.serve()
    await assert.rejects(client.start(async () => ({ tensors: [], metadata: {} })), /already started/)
  } finally {
    await Promise.allSettled(sharings.map(async s => { await s.stop() }))
    await peers.stop()
  }
})
