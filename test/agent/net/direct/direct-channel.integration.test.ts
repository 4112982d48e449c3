import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import tls from 'node:tls'
import { randomBytes } from 'node:crypto'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey, peerIdFromString } from '@libp2p/peer-id'
import { startSwarm, fill, weightedMean, maxAbsDiff } from '../../swarm-fixture.js'
import { createSwarmNode } from '../../../../agent/net/node.js'
import { createDataChannelIdentity } from '../../../../agent/net/direct/identity.js'
import { DirectServer } from '../../../../agent/net/direct/direct-server.js'
import { dialDirect } from '../../../../agent/net/direct/direct-dial.js'
import { mainThreadTransport, type DirectListener, type DirectTransport } from '../../../../agent/net/direct/direct-transport.js'
import { DataThreads } from '../../../../agent/net/direct/threads/data-threads.js'
import type { DirectFrameChannel, FrameChannel } from '../../../../agent/net/frame-channel.js'
import { aggregateProtocol } from '../../../../agent/allreduce/aggregate-protocol.js'
import { AggregateHeader, AggregateReply, MatchCode } from '../../../../agent/proto/averaging.js'
import type { NamedTensor } from '../../../../agent/averager.js'
import type { GroupInfo } from '../../../../agent/matchmaking/group-info.js'
import { linesLog } from '../../../../agent/log.js'

const PROTOCOL = '/avs/test/aggregate/1.0.0'
const small = (peer: number): NamedTensor[] => [{ name: 'w', shape: [50_000], data: fill(50_000, peer) }]

async function identities (n: number): Promise<Array<{ peer: string, identity: Awaited<ReturnType<typeof createDataChannelIdentity>> }>> {
  return await Promise.all(Array.from({ length: n }, async () => {
    const key = await generateKeyPair('Ed25519')
    return { peer: peerIdFromPrivateKey(key).toString(), identity: await createDataChannelIdentity(key) }
  }))
}

async function listen (transport: DirectTransport, identity: Awaited<ReturnType<typeof createDataChannelIdentity>>, accepted: DirectFrameChannel[], bounds = { maxFrameBytes: 1024, maxQueuedFrames: 4 }): Promise<DirectListener> {
  return await transport.listen({
    identity, host: '127.0.0.1', port: 0, protocols: [PROTOCOL], ...bounds, handshakeTimeoutMs: 3000,
    accept: (channel) => { accepted.push(channel) }
  })
}

/** True once the remote side closed the channel (a clean end or a reset), false if it sent a frame. */
async function closedByPeer (channel: FrameChannel): Promise<boolean> {
  try {
    return (await channel.read(5000)) === null
  } catch (err) {
    return !/within \d+ ms/.test((err as Error).message)
  }
}

// Every test of the channel itself runs with the sockets on the calling thread and on data threads.
const dataThreads = DataThreads.start(2)
after(async () => { await dataThreads.close() })
const TRANSPORTS: Array<{ name: string, transport: DirectTransport }> = [
  { name: 'main thread', transport: mainThreadTransport },
  { name: '2 data threads', transport: dataThreads }
]

const dialOptions = { protocols: [PROTOCOL], host: '127.0.0.1', timeoutMs: 3000, maxFrameBytes: 1024, maxQueuedFrames: 4 }

