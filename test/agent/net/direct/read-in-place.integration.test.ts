import { test } from 'node:test'
import assert from 'node:assert/strict'
import tls from 'node:tls'
import { randomBytes } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { createDataChannelIdentity } from '../../../../agent/net/direct/identity.js'
import { DirectServer } from '../../../../agent/net/direct/direct-server.js'
import { dialDirect } from '../../../../agent/net/direct/direct-dial.js'
import type { SocketFrameChannel } from '../../../../agent/net/direct/socket-channel.js'
import { readInPlace } from '../../../../agent/net/direct/read-in-place.js'
import { FrameQueue, frameHeader } from '../../../../agent/net/frame-channel.js'

const PROTOCOL = '/avs/test/in-place/1.0.0'

/** Frame sizes around a frame header's and a TLS record's (16 KiB) edges, and several records long. */
const SIZES = [0, 1, 3, 4, 5, 4095, 4096, 16379, 16380, 16384, 16385, 65536, 65543, 200_001]

async function pair (maxFrameBytes = 1 << 20): Promise<{ dialed: SocketFrameChannel, accepted: SocketFrameChannel, close: () => Promise<void> }> {
  const keys = await Promise.all([generateKeyPair('Ed25519'), generateKeyPair('Ed25519')])
  const [serverId, clientId] = await Promise.all(keys.map(async k => await createDataChannelIdentity(k)))
  const accepted: SocketFrameChannel[] = []
  const server = await DirectServer.listen({
    identity: serverId, host: '127.0.0.1', port: 0, protocols: [PROTOCOL], maxFrameBytes, maxQueuedFrames: 64,
    handshakeTimeoutMs: 3000, accept: (c) => { accepted.push(c) }
  })
  const dialed = await dialDirect({
    identity: clientId, host: '127.0.0.1', port: server.port, protocols: [PROTOCOL], expectedPeer: peerIdFromPrivateKey(keys[0]),
    timeoutMs: 3000, maxFrameBytes, maxQueuedFrames: 64
  })
  await dialed.write(new Uint8Array([7]))
  while (accepted.length === 0) await new Promise(resolve => setTimeout(resolve, 5))
  assert.deepEqual(await accepted[0].read(2000), new Uint8Array([7]))
  return { dialed, accepted: accepted[0], close: async () => { await server.close() } }
}

test('direct channel: both ends read in place on this node, and frames of every size cross intact both ways', async () => {
  const { dialed, accepted, close } = await pair()
  try {
    // If a node upgrade drops what readInPlace relies on, the channel still works ('data' events)
    // but allocates per read again: this says so instead of letting the rounds slow down unseen.
    assert.equal(dialed.readsInPlace, true, 'the dialing end reads in place')
    assert.equal(accepted.readsInPlace, true, 'the accepting end reads in place')
    for (const [from, to] of [[dialed, accepted], [accepted, dialed]]) {
      const sent = SIZES.map(n => new Uint8Array(randomBytes(n)))
      // Written back to back, so reads straddle frames and headers: every edge of the in-place state is crossed.
      await Promise.all(sent.map(async f => { await from.write(f) }))
      for (const expected of sent) {
        const frame = await to.readPieces(5000)
        assert.ok(frame !== null)
        assert.equal(frame.byteLength, expected.byteLength)
        assert.deepEqual(frame.subarray(), expected)
        if (expected.byteLength > 0) assert.equal([...frame].length, 1, 'a frame read in place is one piece of memory')
        to.release(frame)
      }
    }
  } finally {
    await close()
  }
})

test('direct channel: a released frame\'s memory carries the next frame, and a frame still held is never overwritten', async () => {
  const { dialed, accepted, close } = await pair()
  try {
    const first = new Uint8Array(randomBytes(65536))
    await dialed.write(first)
    const held = await accepted.readPieces(5000)
    assert.ok(held !== null)
    const heldBuffer = [...held][0].buffer
    // Not released: the next frames must land elsewhere.
    const second = new Uint8Array(randomBytes(65536))
    await dialed.write(second)
    const next = await accepted.readPieces(5000)
    assert.ok(next !== null)
    const nextBuffer = [...next][0].buffer
    assert.notEqual(nextBuffer, heldBuffer)
    assert.deepEqual(held.subarray(), first, 'the held frame is untouched')
    accepted.release(next)
    accepted.release(next)
    const third = new Uint8Array(randomBytes(65536))
    await dialed.write(third)
    const reused = await accepted.readPieces(5000)
    assert.ok(reused !== null)
    assert.equal([...reused][0].buffer, nextBuffer, 'the released memory was taken again')
    assert.deepEqual(reused.subarray(), third)
    const fourth = new Uint8Array(randomBytes(65536))
    await dialed.write(fourth)
    const after = await accepted.readPieces(5000)
    assert.ok(after !== null)
    assert.notEqual([...after][0].buffer, nextBuffer, 'a frame released twice was pooled once')
    assert.deepEqual(after.subarray(), fourth)
    assert.deepEqual(held.subarray(), first)
  } finally {
    await close()
  }
})

test('readInPlace: bytes the socket read before the switch come first, then the rest in order', async () => {
  const key = await generateKeyPair('Ed25519')
  const { key: pem, cert } = await createDataChannelIdentity(key)
  const frames = SIZES.map(n => new Uint8Array(randomBytes(n)))
  const server = tls.createServer({ key: pem, cert }, (socket) => {
    socket.on('error', () => {})
    // The first half now, the rest once the client says it switched.
    for (const f of frames.slice(0, 7)) { socket.write(frameHeader(f.byteLength)); socket.write(f) }
    socket.once('data', () => { for (const f of frames.slice(7)) { socket.write(frameHeader(f.byteLength)); socket.write(f) } })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const client = tls.connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, rejectUnauthorized: false })
  try {
    await new Promise<void>(resolve => client.once('secureConnect', () => { resolve() }))
    const firstHalf = frames.slice(0, 7).reduce((s, f) => s + 4 + f.byteLength, 0)
    const deadline = Date.now() + 5000
    while (client.readableLength < firstHalf && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 5))
    assert.equal(client.readableLength, firstHalf, 'the first frames wait in the socket\'s buffer')
    const queue = new FrameQueue({ pause: () => client.pause(), resume: () => client.resume(), violate: (err) => { throw err }, describePeer: () => 'server' }, { maxFrameBytes: 1 << 20, maxQueuedFrames: 64 })
    assert.equal(readInPlace(client, queue), true)
    client.write('go')
    for (const expected of frames) {
      const frame = await queue.readPieces(5000)
      assert.ok(frame !== null)
      assert.deepEqual(frame.subarray(), expected)
    }
  } finally {
    client.destroy()
    await new Promise(resolve => server.close(resolve))
  }
})
