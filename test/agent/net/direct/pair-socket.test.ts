import { test } from 'node:test'
import assert from 'node:assert/strict'
import net from 'node:net'
import { SocketFrameChannel } from '../../../../agent/net/direct/socket-channel.js'
import { LANE_HEADER_BYTES, LANE_WINDOW_BYTES, PairSocket, type LaneChannel } from '../../../../agent/net/direct/pair-socket.js'

// The pair channel's lanes over a real TCP connection (the TLS layer under it in the agent changes
// nothing here): both directions at once, a lane's own flow control, and what a peer that breaks the
// lane protocol gets (its socket closed, and an error that says why).

const PROTOCOL = '/avs/test/aggregate/1.2.0'

interface Ends { dialer: SocketFrameChannel, acceptor: SocketFrameChannel, close: () => Promise<void> }

async function connected (): Promise<Ends> {
  const server = net.createServer({ allowHalfOpen: true })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as net.AddressInfo).port
  const accepted = new Promise<net.Socket>(resolve => server.once('connection', resolve))
  const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true })
  await new Promise<void>(resolve => socket.once('connect', () => { resolve() }))
  const options = { protocol: PROTOCOL, maxFrameBytes: FRAME_BYTES + LANE_HEADER_BYTES }
  const dialer = new SocketFrameChannel(socket, 'acceptor-peer', options)
  const acceptor = new SocketFrameChannel(await accepted, 'dialer-peer', options)
  return {
    dialer,
    acceptor,
    close: async () => {
      dialer.abort(new Error('test over'))
      acceptor.abort(new Error('test over'))
      await new Promise<void>(resolve => server.close(() => { resolve() }))
    }
  }
}

function pairs (ends: Ends, idleMs = 60_000): { a: PairSocket, b: PairSocket, laneAtB: LaneChannel[], laneAtA: LaneChannel[] } {
  const laneAtA: LaneChannel[] = []
  const laneAtB: LaneChannel[] = []
  const a = new PairSocket(ends.dialer, { dialedByUs: true, remoteDataPort: 4000, localDataPort: 3000, idleMs, onLane: (lane) => { laneAtA.push(lane) } })
  const b = new PairSocket(ends.acceptor, { dialedByUs: false, localDataPort: 4000, idleMs: 2 * idleMs, onLane: (lane) => { laneAtB.push(lane) } })
  return { a, b, laneAtA, laneAtB }
}

async function until (what: string, check: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 2))
  }
}

/** Frames of a default part's size: a lane's window holds WINDOW_FRAMES of them. */
const FRAME_BYTES = 65536
const WINDOW_FRAMES = LANE_WINDOW_BYTES / FRAME_BYTES
const PATTERN = Uint8Array.from({ length: FRAME_BYTES }, (_, i) => (i * 7 + 3) % 251)
/** Frame k of a lane: the same pattern, stamped with both. */
function payload (lane: number, k: number): Uint8Array {
  const bytes = PATTERN.slice()
  bytes[0] = lane
  new DataView(bytes.buffer).setUint32(1, k, true)
  return bytes
}

test('pair socket: lanes opened from both sides carry their frames both ways at once, each exactly, many windows long', async () => {
  const ends = await connected()
  try {
    const { a, b, laneAtA, laneAtB } = pairs(ends)
    await until('the dialer\'s hello', () => b.remoteDataPort === 3000)
    assert.equal(b.usable, true)
    const fromA = [a.openLane(), a.openLane()]
    const fromB = [b.openLane()]
    await until('the lanes to arrive', () => laneAtB.length === 2 && laneAtA.length === 1)
    const FRAMES = 3 * WINDOW_FRAMES
    // Each opener writes FRAMES frames and reads as many back; each accepting side echoes them reversed.
    const exchange = async (mine: LaneChannel, theirs: LaneChannel, id: number): Promise<void> => {
      const echo = (async () => {
        for (let k = 0; k < FRAMES; k++) {
          const got = await theirs.read(5000)
          assert.deepEqual(got, payload(id, k), `lane ${id}: frame ${k} arrived exact`)
          await theirs.write(Uint8Array.from(got!).reverse())
        }
        assert.equal(await theirs.read(5000), null, `lane ${id}: the opener half-closed`)
        await theirs.closeWrite()
      })()
      const send = (async () => { for (let k = 0; k < FRAMES; k++) await mine.write(payload(id, k)); await mine.closeWrite() })()
      for (let k = 0; k < FRAMES; k++) assert.deepEqual(await mine.read(5000), Uint8Array.from(payload(id, k)).reverse(), `lane ${id}: echo ${k} exact`)
      assert.equal(await mine.read(5000), null)
      await Promise.all([echo, send, mine.closed, theirs.closed])
    }
    await Promise.all([exchange(fromA[0], laneAtB[0], 0), exchange(fromA[1], laneAtB[1], 1), exchange(fromB[0], laneAtA[0], 2)])
    assert.deepEqual(a.lanesOpened, { local: 2, remote: 1 })
    assert.deepEqual(b.lanesOpened, { local: 1, remote: 2 })
  } finally {
    await ends.close()
  }
})