for (const { name, transport } of TRANSPORTS) {
  test(`direct channel (${name}): both sides learn each other's libp2p peer id, and frames cross intact`, async () => {
    const [server, client] = await identities(2)
    const accepted: DirectFrameChannel[] = []
    const listening = await listen(transport, server.identity, accepted)
    try {
      const channel = await transport.dial({ ...dialOptions, identity: client.identity, port: listening.port, expectedPeer: peerIdFromString(server.peer) })
      assert.equal(channel.remotePeer, server.peer)
      await channel.write(new Uint8Array([1, 2, 3]))
      while (accepted.length === 0) await new Promise(resolve => setTimeout(resolve, 10))
      assert.equal(accepted[0].remotePeer, client.peer, 'the server authenticated the client as its libp2p peer id')
      assert.deepEqual(await accepted[0].read(2000), new Uint8Array([1, 2, 3]))
      await accepted[0].write(new Uint8Array([9]))
      assert.deepEqual(await channel.read(2000), new Uint8Array([9]))
      await channel.closeWrite()
      assert.equal(await accepted[0].read(2000), null, 'a half-close reads as a clean end')
    } finally {
      await listening.close()
    }
  })

  test(`direct channel (${name}): frames kept as views of the TLS chunks stay intact while queued`, async () => {
    const [server, client] = await identities(2)
    // Over the channel: 40 frames of 200 KiB (many TLS records each) queue up unread, then read back exact.
    const accepted: DirectFrameChannel[] = []
    const listening = await listen(transport, server.identity, accepted, { maxFrameBytes: 1 << 20, maxQueuedFrames: 64 })
    try {
      const channel = await transport.dial({ ...dialOptions, maxFrameBytes: 1 << 20, identity: client.identity, port: listening.port, expectedPeer: peerIdFromString(server.peer) })
      const frames = Array.from({ length: 40 }, () => randomBytes(200 * 1024))
      for (const f of frames) await channel.write([f.subarray(0, 7), f.subarray(7)])
      while (accepted.length === 0) await new Promise(resolve => setTimeout(resolve, 10))
      await new Promise(resolve => setTimeout(resolve, 500))
      for (let i = 0; i < frames.length; i++) {
        const got = i % 2 === 0 ? await accepted[0].readPieces(2000) : await accepted[0].read(2000)
        assert.ok(got != null)
        assert.ok(Buffer.from(got.subarray()).equals(frames[i]), `frame ${i} intact`)
      }
      await channel.closeWrite()
    } finally {
      await listening.close()
    }
  })

  test(`direct channel (${name}): a reader that stops reading stops the writer, and every frame arrives once it reads again`, async () => {
    const [server, client] = await identities(2)
    const accepted: DirectFrameChannel[] = []
    const listening = await listen(transport, server.identity, accepted, { maxFrameBytes: 1 << 20, maxQueuedFrames: 4 })
    try {
      const channel = await transport.dial({ ...dialOptions, maxFrameBytes: 1 << 20, identity: client.identity, port: listening.port, expectedPeer: peerIdFromString(server.peer) })
      const FRAMES = 300
      let written = 0
      const writing = (async () => {
        for (let i = 0; i < FRAMES; i++) {
          await channel.write(new Uint8Array(1 << 20).fill(i & 0xff))
          written++
        }
      })()
      await new Promise(resolve => setTimeout(resolve, 2000))
      // Unbounded, all 300 MiB would be queued in memory by now; bounded, the reader's queue, the
      // transport's windows, the kernel's socket buffers and the writer's high-water mark hold a few dozen.
      assert.ok(written < 64, `the writer waited while nobody read (${written} MiB written)`)
      while (accepted.length === 0) await new Promise(resolve => setTimeout(resolve, 10))
      for (let i = 0; i < FRAMES; i++) {
        const got = await accepted[0].read(10_000)
        assert.ok(got != null && got.byteLength === 1 << 20 && got[0] === (i & 0xff) && got[got.byteLength - 1] === (i & 0xff), `frame ${i} intact and in order`)
      }
      await writing
      assert.equal(written, FRAMES)
      await channel.closeWrite()
    } finally {
      await listening.close()
    }
  })

  test(`direct channel (${name}): a peer holding another key cannot complete the handshake`, async () => {
    const [server, client, impostor] = await identities(3)
    const accepted: DirectFrameChannel[] = []
    const listening = await listen(transport, server.identity, accepted)
    try {
      // The server is not who the dialer expects: the dialer refuses it.
      await assert.rejects(transport.dial({ ...dialOptions, identity: client.identity, port: listening.port, expectedPeer: peerIdFromString(impostor.peer) }), /is not peer/)
      // Someone replaying the server's (public) certificate without its key cannot serve as it.
      const fake = await transport.listen({
        identity: { cert: server.identity.cert, key: impostor.identity.key }, host: '127.0.0.1', port: 0, protocols: [PROTOCOL],
        maxFrameBytes: 1024, maxQueuedFrames: 4, handshakeTimeoutMs: 3000, accept: () => {}
      }).catch((err: Error) => err)
      if (!(fake instanceof Error)) {
        try {
          await assert.rejects(transport.dial({ ...dialOptions, identity: client.identity, port: fake.port, expectedPeer: peerIdFromString(server.peer) }))
        } finally { await fake.close() }
      } else {
        assert.match(fake.message, /key|mismatch/i, 'node refuses a certificate with another party\'s key')
      }
      // A peer claiming another's id in its certificate, signed with its own key: refused by the server.
      const victimKey = await generateKeyPair('Ed25519')
      const forgerKey = await generateKeyPair('Ed25519')
      const forged = await createDataChannelIdentity({
        type: victimKey.type, publicKey: victimKey.publicKey, sign: async (data: Uint8Array) => await forgerKey.sign(data)
      } as unknown as typeof victimKey)
      const forgedDial = await transport.dial({ ...dialOptions, identity: forged, port: listening.port, expectedPeer: peerIdFromString(server.peer) })
        .then(async (channel) => { await channel.write(new Uint8Array([1])); return await closedByPeer(channel) }, () => true)
      assert.equal(forgedDial, true, 'a forged certificate gets nothing back')
      // A client replaying another peer's certificate without its key cannot even present it.
      await assert.rejects(transport.dial({ ...dialOptions, identity: { cert: client.identity.cert, key: impostor.identity.key }, port: listening.port, expectedPeer: peerIdFromString(server.peer) }))
      // No certificate at all, or a foreign protocol: dropped before any protocol code runs.
      for (const options of [{ ALPNProtocols: [PROTOCOL] }, { ALPNProtocols: ['h2'], key: client.identity.key, cert: client.identity.cert }]) {
        const outcome = await new Promise<string>(resolve => {
          const socket = tls.connect({ host: '127.0.0.1', port: listening.port, rejectUnauthorized: false, ...options })
          socket.on('error', (err) => { resolve(`error ${err.message}`) })
          socket.on('close', () => { resolve('closed') })
          socket.on('secureConnect', () => { socket.write('hello') })
        })
        assert.ok(outcome.length > 0)
      }
      await new Promise(resolve => setTimeout(resolve, 200))
      assert.equal(accepted.length, 0, 'no forged or unauthenticated connection reached the protocol handler')
    } finally {
      await listening.close()
    }
  })

  test(`direct channel (${name}): an announced frame above the bound closes that connection only`, async () => {
    const [server, client] = await identities(2)
    const accepted: DirectFrameChannel[] = []
    const listening = await listen(transport, server.identity, accepted)
    try {
      const hostile = await dialDirect({ ...dialOptions, identity: client.identity, port: listening.port, expectedPeer: peerIdFromString(server.peer) })
      const header = new Uint8Array(4)
      new DataView(header.buffer).setUint32(0, 0xfffffff0, true)
      ;(hostile as unknown as { socket: tls.TLSSocket }).socket.write(header)
      while (accepted.length === 0) await new Promise(resolve => setTimeout(resolve, 10))
      await assert.rejects(accepted[0].read(2000), /above the 1024-byte bound/)
      // The server still serves an honest peer.
      const honest = await transport.dial({ ...dialOptions, identity: client.identity, port: listening.port, expectedPeer: peerIdFromString(server.peer) })
      await honest.write(new Uint8Array([7]))
      while (accepted.length < 2) await new Promise(resolve => setTimeout(resolve, 10))
      assert.deepEqual(await accepted[1].read(2000), new Uint8Array([7]))
      honest.abort(new Error('done'))
    } finally {
      await listening.close()
    }
  })
}

