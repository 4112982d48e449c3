/**
 * One process's direct data channel alone: how fast it moves tensor parts through it
 * to itself (every byte encrypted, sent over loopback, decrypted, framed, handed to the main thread
 * and copied out there, as the all-reduce does), with the sockets on the main thread or on n data
 * threads. It shows whether the data channel uses more cores as it is given threads, without the other
 * peers' load that an all-reduce on a 2-core machine carries.
 *
 *   npm run bench:data-channel
 *   node_modules/.bin/node dist/bench/data-channel.js --threads 0,1,2 --connections 4 --mib 256 --repeats 3
 */
import { parseArgs } from 'node:util'
import { cpus } from 'node:os'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { createDataChannelIdentity } from '../agent/net/direct/identity.js'
import { mainThreadTransport, type DirectTransport } from '../agent/net/direct/direct-transport.js'
import { DataThreads } from '../agent/net/direct/threads/data-threads.js'
import type { DirectFrameChannel } from '../agent/net/frame-channel.js'

const PROTOCOL = '/avs/bench/data-channel/1.0.0'

const { values } = parseArgs({
  options: {
    threads: { type: 'string', default: '0,1,2' },
    connections: { type: 'string', default: '4' },
    mib: { type: 'string', default: '256' },
    repeats: { type: 'string', default: '3' },
    'part-bytes': { type: 'string', default: '65536' }
  }
})
const threadCounts = values.threads.split(',').map(Number)
const connections = Number(values.connections)
const mibPerWay = Number(values.mib)
const repeats = Number(values.repeats)
/** Bytes of tensor data per part: the agent's partSizeBytes (64 KiB by default, as hivemind's). */
const PART_BYTES = Number(values['part-bytes'])
for (const [name, value] of [['connections', connections], ['mib', mibPerWay], ['repeats', repeats], ['part-bytes', PART_BYTES / 1024], ...threadCounts.map(t => ['threads', t + 1] as const)] as const) {
  if (!Number.isInteger(value) || value < 1) {
    console.error(`--${name} must be a whole number${name === 'threads' ? ' >= 0' : name === 'part-bytes' ? ' of KiB' : ' >= 1'}`)
    process.exit(2)
  }
}

interface Sample { seconds: number, cpuSeconds: number, mainCpuSeconds: number }

const key = await generateKeyPair('Ed25519')
const identity = await createDataChannelIdentity(key)
const self = peerIdFromPrivateKey(key)
const source = new Float32Array(PART_BYTES / 4).fill(1.5)
const head = new Uint8Array(24)

/** Sends `parts` frames of [head, part] and reads as many from the other end, copying each out. */
async function pump (channel: DirectFrameChannel, parts: number): Promise<void> {
  const staging = new Float32Array(PART_BYTES / 4)
  const staged = new Uint8Array(staging.buffer)
  const writing = (async () => {
    for (let i = 0; i < parts; i++) await channel.write([head, new Uint8Array(source.buffer)])
  })()
  for (let i = 0; i < parts; i++) {
    const frame = await channel.readPieces(30_000)
    if (frame == null) throw new Error(`the channel closed after ${i} of ${parts} parts`)
    staged.set(frame.subarray(head.byteLength, head.byteLength + PART_BYTES))
    channel.release?.(frame)
  }
  await writing
}

async function measure (transport: DirectTransport): Promise<Sample> {
  const accepted: DirectFrameChannel[] = []
  let onAccept: (() => void) | null = null
  const listener = await transport.listen({
    identity, host: '127.0.0.1', port: 0, protocols: [PROTOCOL], maxFrameBytes: PART_BYTES + 64, maxQueuedFrames: 16, handshakeTimeoutMs: 10_000,
    accept: (channel) => { accepted.push(channel); onAccept?.() }
  })
  try {
    const dialed: DirectFrameChannel[] = []
    for (let c = 0; c < connections; c++) {
      dialed.push(await transport.dial({ identity, host: '127.0.0.1', port: listener.port, protocols: [PROTOCOL], expectedPeer: self, timeoutMs: 10_000, maxFrameBytes: PART_BYTES + 64, maxQueuedFrames: 16 }))
    }
    while (accepted.length < connections) await new Promise<void>(resolve => { onAccept = resolve })
    const parts = Math.ceil(mibPerWay * 1024 * 1024 / PART_BYTES / connections)
    const cpu = process.cpuUsage()
    const main = process.threadCpuUsage()
    const started = performance.now()
    // Both ends of every connection send and receive at once, as a group member does in a round.
    await Promise.all([...dialed, ...accepted].map(async channel => { await pump(channel, parts) }))
    const seconds = (performance.now() - started) / 1000
    const cpuUsed = process.cpuUsage(cpu)
    const mainUsed = process.threadCpuUsage(main)
    for (const channel of [...dialed, ...accepted]) channel.abort(new Error('done'))
    return { seconds, cpuSeconds: (cpuUsed.user + cpuUsed.system) / 1e6, mainCpuSeconds: (mainUsed.user + mainUsed.system) / 1e6 }
  } finally {
    await listener.close()
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const gibMoved = 2 * 2 * mibPerWay / 1024 // both ends send mibPerWay and receive as much
const rows: string[] = []
let baseline: number | null = null
console.error(`[data-channel] ${cpus().length} cores; ${connections} connections to self, ${mibPerWay} MiB each way per end, ${repeats} repetitions (+1 warm-up)`)
for (const threads of threadCounts) {
  const transport = threads === 0 ? mainThreadTransport : DataThreads.start(threads)
  try {
    const samples: Sample[] = []
    for (let r = 0; r <= repeats; r++) {
      const sample = await measure(transport)
      console.error(`[data-channel] ${threads} data thread(s), ${r === 0 ? 'warm-up' : `repetition ${r}/${repeats}`}: ${sample.seconds.toFixed(2)} s, CPU ${sample.cpuSeconds.toFixed(2)} s (main thread ${sample.mainCpuSeconds.toFixed(2)} s)`)
      if (r > 0) samples.push(sample)
    }
    const seconds = median(samples.map(s => s.seconds))
    const rate = gibMoved * 1024 / seconds
    baseline ??= rate
    rows.push(`| ${threads} | ${rate.toFixed(0)} | ${(rate / baseline).toFixed(2)}× | ${(median(samples.map(s => s.cpuSeconds)) / gibMoved).toFixed(2)} | ${(median(samples.map(s => s.mainCpuSeconds)) / gibMoved).toFixed(2)} | ${(median(samples.map(s => s.cpuSeconds)) / seconds).toFixed(2)} |`)
  } finally {
    await transport.close()
  }
}
console.log(`Direct data path of one process to itself: ${connections} TLS connections, parts of ${PART_BYTES} B both ways, ${gibMoved.toFixed(1)} GiB sent and received per repetition (medians of ${repeats}); ${cpus().length} cores.\n`)
console.log('| data threads | MiB/s sent+received | vs main thread | CPU s per GiB | main-thread CPU s per GiB | cores busy |')
console.log('|---:|---:|---:|---:|---:|---:|')
for (const row of rows) console.log(row)
console.log(`\nReproduce: \`node_modules/.bin/node dist/bench/data-channel.js --threads ${threadCounts.join(',')} --connections ${connections} --mib ${mibPerWay} --repeats ${repeats} --part-bytes ${PART_BYTES}\``)
