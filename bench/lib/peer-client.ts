import { request } from 'node:http'
import { peerEnvFrom, type PeerEnv, type PeerResult } from './protocol.js'

/** One all-reduce implementation as the harness drives it inside a peer process. */
export interface BenchPeer {
  /** What the other peers need to reach this one (a multiaddr, host:port); '' when nothing. */
  readonly address: string
  /** Called once with every rank's address, before any round. */
  connect: (addrs: readonly string[]) => Promise<void>
  /** Untimed work before a round, e.g. resetting the tensor to its initial values. */
  prepare?: (round: number) => Promise<void> | void
  /** The timed operation: one all-reduce. May say how long its matchmaking took. */
  allReduce: (round: number) => Promise<{ matchmakingMs?: number } | undefined>
  /** Untimed check after a round: largest |result - exact mean|. Absent when nothing is averaged. */
  check?: () => number
  /** A line shown under the table (e.g. which cipher was negotiated). */
  note?: () => string | undefined
  close: () => Promise<void>
}

/** POST a JSON body to the coordinator and wait (long poll, no timeout: the runner bounds the run). */
export async function post (coord: string, path: string, body: unknown): Promise<any> {
  const url = new URL(path, coord)
  const payload = JSON.stringify(body, (_key, value) => typeof value === 'number' && !Number.isFinite(value) ? String(value) : value)
  return await new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        if (res.statusCode !== 200) reject(new Error(`coordinator answered ${res.statusCode ?? '?'} to ${path}: ${text}`))
        else resolve(text === '' ? {} : JSON.parse(text))
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(payload)
  })
}

function cpuSecondsNow (): number {
  const usage = process.cpuUsage()
  return (usage.user + usage.system) / 1e6
}

/** CPU seconds of the main thread alone: what a peer's worker threads cannot take over. */
function mainThreadCpuSecondsNow (): number {
  const usage = process.threadCpuUsage()
  return (usage.user + usage.system) / 1e6
}

/**
 * Drives a TypeScript peer through the protocol: register, warm-up rounds, measured rounds (each
 * behind a barrier so all peers start together), then POST /result. Any failure is reported to the
 * coordinator in one sentence and the process exits non-zero.
 */
export async function runBenchPeer (create: (env: PeerEnv) => Promise<BenchPeer>): Promise<void> {
  let env: PeerEnv | undefined
  try {
    env = peerEnvFrom()
    const peer = await create(env)
    const { addrs } = await post(env.coord, '/register', { rank: env.rank, addr: peer.address }) as { addrs: string[] }
    await peer.connect(addrs)
    const roundsMs: number[] = []
    const matchmakingMs: number[] = []
    let maxAbsError: number | null = null
    let cpuSeconds = 0
    let mainThreadCpuSeconds = 0
    for (let round = 0; round < env.warmup + env.rounds; round++) {
      const measured = round >= env.warmup
      await peer.prepare?.(round)
      await post(env.coord, '/barrier', { name: `round-${round}` })
      const cpuBefore = cpuSecondsNow()
      const mainBefore = mainThreadCpuSecondsNow()
      const started = performance.now()
      const info = await peer.allReduce(round)
      const elapsed = performance.now() - started
      const cpuUsed = cpuSecondsNow() - cpuBefore
      const mainUsed = mainThreadCpuSecondsNow() - mainBefore
      // The check and the next round's fill wait until every peer's round is over: started while
      // slower peers still average, they took the shared cores from the round being timed.
      await post(env.coord, '/barrier', { name: `round-${round}-end` })
      if (measured) {
        roundsMs.push(elapsed)
        cpuSeconds += cpuUsed
        mainThreadCpuSeconds += mainUsed
        if (info?.matchmakingMs != null) matchmakingMs.push(info.matchmakingMs)
        if (peer.check != null) maxAbsError = Math.max(maxAbsError ?? 0, peer.check())
      }
    }
    await post(env.coord, '/barrier', { name: 'done' })
    const result: PeerResult = {
      rank: env.rank,
      roundsMs,
      ...(matchmakingMs.length > 0 ? { matchmakingMs } : {}),
      cpuSeconds,
      mainThreadCpuSeconds,
      peakRssBytes: process.resourceUsage().maxRSS * 1024,
      maxAbsError,
      ...(peer.note?.() != null ? { note: peer.note() } : {})
    }
    await post(env.coord, '/result', result)
    await peer.close()
    process.exit(0)
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err)
    process.stderr.write(`peer ${env?.rank ?? '?'}: ${message}\n`)
    if (env != null) await post(env.coord, '/error', { rank: env.rank, message }).catch(() => {})
    process.exit(1)
  }
}