test('direct channel: AES-128-GCM between our agents, and a peer that prefers AES-256-GCM still connects', async () => {
  const [server, client] = await identities(2)
  const accepted: DirectFrameChannel[] = []
  const listening = await listen(mainThreadTransport, server.identity, accepted)
  try {
    const ours = await dialDirect({ ...dialOptions, identity: client.identity, port: listening.port, expectedPeer: peerIdFromString(server.peer) })
    assert.equal((ours as unknown as { socket: tls.TLSSocket }).socket.getCipher().standardName, 'TLS_AES_128_GCM_SHA256')
    ours.abort(new Error('done'))
    // node's own order (AES-256-GCM first), as an agent of an earlier version dials: the server's order decides.
    // Only AES-256-GCM offered: it is still accepted.
    for (const [ciphers, expected] of [[undefined, 'TLS_AES_128_GCM_SHA256'], ['TLS_AES_256_GCM_SHA384', 'TLS_AES_256_GCM_SHA384']] as const) {
      const socket = tls.connect({ host: '127.0.0.1', port: listening.port, rejectUnauthorized: false, minVersion: 'TLSv1.3', ALPNProtocols: [PROTOCOL], key: client.identity.key, cert: client.identity.cert, ...(ciphers !== undefined ? { ciphers } : {}) })
      const cipher = await new Promise<string | undefined>((resolve, reject) => {
        socket.once('secureConnect', () => { resolve(socket.getCipher().standardName) })
        socket.once('error', reject)
      })
      socket.destroy()
      assert.equal(cipher, expected, `client ciphers ${ciphers ?? "node's default"}`)
    }
  } finally {
    await listening.close()
  }
})

