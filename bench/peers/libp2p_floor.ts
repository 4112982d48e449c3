/**
 * The libp2p floors: one butterfly all-reduce's traffic over libp2p TCP + an encrypter + Yamux,
 * with the agent's Yamux windows (BENCH_YAMUX_WINDOWS_MIB="initial/max", default "2/16"). BENCH_LIBP2P_ENCRYPTER picks the encrypter: 'tls' (@libp2p/tls) or
 * 'noise' (@libp2p/noise). Connections are made before the first round; each round opens one
 * stream per ordered pair (as a streaming all-reduce would), writes 2·S/n bytes with a
 * high-water mark on the write buffer, and closes it.
 */
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { tls } from '@libp2p/tls'
import { noise } from '@libp2p/noise'
import { yamux } from '@libp2p/yamux'
import { multiaddr } from '@multiformats/multiaddr'
import type { Stream } from '@libp2p/interface'
import { runBenchPeer } from '../lib/peer-client.js'
import { pairBytes, RoundReceiver } from '../lib/all-to-all.js'

const PROTOCOL = '/avs-bench/floor/1.0.0'
const CHUNK = 1024 * 1024
const HIGH_WATER = 4 * 1024 * 1024
const MiB = 1024 * 1024

/**
 * Waits until the stream's write buffer is below the high-water mark. Not `await stream.onDrain()`:
 * in @libp2p/utils 7.4.1 its promise is created once and never cleared, so after the first drain it
 * resolves at once forever and a high-water loop around it spins on microtasks, starving the socket
 * (the 25M floor hung that way). 'drain' fires on every yamux window update.
 */
async function belowHighWater (stream: Stream): Promise<void> {
  while (stream.writeBufferLength > HIGH_WATER && stream.status === 'open') {
    await new Promise<void>((resolve) => {
      const wake = (): void => {
        for (const name of ['drain', 'idle', 'close'] as const) stream.removeEventListener(name, wake)
        resolve()
      }
      for (const name of ['drain', 'idle', 'close'] as const) stream.addEventListener(name, wake)
    })
  }
}

/** Sends in progress, for the stall report: stream and bytes handed to it so far. */
const sending = new Map<Stream, number>()

async function sendAll (stream: Stream, payload: Uint8Array): Promise<void> {
  for (let offset = 0; offset < payload.length; offset += CHUNK) {
    if (stream.status !== 'open') throw new Error(`the stream to ${stream.id} closed (${stream.status}) after ${offset} of ${payload.length} bytes`)
    stream.send(payload.subarray(offset, Math.min(offset + CHUNK, payload.length)))
    sending.set(stream, Math.min(offset + CHUNK, payload.length))
    await belowHighWater(stream)
  }
  sending.delete(stream)
  await stream.close()
}

await runBenchPeer(async (env) => {
  const encrypter = process.env.BENCH_LIBP2P_ENCRYPTER ?? 'tls'
  if (encrypter !== 'tls' && encrypter !== 'noise') throw new Error(`BENCH_LIBP2P_ENCRYPTER must be tls or noise, got "${encrypter}"`)
  // Yamux windows in MiB, initial/max. Default 2/16, the agent's: with 16/64 the TLS floor
  // deadlocked (8 peers × 25M every time, 4 × 25M once; see bench/README.md).
  const [initialWindow, maxWindow] = (process.env.BENCH_YAMUX_WINDOWS_MIB ?? '2/16').split('/').map(Number)
  if (!(initialWindow >= 0.25 && maxWindow >= initialWindow)) throw new Error(`BENCH_YAMUX_WINDOWS_MIB must be "initial/max" in MiB with 0.25 <= initial <= max, got "${process.env.BENCH_YAMUX_WINDOWS_MIB ?? ''}"`)
  const bytes = pairBytes(env.elements, env.world)
  const payload = new Uint8Array(bytes).fill(0x5a)
  const receiver = new RoundReceiver()
  const node = await createLibp2p({
    addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
    transports: [tcp()],
    connectionEncrypters: [encrypter === 'tls' ? tls() : noise()],
    streamMuxers: [yamux({
      enableKeepAlive: false,
      streamOptions: { initialStreamWindowSize: initialWindow * MiB, maxStreamWindowSize: maxWindow * MiB, maxReadBufferLength: 2 * maxWindow * MiB }
    })],
    connectionManager: { maxConnections: 1000, inboundConnectionThreshold: 10_000, maxIncomingPendingConnections: 256 },
    // The monitor pings every 10 s and aborts the connection when a ping times out, which a
    // saturated loaded link can make it do mid-transfer (seen at 4 peers × 25M): keep the pings, not the aborts.
    connectionMonitor: { abortConnectionOnPingFailure: false }
  })
  await node.handle(PROTOCOL, (stream) => {
    stream.addEventListener('message', (evt) => { receiver.add(evt.data.byteLength) })
    stream.addEventListener('remoteCloseWrite', () => { stream.close().catch(() => {}) })
  }, { maxInboundStreams: 1024, maxOutboundStreams: 1024 })
  let peers: ReturnType<typeof multiaddr>[] = []
  return {
    address: node.getMultiaddrs()[0].toString(),
    async connect (addrs) {
      peers = addrs.filter((_a, rank) => rank !== env.rank).map((a) => multiaddr(a))
      // Lower ranks dial higher ones so that each pair shares one connection, as in the socket floors.
      await Promise.all(addrs.map(async (a, rank) => { if (rank > env.rank) await node.dial(multiaddr(a)) }))
    },
    prepare () { receiver.reset(bytes * (env.world - 1)) },
    async allReduce (round) {
      // A round that stalls says where: which sends are stuck with how much buffered, and what arrived.
      const stall = setTimeout(() => {
        const lines = [...sending].map(([s, handed]) => `  stream ${s.id} ${s.status}/${s.writeStatus}: handed ${handed}, buffered ${s.writeBufferLength}, needsDrain ${String((s as any).writableNeedsDrain)}`)
        process.stderr.write(`round ${round} stalled 30 s: received ${receiver.progress}\n${lines.join('\n')}\n`)
      }, 30_000)
      const sends = peers.map(async (ma) => {
        const stream = await node.dialProtocol(ma, PROTOCOL, { maxOutboundStreams: 1024 })
        await sendAll(stream, payload)
      })
      try {
        await Promise.all([...sends, receiver.complete])
      } finally {
        clearTimeout(stall)
      }
      return undefined
    },
    note: () => `libp2p TCP + ${encrypter === 'tls' ? '@libp2p/tls' : '@libp2p/noise'} + yamux (windows ${initialWindow}/${maxWindow} MiB)`,
    async close () { await node.stop() }
  }
})
