import { test } from 'node:test'
import assert from 'node:assert/strict'
import tls from 'node:tls'
import { randomBytes } from 'node:crypto'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { Uint8ArrayList } from 'uint8arraylist'
import { createSwarmNode } from '../../../agent/net/node.js'
import { createDataChannelIdentity } from '../../../agent/net/direct/identity.js'

// The frame queue keeps frames as views of the chunks a transport emits (agent/net/frame-channel.ts).
// That is right only while every transport hands each chunk in memory of its own and never writes
// to it again: these tests hold every chunk until the end and then check the bytes.

test('node:tls hands every chunk in an ArrayBuffer of its own, never rewritten', async () => {
  const identity = await createDataChannelIdentity(await generateKeyPair('Ed25519'))
  const payload = randomBytes(8 * 1024 * 1024)
  const server = tls.createServer({ key: identity.key, cert: identity.cert }, (socket) => { socket.end(payload) })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  try {
    const chunks = await new Promise<Buffer[]>((resolve, reject) => {
      const got: Buffer[] = []
      const socket = tls.connect({ host: '127.0.0.1', port: (server.address() as { port: number }).port, rejectUnauthorized: false })
      socket.on('data', (chunk: Buffer) => { got.push(chunk) })
      socket.on('end', () => { resolve(got) })
      socket.on('error', reject)
    })
    assert.ok(chunks.length > 100, `${chunks.length} chunks`)
    assert.equal(new Set(chunks.map(c => c.buffer)).size, chunks.length, 'every chunk has an ArrayBuffer of its own')
    assert.ok(Buffer.concat(chunks).equals(payload), 'chunks held to the end still hold what was sent')
  } finally {
    server.close()
  }
})

for (const encryption of ['noise', 'tls'] as const) {
  test(`libp2p streams over ${encryption} + yamux hand chunks that are never rewritten`, async () => {
    const [a, b] = await Promise.all([0, 1].map(async () => await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], encryption: [encryption] })))
    try {
      const payload = randomBytes(8 * 1024 * 1024)
      const messages: Array<Uint8Array | Uint8ArrayList> = []
      const ended = new Promise<void>(resolve => {
        void b.handle('/avs/test/chunks/1.0.0', (stream) => {
          stream.addEventListener('message', (evt) => { messages.push(evt.data) })
          stream.addEventListener('remoteCloseWrite', () => { resolve() })
        })
      })
      const stream = await a.dialProtocol(b.getMultiaddrs()[0], '/avs/test/chunks/1.0.0')
      for (let at = 0; at < payload.length; at += 65536) stream.send(payload.subarray(at, at + 65536))
      await stream.close()
      await ended
      const chunks = messages.flatMap(m => m instanceof Uint8Array ? [m] : [...m])
      assert.ok(chunks.length > 10, `${chunks.length} chunks`)
      assert.ok(Buffer.concat(chunks).equals(payload), 'chunks held to the end still hold what was sent')
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
  })
}