test('direct channel on data threads: a data thread that dies drops only its own connections, and new ones go to the others', async () => {
  const [server, client] = await identities(2)
  const serverThreads = DataThreads.start(2)
  const clientThreads = DataThreads.start(2)
  // Fault injection: the worker behind one data thread, terminated as a crash would end it.
  const workerOf = (threads: DataThreads, i: number): { terminate: () => Promise<number> } =>
    (threads as unknown as { pool: Array<{ worker: { terminate: () => Promise<number> } }> }).pool[i].worker
  const accepted: DirectFrameChannel[] = []
  const listening = await listen(serverThreads, server.identity, accepted)
  const dial = async (): Promise<DirectFrameChannel> => {
    const before = accepted.length
    const channel = await clientThreads.dial({ ...dialOptions, identity: client.identity, port: listening.port, expectedPeer: peerIdFromString(server.peer) })
    while (accepted.length === before) await new Promise(resolve => setTimeout(resolve, 10))
    return channel
  }
  const exchange = async (channel: DirectFrameChannel, remote: DirectFrameChannel, byte: number): Promise<void> => {
    await channel.write(new Uint8Array([byte]))
    assert.deepEqual(await remote.read(5000), new Uint8Array([byte]))
  }
  try {
    const first = await dial() // client thread 0
    const second = await dial() // client thread 1
    await workerOf(clientThreads, 0).terminate()
    await assert.rejects(first.read(5000), /data thread/, 'the dead thread\'s connection fails with a clear reason')
    await exchange(second, accepted[1], 5)
    // New dials skip the dead client thread; a dead server thread's share goes to the other listener.
    await workerOf(serverThreads, 0).terminate()
    for (let i = 0; i < 4; i++) {
      const channel = await dial()
      await exchange(channel, accepted[accepted.length - 1], 10 + i)
    }
  } finally {
    await listening.close()
    await serverThreads.close()
    await clientThreads.close()
  }
})

