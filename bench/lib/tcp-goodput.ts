/**
 * TCP's own goodput through the shaped links of bench:links (bench/lib/shaped-links.ts, same tbf
 * settings): bench/lib/tcp-blast.ts as sender and receiver, each in a peer's network namespace.
 * Cases: one flow (peer 1 → peer 0), and three flows into one peer at once (peers 1, 2, 3 → peer 0:
 * the all-to-all's incast). Goodput = payload bits per second at the receiver, from its first byte
 * to its last; ratio = goodput ÷ the receiver's line rate.
 */
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { createShapedLinks, type ShapedLinks } from './shaped-links.js'

const BLAST = fileURLToPath(new URL('./tcp-blast.js', import.meta.url))

export interface GoodputCase {
  readonly name: string
  readonly senders: readonly number[]
  readonly receiver: number
}

export const ONE_FLOW: GoodputCase = { name: 'one flow (1 → 0)', senders: [1], receiver: 0 }
export const INCAST: GoodputCase = { name: 'three flows into one (1,2,3 → 0)', senders: [1, 2, 3], receiver: 0 }

export interface GoodputResult {
  readonly mbit: number
  readonly case: string
  /** Payload bytes the receiver got, over all flows. */
  readonly bytes: number
  /** First byte to last byte at the receiver. */
  readonly seconds: number
  /** Payload bits per second at the receiver (the first chunk, which arrived at t = 0, not counted), in Mbit/s. */
  readonly goodputMbit: number
  /** goodputMbit ÷ the receiver's line rate. */
  readonly ratio: number
  /** Bytes tbf passed into the receiver during the case (its link's outer end): payload + headers. */
  readonly wireBytes: number
}

interface Proc { exited: Promise<number | null>, nextLine: () => Promise<string> }

function startIn (ns: string, args: string[]): Proc {
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, BLAST, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  const lines: string[] = []
  const waiters: Array<(line: string) => void> = []
  let buffered = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (text: string) => {
    buffered += text
    let nl: number
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl)
      buffered = buffered.slice(nl + 1)
      const waiter = waiters.shift()
      if (waiter !== undefined) waiter(line); else lines.push(line)
    }
  })
  child.stderr.setEncoding('utf8').on('data', (text: string) => { stderr += text })
  const exited = new Promise<number | null>((resolve) => { child.on('close', (code) => resolve(code)) })
  const nextLine = async (): Promise<string> => {
    const line = lines.shift()
    if (line !== undefined) return line
    // Rejecting once resolved is a no-op: no stray rejection when the process exits later.
    return await new Promise<string>((resolve, reject) => {
      waiters.push(resolve)
      void exited.then((code) => { reject(new Error(`tcp-blast ${args[0]} in ${ns} exited (${String(code)}) without output: ${stderr.trim().slice(0, 300)}`)) })
    })
  }
  return { exited, nextLine }
}

async function withTimeout<T> (p: Promise<T>, seconds: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  try {
    return await Promise.race([p, new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`${what} took over ${seconds} s`)), seconds * 1000) })])
  } finally { clearTimeout(timer) }
}

/** One case on existing links: totalBytes split evenly over the senders, all started at once. */
export async function measureCase (links: ShapedLinks, mbit: number, c: GoodputCase, totalBytes: number, port = 5201): Promise<GoodputResult> {
  const perFlow = Math.floor(totalBytes / c.senders.length)
  const limitS = 30 + 3 * (perFlow * c.senders.length * 8) / (mbit * 1e6)
  const before = await links.counters()
  const sink = startIn(links.namespaces[c.receiver], ['sink', String(port), String(c.senders.length)])
  const run = async (): Promise<GoodputResult> => {
    const listening = JSON.parse(await sink.nextLine()) as { listening?: number }
    if (listening.listening !== port) throw new Error(`tcp-blast sink said ${JSON.stringify(listening)}`)
    const sources = c.senders.map(s => startIn(links.namespaces[s], ['source', links.addrs[c.receiver], String(port), String(perFlow)]))
    const got = JSON.parse(await sink.nextLine()) as { bytes: number, firstChunkBytes: number, seconds: number }
    for (const [k, s] of sources.entries()) {
      const code = await s.exited
      if (code !== 0) throw new Error(`tcp-blast source on peer ${c.senders[k]} exited ${String(code)}`)
    }
    if (got.bytes !== perFlow * c.senders.length) throw new Error(`the sink got ${got.bytes} bytes of ${perFlow * c.senders.length}`)
    const after = await links.counters()
    const goodputMbit = (got.bytes - got.firstChunkBytes) * 8 / got.seconds / 1e6
    return {
      mbit, case: c.name, bytes: got.bytes, seconds: got.seconds, goodputMbit, ratio: goodputMbit / mbit,
      wireBytes: after[c.receiver].received - before[c.receiver].received
    }
  }
  return await withTimeout(run(), limitS, `${c.name} at ${mbit} Mbit/s`)
}

export interface GoodputRateOptions {
  /** Interface and namespace prefix, ≤ 6 characters, unique among concurrent runs. */
  readonly tag: string
  readonly mbit: number
  readonly cases: readonly GoodputCase[]
  /** Payload bytes per case (over all its flows). */
  readonly totalBytes: number
  /** Told the links while they exist, so a signal handler can tear them down. */
  readonly onLinks?: (links: ShapedLinks | undefined) => void
}

/** Builds 4 peers' links at one rate (or as many as the cases need), runs the cases in turn, tears them down. */
export async function measureRate (o: GoodputRateOptions): Promise<GoodputResult[]> {
  const peers = 1 + Math.max(...o.cases.flatMap(c => [c.receiver, ...c.senders]))
  // 10.78.201-250: apart from bench:links' 10.78.1-200, so both can run at once.
  const links = await createShapedLinks(o.tag, 201 + (process.pid % 50), Array.from({ length: peers }, () => o.mbit))
  o.onLinks?.(links)
  try {
    const results: GoodputResult[] = []
    for (const c of o.cases) results.push(await measureCase(links, o.mbit, c, o.totalBytes))
    return results
  } finally {
    await links.destroy()
    o.onLinks?.(undefined)
  }
}

const f = (x: number, digits = 2): string => Number.isFinite(x) ? x.toFixed(digits) : '–'

export function goodputTable (rows: readonly GoodputResult[]): string {
  return [
    '| line rate (Mbit/s) | case | payload MB | seconds (first → last byte) | goodput Mbit/s | ÷ line rate | best round ÷ floor (1 / ratio) | payload ÷ tbf bytes |',
    '|---:|---|---:|---:|---:|---:|---:|---:|',
    ...rows.map(r => `| ${r.mbit} | ${r.case} | ${f(r.bytes / 1e6, 1)} | ${f(r.seconds)} | ${f(r.goodputMbit, 1)} | ${f(r.ratio, 3)} | ${f(1 / r.ratio, 3)} | ${r.wireBytes > 0 ? f(r.bytes / r.wireBytes, 3) : '–'} |`)
  ].join('\n')
}
