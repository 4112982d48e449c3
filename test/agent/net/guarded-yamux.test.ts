// A stream opened on a connection that has begun closing for writing: yamux sends the stream's
// first window update from a microtask, which threw StreamStateError uncaught and ended the
// process (bench:moshpit-scale, 64 agents in one process losing 10 % a round). Real yamux muxers
// over libp2p's own in-memory connection pair.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { multiaddrConnectionPair } from '@libp2p/utils'
import { guardedYamux } from '../../../agent/net/guarded-yamux.js'

// Run in a child: an uncaught exception there is the failure, and cannot take the test runner down with it.
const script = (muxer: string): string => `
  import { multiaddrConnectionPair } from '@libp2p/utils'
  import { yamux } from '@libp2p/yamux'
  import { guardedYamux } from ${JSON.stringify(fileURLToPath(new URL('../../../agent/net/guarded-yamux.js', import.meta.url)))}
  const [a, b] = multiaddrConnectionPair()
  const make = ${muxer}
  const ours = make()().createStreamMuxer(a)
  make()().createStreamMuxer(b)
  void a.close()
  await ours.createStream()
  await new Promise(resolve => setTimeout(resolve, 50))
  console.log('alive')
`

function run (muxer: string): { status: number | null, stdout: string, stderr: string } {
  return spawnSync(process.execPath, ['--input-type=module', '-e', script(muxer)], { encoding: 'utf8', cwd: fileURLToPath(new URL('../../../..', import.meta.url)) })
}

test('yamux as shipped: a stream opened as its connection closes throws from a microtask and ends the process', () => {
  const out = run('yamux')
  assert.notEqual(out.status, 0)
  assert.match(out.stderr, /StreamStateError: Cannot write to a stream that is closing/)
})

test('guardedYamux: the same stream opens, its frame is dropped, the process lives', () => {
  const out = run('guardedYamux')
  assert.equal(out.status, 0, out.stderr)
  assert.match(out.stdout, /alive/)
})

test('guardedYamux: streams on an open connection still carry data both ways', async () => {
  const [a, b] = multiaddrConnectionPair()
  const client = guardedYamux()().createStreamMuxer(a)
  const server = guardedYamux()().createStreamMuxer(b)
  const received = new Promise<string>(resolve => {
    server.addEventListener('stream', (evt) => {
      evt.detail.addEventListener('message', (m) => { resolve(new TextDecoder().decode(m.data.subarray())) }, { once: true })
    })
  })
  const stream = await client.createStream()
  stream.send(new TextEncoder().encode('hello'))
  assert.equal(await received, 'hello')
  await client.close()
  await server.close()
})