test('pair socket: a lane whose reader waits holds its own sender at the window, never the other lanes', async () => {
  const ends = await connected()
  try {
    const { a, b, laneAtB, laneAtA } = pairs(ends)
    await until('the hello', () => b.usable)
    const stuck = a.openLane()
    const other = a.openLane()
    const back = b.openLane()
    await until('the lanes', () => laneAtB.length === 2 && laneAtA.length === 1)
    let written = 0
    const writing = (async () => { for (let k = 0; k < 3 * WINDOW_FRAMES; k++) { await stuck.write(payload(9, k)); written++ } })()
    await until('the window to fill', () => written === WINDOW_FRAMES)
    await new Promise(resolve => setTimeout(resolve, 50))
    assert.equal(written, WINDOW_FRAMES, 'the sender stops at the window while nobody reads its lane')
    // Meanwhile both directions of the socket carry the other lanes.
    const FRAMES = 2 * WINDOW_FRAMES
    await Promise.all([
      (async () => { for (let k = 0; k < FRAMES; k++) await other.write(payload(1, k)) })(),
      (async () => { for (let k = 0; k < FRAMES; k++) assert.deepEqual(await laneAtB[1].read(3000), payload(1, k)) })(),
      (async () => { for (let k = 0; k < FRAMES; k++) await back.write(payload(2, k)) })(),
      (async () => { for (let k = 0; k < FRAMES; k++) assert.deepEqual(await laneAtA[0].read(3000), payload(2, k)) })()
    ])
    assert.equal(written, WINDOW_FRAMES, 'still held')
    for (let k = 0; k < 3 * WINDOW_FRAMES; k++) assert.deepEqual(await laneAtB[0].read(3000), payload(9, k))
    await writing
  } finally {
    await ends.close()
  }
})

/** A lane frame as a peer would put it on the socket. */
function laneFrame (kind: number, lane: number, body: number[] = []): Uint8Array {
  const bytes = Buffer.alloc(LANE_HEADER_BYTES + body.length)
  bytes[0] = kind
  bytes.writeUInt32LE(lane, 1)
  bytes.set(body, LANE_HEADER_BYTES)
  return bytes
}

const u32 = (n: number): number[] => [n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, n >>> 24]

for (const { what, frames, error } of [
  { what: 'data on a lane never opened', frames: [laneFrame(0, 7, [1, 2])], error: /sent data on lane 7, which was never opened/ },
  { what: 'a lane opened with our parity', frames: [laneFrame(1, 2)], error: /opened lane 2 out of order/ },
  { what: 'a lane id opened twice', frames: [laneFrame(1, 1), laneFrame(1, 1)], error: /opened lane 1 out of order/ },
  { what: 'more bytes than its window', frames: [laneFrame(1, 1), ...Array.from({ length: WINDOW_FRAMES + 1 }, (_, k) => laneFrame(0, 1, [...payload(1, k)]))], error: /sent more than its window on lane 1/ },
  { what: 'a credit beyond the window', frames: [laneFrame(4, 2, u32(1))], error: /granted 1 bytes on lane 2, beyond the lane's window/ },
  { what: 'a frame shorter than a lane header', frames: [Uint8Array.of(0, 1)], error: /shorter than a lane header/ },
  { what: 'a second hello', frames: [laneFrame(5, 0, u32(5000))], error: /unexpected hello/ },
  { what: 'an unknown kind', frames: [laneFrame(9, 1)], error: /unknown kind 9/ }
]) {
  test(`pair socket: a peer that sends ${what} loses the socket, with an error that says so`, async () => {
    const ends = await connected()
    try {
      // We accepted the socket; the test plays the dialer with raw frames (after its hello).
      const opened: LaneChannel[] = []
      const b = new PairSocket(ends.acceptor, { dialedByUs: false, localDataPort: 4000, idleMs: 60_000, onLane: (lane) => { opened.push(lane) } })
      await ends.dialer.write(laneFrame(5, 0, u32(3000)))
      await until('the hello', () => b.usable)
      const ours = b.openLane()
      for (const frame of frames) await ends.dialer.write(frame)
      await assert.rejects(ours.read(3000), error)
      await b.closed
      assert.equal(b.usable, false)
      assert.equal(await ends.dialer.read(3000).then(() => 'ended', () => 'ended'), 'ended', 'the peer sees its socket end')
    } finally {
      await ends.close()
    }
  })
}

test('pair socket: without lanes for its idle time the socket closes at both ends, and opens no lane after', async () => {
  const ends = await connected()
  try {
    const { a, b, laneAtB } = pairs(ends, 150)
    await until('the hello', () => b.usable)
    const lane = a.openLane()
    await until('the lane', () => laneAtB.length === 1)
    await lane.write(payload(0, 0))
    assert.deepEqual(await laneAtB[0].read(1000), payload(0, 0))
    await Promise.all([lane.closeWrite(), laneAtB[0].closeWrite()])
    await Promise.all([lane.closed, laneAtB[0].closed])
    const idleFrom = Date.now()
    await Promise.all([a.closed, b.closed])
    assert.ok(Date.now() - idleFrom >= 120, 'closed after the idle time, not before')
    assert.equal(a.usable, false)
    assert.throws(() => a.openLane(), /closing/)
  } finally {
    await ends.close()
  }
})
