/**
 * Per-flow TCP progress on the shaped links: every interval, `ss -tinH -N <namespace>` for each peer's
 * namespace, so a round's bytes can be followed flow by flow (which sender→receiver pair moved what,
 * when it started and ended, where it stalled). It tells a slow TCP flow from a late sender, which a
 * peer's own log cannot. ss runs once per namespace per tick (~3 ms of CPU each): keep the interval at
 * 100 ms or more on a 2-core machine.
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'

const exec = promisify(execFile)

/** One socket at one instant, as its own namespace's ss saw it. */
export interface FlowSample {
  /** ms since the sampler started. */
  readonly t: number
  readonly local: string
  readonly remote: string
  /** Bytes this socket sent that the other end acknowledged, and bytes it received. */
  readonly acked: number
  readonly received: number
  readonly cwnd?: number
  readonly rttMs?: number
}

/** Parses `ss -tinH` output: a socket line, then its indented info line. */
export function parseSs (text: string, t: number): FlowSample[] {
  const out: FlowSample[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const head = /^\S+\s+\d+\s+\d+\s+(\S+)\s+(\S+)/.exec(lines[i])
    if (head === null) continue
    const info = lines[i + 1] ?? ''
    if (!/^\s/.test(info)) continue
    i++
    const num = (re: RegExp): number | undefined => { const m = re.exec(info); return m === null ? undefined : Number(m[1]) }
    out.push({
      t,
      local: head[1],
      remote: head[2],
      acked: num(/bytes_acked:(\d+)/) ?? 0,
      received: num(/bytes_received:(\d+)/) ?? 0,
      cwnd: num(/cwnd:(\d+)/),
      rttMs: num(/\brtt:([\d.]+)/)
    })
  }
  return out
}

export interface FlowSampler {
  /** ms since the sampler started (marks taken by the caller line up with the samples). */
  now: () => number
  stop: () => Promise<FlowSample[][]>
}

/** Samples every namespace each intervalMs until stop(); returns the samples per namespace. */
export function startFlowSampler (namespaces: readonly string[], intervalMs: number): FlowSampler {
  const started = performance.now()
  const now = (): number => performance.now() - started
  const samples: FlowSample[][] = namespaces.map(() => [])
  let stopped = false
  const loop = (async () => {
    while (!stopped) {
      const tick = now()
      await Promise.all(namespaces.map(async (ns, i) => {
        try {
          const { stdout } = await exec('ss', ['-tinH', '-N', ns])
          samples[i].push(...parseSs(stdout, tick))
        } catch { /* the namespace is being torn down */ }
      }))
      const wait = intervalMs - (now() - tick)
      if (wait > 0) await new Promise(resolve => setTimeout(resolve, wait))
    }
  })()
  return {
    now,
    async stop () {
      stopped = true
      await loop
      return samples
    }
  }
}

export interface FlowRow {
  readonly from: number
  readonly to: number
  /** Bytes from `from` to `to` acknowledged within the window, over all their sockets. */
  readonly bytes: number
  /** ms after the window's start: the first sample that showed progress, and when half and 99 % were in. */
  readonly firstMs: number
  readonly halfMs: number
  readonly mostMs: number
  /** The longest run of samples without progress before 99 % were in. */
  readonly longestStallMs: number
  /** Cumulative bytes at each sample inside the window (ms after its start). */
  readonly series: ReadonlyArray<{ readonly t: number, readonly bytes: number }>
}

/**
 * Directed pairs' progress within [fromMs, toMs): from each sender's own sockets (bytes_acked), summed
 * over the sockets between the pair (libp2p and data channels alike). addrs: each rank's address.
 * Each socket counts from its own last sample before the window (from zero if it opened inside it) and
 * keeps its last count once it closes: a pair whose libp2p connection is replaced (a simultaneous dial's
 * duplicate pruned) shows the new socket's bytes, not a drop in the pair's sum.
 */
