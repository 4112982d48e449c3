/**
 * This project's averager as a Moshpit benchmark host (bench/moshpit.ts): one rank per process, one
 * libp2p node and one DecentralizedAverager on loopback, starting at its grid key's group bits. A rank
 * the coordinator names as a victim crashes (SIGKILL on its own process) the moment matchmaking has
 * assembled its group in the kill round, before its all-reduce moves data; if its step ends without
 * a group, it crashes right after. Host protocol: bench/lib/moshpit-coordinator.ts.
 */
import { multiaddr } from '@multiformats/multiaddr'
import { post } from '../lib/peer-client.js'
import type { RankReport } from '../lib/moshpit-coordinator.js'
import { createSwarmNode } from '../../agent/net/node.js'
import { settleRoutingTable } from '../../agent/net/bootstrap.js'
import { DecentralizedAverager, DEFAULT_AVERAGER_CONFIG } from '../../agent/averager.js'
import { linesLog } from '../../agent/log.js'

const env = process.env
const coord = env.BENCH_COORD ?? ''
const host = Number(env.BENCH_HOST)
const rank = Number(env.BENCH_RANKS)
const seconds = (name: string, fallback: number): number => Number(env[name] ?? fallback)
const log = (msg: string): void => { process.stderr.write(`[${new Date().toISOString().slice(11, 23)} ours ${rank}] ${msg}\n`) }

function crash (why: string): never {
  log(`crashing on purpose: ${why}`)
  process.kill(process.pid, 'SIGKILL')
  throw new Error('unreachable')
}

async function main (): Promise<void> {
  if (coord === '' || !Number.isInteger(host) || !Number.isInteger(rank)) throw new Error('BENCH_COORD, BENCH_HOST and BENCH_RANKS (one rank) are required: this program is started by bench/moshpit.ts')
  const requestTimeout = seconds('BENCH_REQUEST_TIMEOUT', 3)
  const node = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'], rendezvous: { requestTimeoutMs: requestTimeout * 1000, log: linesLog(log) } })
  const hello = await post(coord, '/hello', { host, ranks: [rank], addrs: { [rank]: node.getMultiaddrs()[0].toString() } }) as {
    addrs: string[], start: Record<string, { bits: string, vector: number[] }>
  }
  const start = hello.start[String(rank)]
  const data = Float32Array.from(start.vector)
  // Like an agent: dial the first peer only and let the DHT introduce the rest; retry, as an agent's
  // bootstrap does, since 64 runtimes starting on 2 cores can time a first handshake out.
  for (let attempt = 1; rank !== 0; attempt++) {
    try {
      await node.dial(multiaddr(hello.addrs[0]), { signal: AbortSignal.timeout(30_000) })
      break
    } catch (err) {
      if (attempt >= 6) throw new Error(`could not reach rank 0 after ${attempt} dials: ${err instanceof Error ? err.message : String(err)}`)
      log(`dial ${attempt} to rank 0 failed (${err instanceof Error ? err.message : String(err)}), retrying`)
      await new Promise((resolve) => setTimeout(resolve, 1000 * attempt))
    }
  }
  await settleRoutingTable(node, 30_000)
  let victim = false
  const averager = await DecentralizedAverager.create(node, [{ name: 'x', shape: [data.length], data }], {
    ...DEFAULT_AVERAGER_CONFIG,
    prefix: 'moshpit',
    targetGroupSize: Number(env.BENCH_GROUP_SIZE ?? 4),
    minGroupSize: Number(env.BENCH_MIN_GROUP_SIZE ?? 2),
    initialGroupBits: start.bits,
    averagingExpiration: seconds('BENCH_MATCHMAKING_TIME', 5),
    requestTimeout,
    allreduceTimeout: seconds('BENCH_ALLREDUCE_TIMEOUT', 20)
  }, {
    log: linesLog(log),
    onGroup: (group) => { if (victim) crash(`group of ${group.peerIds.length} assembled, before its all-reduce`) }
  })
  log(`ready with group bits "${start.bits}"`)
  await post(coord, '/ready', { host })

  let reports: RankReport[] = []
  for (let round = -1; ;) {
    const next = await post(coord, '/round', { host, round, reports }) as { round: number, stop: boolean, kill: number[] }
    if (next.stop) break
    round = next.round
    victim = next.kill.includes(rank)
    const started = performance.now()
    let report: RankReport
    try {
      const result = await averager.step({ weight: 1, gather: rank, timeout: seconds('BENCH_STEP_TIMEOUT', 30) })
      report = { rank, ok: true, groupSize: result.peers.length, stepMs: performance.now() - started, vector: Array.from(data) }
      log(`round ${round + 1}: averaged in a group of ${result.peers.length} (bits now "${averager.groupBits}"), ${result.allreduce.partsKeptLocal} parts kept local`)
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err)
      report = { rank, ok: false, stepMs: performance.now() - started, error, vector: Array.from(data) }
      log(`round ${round + 1}: step failed: ${error}`)
    }
    if (victim) crash('its step ended before a group assembled')
    reports = [report]
  }
  // Leave politely, but do not let a slow shutdown on a loaded machine hold the run.
  await Promise.race([(async () => { await averager.shutdown(); await node.stop() })(), new Promise((resolve) => setTimeout(resolve, 5000))])
}

main().then(() => process.exit(0), async (err: Error) => {
  log(err.message)
  await post(coord, '/error', { host, message: err.message }).catch(() => {})
  process.exit(1)
})