for (const dataThreads of [0, 2]) {
  test(`direct channel (${dataThreads > 0 ? `${dataThreads} data threads` : 'main thread'}): an authenticated outsider and garbage senders are refused, and the group still reaches the exact mean`, { timeout: 90_000 }, async () => {
    let group: GroupInfo | null = null
    const swarm = await startSwarm(4, {
      tensors: small,
      config: () => ({ targetGroupSize: 4, minGroupSize: 4, dataChannel: 'direct', dataThreads }),
      hooks: (i) => i === 0 ? { onGroup: (g) => { group = g } } : {}
    })
    const [outsider] = await identities(1)
    try {
      const target = swarm.nodes[1].peerId
      const port = swarm.averagers[1].dataChannel.port
      assert.ok(port > 0, 'the averager listens for direct channels')
      const stepping = Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
      while (group == null) await new Promise(resolve => setTimeout(resolve, 5))
      const groupId = (group as GroupInfo).groupId
      // A peer without a libp2p connection (so without the private-network key or past the allow
      // list) is dropped before any protocol code, even with a valid identity and the group id.
      const stranger = await dialDirect({ ...dialOptions, protocols: [aggregateProtocol('test')], identity: outsider.identity, port, expectedPeer: target, maxFrameBytes: 1 << 20 })
      await stranger.write(AggregateHeader.encode({ groupId: groupId as Uint8Array<ArrayBuffer> }))
      assert.equal(await closedByPeer(stranger), true, 'a peer without a libp2p connection gets nothing')
      // A connected outsider who knows the group id is still not a member.
      const outsiderNode = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
      try {
        await outsiderNode.dial(swarm.nodes[1].getMultiaddrs()[0])
        const identity = await outsiderNode.services.dataIdentity.create()
        const intruder = await dialDirect({ ...dialOptions, protocols: [aggregateProtocol('test')], identity, port, expectedPeer: target, maxFrameBytes: 1 << 20 })
        await intruder.write(AggregateHeader.encode({ groupId: groupId as Uint8Array<ArrayBuffer> }))
        const reply = await intruder.read(10_000)
        assert.ok(reply != null)
        assert.notEqual(AggregateReply.decode(reply).code, MatchCode.ACCEPTED, 'the outsider was refused')
        // Garbage in place of a header.
        const garbage = await dialDirect({ ...dialOptions, protocols: [aggregateProtocol('test')], identity, port, expectedPeer: target, maxFrameBytes: 1 << 20 })
        await garbage.write(randomBytes(300))
        assert.equal(await closedByPeer(garbage), true, 'garbage closes that connection')
      } finally {
        await outsiderNode.stop()
      }
      const results = await stepping
      const expected = weightedMean([0, 1, 2, 3].map(p => small(p)[0].data), [1, 1, 1, 1])
      for (let p = 0; p < 4; p++) {
        assert.deepEqual(results[p].allreduce.bannedSenders, [])
        assert.equal(results[p].allreduce.partsKeptLocal, 0)
        const got = await swarm.averagers[p].withTensors(ts => ts[0].data.slice())
        assert.ok(maxAbsDiff(got, expected) < 1e-5, `peer ${p} at the exact mean`)
      }
    } finally {
      await swarm.stop()
    }
  })
}