export function flowRows (samples: readonly FlowSample[][], addrs: readonly string[], fromMs: number, toMs: number): FlowRow[] {
  const rankOf = (endpoint: string): number => addrs.indexOf(endpoint.replace(/:\d+$/, ''))
  const rows: FlowRow[] = []
  samples.forEach((own, from) => {
    for (let to = 0; to < addrs.length; to++) {
      if (to === from) continue
      const mine = own.filter(s => rankOf(s.remote) === to)
      const sockets = new Map<string, { base: number, high: number }>()
      for (const s of mine) {
        if (s.t >= fromMs) continue
        sockets.set(`${s.local} ${s.remote}`, { base: s.acked, high: s.acked })
      }
      const times = [...new Set(mine.filter(s => s.t >= fromMs && s.t < toMs).map(s => s.t))].sort((a, b) => a - b)
      if (times.length === 0) continue
      const byTime = new Map<number, FlowSample[]>()
      for (const s of mine) if (s.t >= fromMs && s.t < toMs) byTime.set(s.t, [...(byTime.get(s.t) ?? []), s])
      const series = times.map(t => {
        for (const s of byTime.get(t) ?? []) {
          const key = `${s.local} ${s.remote}`
          const socket = sockets.get(key) ?? { base: 0, high: 0 }
          socket.high = Math.max(socket.high, s.acked)
          sockets.set(key, socket)
        }
        let bytes = 0
        for (const socket of sockets.values()) bytes += socket.high - socket.base
        return { t: t - fromMs, bytes }
      })
      const total = series[series.length - 1].bytes
      if (total === 0) continue
      const at = (share: number): number => series.find(p => p.bytes >= share * total)?.t ?? NaN
      const mostMs = at(0.99)
      let longest = 0; let since = NaN; let last = 0
      for (const p of series) {
        if (p.t > mostMs) break
        if (p.bytes > last) { if (!Number.isNaN(since)) longest = Math.max(longest, p.t - since); since = p.t; last = p.bytes }
      }
      rows.push({ from, to, bytes: total, firstMs: series.find(p => p.bytes > 0)?.t ?? NaN, halfMs: at(0.5), mostMs, longestStallMs: longest, series })
    }
  })
  return rows
}

/** Mbit/s in each whole second of the window, of the bytes in the given rows' series summed. */
function perSecond (rows: readonly FlowRow[], seconds: number): number[] {
  return Array.from({ length: seconds }, (_, k) => {
    let bytes = 0
    for (const r of rows) {
      const upTo = (ms: number): number => r.series.filter(p => p.t <= ms).at(-1)?.bytes ?? 0
      bytes += upTo((k + 1) * 1000) - upTo(k * 1000)
    }
    return bytes * 8 / 1e6
  })
}

/**
 * One window's tables: each rank's uplink and downlink in Mbit/s per second (what its link carried,
 * from the senders' acknowledged bytes), then every directed pair, the slowest to reach 99 % first.
 */
export function flowTable (title: string, rows: readonly FlowRow[], ranks: number, windowMs: number): string {
  const seconds = Math.ceil(windowMs / 1000)
  const lines = [title, '', '| rank | MB sent | uplink Mbit/s, second by second | MB received | downlink Mbit/s, second by second |', '|---:|---:|---|---:|---|']
  for (let r = 0; r < ranks; r++) {
    const up = rows.filter(x => x.from === r); const down = rows.filter(x => x.to === r)
    const mb = (xs: readonly FlowRow[]): string => (xs.reduce((s, x) => s + x.bytes, 0) / 1e6).toFixed(1)
    const fmt = (xs: number[]): string => xs.map(v => v.toFixed(0)).join(' ')
    lines.push(`| ${r} | ${mb(up)} | ${fmt(perSecond(up, seconds))} | ${mb(down)} | ${fmt(perSecond(down, seconds))} |`)
  }
  lines.push('', '| from → to | MB | first progress s | half in s | 99 % in s | longest stall before 99 % s |', '|---|---:|---:|---:|---:|---:|')
  for (const r of [...rows].sort((a, b) => b.mostMs - a.mostMs)) {
    lines.push(`| ${r.from} → ${r.to} | ${(r.bytes / 1e6).toFixed(1)} | ${(r.firstMs / 1000).toFixed(2)} | ${(r.halfMs / 1000).toFixed(2)} | ${(r.mostMs / 1000).toFixed(2)} | ${(r.longestStallMs / 1000).toFixed(2)} |`)
  }
  return lines.join('\n')
}
