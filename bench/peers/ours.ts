/**
 * This project's averager as a benchmark peer: one DecentralizedAverager per process, real libp2p
 * over loopback. BENCH_DATA_CHANNEL=libp2p keeps the parts on libp2p streams (default: direct);
 * BENCH_KERNELS=js checks and sums with the JavaScript kernels (default: WebAssembly SIMD);
 * BENCH_DATA_THREADS=n carries the direct channel's sockets on n data threads (default 0: main thread);
 * BENCH_BANDWIDTH declares this peer's bandwidth by hand (default: the agent measures its link's rate).
 */
import { multiaddr } from '@multiformats/multiaddr'
import { runBenchPeer } from '../lib/peer-client.js'
import { benchHost, fillTensor, maxAbsErrorOf } from '../lib/protocol.js'
import { createSwarmNode } from '../../agent/net/node.js'
import { settleRoutingTable } from '../../agent/net/bootstrap.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG } from '../../agent/averager.js'
import { isCompressionName } from '../../agent/compression/index.js'
import { linesLog } from '../../agent/log.js'

/** Wall-clock time on every log line: the ranks' logs line up with each other and with outside samples (ss, tc). */
const clock = (): string => new Date().toISOString().slice(11, 23)

await runBenchPeer(async (env) => {
  const log = linesLog((msg) => { process.stderr.write(`[ours ${env.rank} ${clock()}] ${msg}\n`) })
  const node = await createSwarmNode({ listen: [`/ip4/${benchHost()}/tcp/0`], rendezvous: { requestTimeoutMs: 2000, log } })
  const data = new Float32Array(env.elements)
  const compression = env.compression
  if (!isCompressionName(compression) && compression !== 'auto') throw new Error(`unknown compression ${compression}`)
  const bandwidth = process.env.BENCH_BANDWIDTH !== undefined ? Number(process.env.BENCH_BANDWIDTH) : undefined
  /** Per round: the codec the group used and the bandwidth we declared (shown in the note: the adaptation over rounds). */
  const history: string[] = []
  const dataChannel = process.env.BENCH_DATA_CHANNEL === 'libp2p' ? 'libp2p' : 'direct'
  const kernels = process.env.BENCH_KERNELS === 'js' ? 'js' : undefined
  const dataThreads = Number(process.env.BENCH_DATA_THREADS ?? '0')
  let averager: DecentralizedAverager | null = null
  let groupRanks: number[] = []
  return {
    address: node.getMultiaddrs()[0].toString(),
    async connect (addrs) {
      // Like an agent: dial the first peer only and let the DHT introduce the rest (16 peers dialling
      // all 15 others at once on 2 cores timed out in their handshakes).
      if (env.rank !== 0) await node.dial(multiaddr(addrs[0]), { signal: AbortSignal.timeout(60_000) })
      await settleRoutingTable(node, 20_000)
      averager = await DecentralizedAverager.create(node, [{ name: 'x', shape: [env.elements], data }], {
        ...DEFAULT_AVERAGER_CONFIG,
        prefix: 'bench',
        targetGroupSize: env.groupSize,
        minGroupSize: env.groupSize,
        averagingExpiration: 5,
        requestTimeout: 2,
        allreduceTimeout: 240,
        partSizeBytes: env.partBytes,
        compression,
        dataChannel,
        kernels,
        dataThreads,
        dataHost: benchHost(),
        ...(bandwidth !== undefined ? { bandwidth } : {})
      }, { log })
    },
    prepare () { fillTensor(data, env.rank) },
    async allReduce () {
      const result = await averager!.step({ gather: env.rank, timeout: 300 })
      groupRanks = [...result.gathered.values()] as number[]
      history.push(`${result.codec}${result.delta ? '+delta' : ''}${result.declaredBandwidth !== undefined ? `@${(result.declaredBandwidth * 8 / 1e6).toFixed(0)}M` : ''}`)
      if (result.allreduce.partsKeptLocal > 0) throw new Error(`${result.allreduce.partsKeptLocal} parts were not averaged`)
      return { matchmakingMs: result.matchmakingMs }
    },
    check: () => maxAbsErrorOf(data, env.world, groupRanks),
    note: () => {
      const path = averager?.dataChannel
      const parts = path?.kind === 'direct' && path.opened.libp2p === 0
        ? `parts over direct TLS 1.3 sockets (node:tls, peer ids bound in certificates) on ${path.threads > 0 ? `${path.threads} data thread(s)` : 'the main thread'}`
        : `parts over libp2p TCP + ${node.getConnections()[0]?.encryption ?? '?'} + yamux (${path?.opened.direct ?? 0} direct, ${path?.opened.libp2p ?? 0} libp2p channels)`
      return `${parts}, ${averager?.kernelBackend ?? '?'} kernels, part ${env.partBytes} B, compression ${env.compression}; rank ${env.rank} codec(+delta: changes since a shared base)@declared Mbit/s per round: ${history.join(' ')}`
    },
    async close () { await averager?.shutdown(); await node.stop() }
  }
})