test('direct channel: unreachable data ports and libp2p-only peers fall back to libp2p streams, at the exact mean', { timeout: 90_000 }, async () => {
  // Peer 0 listens where nobody can reach it (127.0.0.2 while its libp2p address is 127.0.0.1);
  // peer 1 does not offer a direct channel at all; peers 2 and 3 talk directly.
  const swarm = await startSwarm(4, {
    tensors: small,
    config: (i) => ({ targetGroupSize: 4, minGroupSize: 4, partSizeBytes: 16384, dataChannel: i === 1 ? 'libp2p' : 'direct', ...(i === 0 ? { dataHost: '127.0.0.2' } : {}) })
  })
  try {
    const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
    const expected = weightedMean([0, 1, 2, 3].map(p => small(p)[0].data), [1, 1, 1, 1])
    for (let p = 0; p < 4; p++) {
      assert.equal(results[p].allreduce.partsKeptLocal, 0)
      assert.deepEqual(results[p].allreduce.bannedSenders, [], `peer ${p} left no sender out`)
      const got = await swarm.averagers[p].withTensors(ts => ts[0].data.slice())
      assert.ok(maxAbsDiff(got, expected) < 1e-5, `peer ${p} at the exact mean (max error ${maxAbsDiff(got, expected)})`)
    }
    assert.equal(swarm.averagers[1].dataChannel.opened.direct, 0, 'a libp2p-only peer never dials directly')
    assert.equal(swarm.averagers[2].dataChannel.opened.direct, 1, 'peer 2 reached only peer 3 directly')
    assert.equal(swarm.averagers[2].dataChannel.opened.libp2p, 2, 'peer 2 fell back to libp2p for peers 0 and 1')
  } finally {
    await swarm.stop()
  }
})

test('direct channel: a reducer that drops the connection after the TLS handshake gets our parts over libp2p, at the exact mean', { timeout: 90_000 }, async () => {
  // Peer 0's data port on 127.0.0.1 (where senders dial it) is a server holding peer 0's own
  // identity that closes every channel once the handshake is done, before any reply: the case of a
  // reducer giving up on a handshake slowed by load after the sender finished its side. Peer 0's
  // averager itself listens on the same port of 127.0.0.2, where nobody dials.
  const key = await generateKeyPair('Ed25519')
  const dropped: string[] = []
  const dropping = await DirectServer.listen({
    identity: await createDataChannelIdentity(key), host: '127.0.0.1', port: 0, protocols: [aggregateProtocol('test')],
    maxFrameBytes: 1 << 20, maxQueuedFrames: 4, handshakeTimeoutMs: 3000,
    accept: (channel) => { dropped.push(channel.remotePeer); channel.abort(new Error('dropped by the test')) }
  })
  const logs: string[] = []
  const swarm = await startSwarm(4, {
    tensors: small,
    node: (i) => i === 0 ? { privateKey: key } : {},
    hooks: () => ({ log: linesLog((msg) => { logs.push(msg) }) }),
    config: (i) => ({ targetGroupSize: 4, minGroupSize: 4, partSizeBytes: 16384, ...(i === 0 ? { dataHost: '127.0.0.2', dataPort: dropping.port } : {}) })
  })
  try {
    const results = await Promise.all(swarm.averagers.map(async a => await a.step({ timeout: 40 })))
    const expected = weightedMean([0, 1, 2, 3].map(p => small(p)[0].data), [1, 1, 1, 1])
    for (let p = 0; p < 4; p++) {
      assert.equal(results[p].allreduce.partsKeptLocal, 0, `peer ${p} kept no part local`)
      assert.deepEqual(results[p].allreduce.failedReducers, [], `peer ${p} saw no reducer fail`)
      const got = await swarm.averagers[p].withTensors(ts => ts[0].data.slice())
      assert.ok(maxAbsDiff(got, expected) < 1e-5, `peer ${p} at the exact mean (max error ${maxAbsDiff(got, expected)})`)
    }
    assert.deepEqual(new Set(dropped), new Set(swarm.nodes.slice(1).map(n => n.peerId.toString())), 'every other peer finished a handshake with the dropping server')
    for (let p = 1; p < 4; p++) {
      assert.equal(swarm.averagers[p].dataChannel.opened.libp2p, 1, `peer ${p} sent peer 0's span over libp2p`)
    }
    assert.ok(logs.some(l => /closed before the reducer accepted it/.test(l)), 'a sender whose direct channel was dropped after its handshake fell back to libp2p')
  } finally {
    await swarm.stop()
    await dropping.close()
  }
})
