/**
 * TCP's own goodput through exactly the shaping bench:links uses (bench/lib/shaped-links.ts): what
 * TCP itself reaches on those links, so the "÷ best floor" ratios of the links tables can be read
 * against it. Per rate: one flow (peer 1 → peer 0) and three flows into one peer at once (peers
 * 1, 2, 3 → peer 0, the all-to-all's incast). Root needed.
 * npm run bench:tbf-goodput -- --help
 */
import { loadavg } from 'node:os'
import { Command } from 'commander'
import { shapedLinksUnsupported, type ShapedLinks } from './lib/shaped-links.js'
import { INCAST, ONE_FLOW, goodputTable, measureRate, type GoodputResult } from './lib/tcp-goodput.js'

const load = (): string => loadavg().map(l => l.toFixed(1)).join(' ')

async function main (): Promise<void> {
  const o = new Command()
    .name('bench:tbf-goodput')
    .description('TCP goodput through the tbf-shaped links of bench:links: one flow, and three flows into one peer (root needed).')
    .option('--rates <list>', 'line rates in Mbit/s, comma-separated', '100,1000')
    .option('--mbytes <n>', 'payload MB per case, all flows together (default: 5 s at line rate, i.e. rate ÷ 8 × 5)')
    .parse().opts<{ rates: string, mbytes?: string }>()

  const rates = o.rates.split(',').map(s => Number(s.trim())).filter(r => r > 0)
  if (rates.length === 0 || rates.some(r => !Number.isFinite(r))) throw new Error(`--rates takes Mbit/s numbers, got "${o.rates}"`)
  const mbytes = o.mbytes === undefined ? undefined : Number(o.mbytes)
  if (mbytes !== undefined && !(mbytes > 0)) throw new Error(`--mbytes takes a positive number, got "${o.mbytes}"`)

  const unsupported = await shapedLinksUnsupported()
  if (unsupported !== undefined) {
    process.stderr.write(`bench:tbf-goodput cannot run here: ${unsupported}.\n`)
    process.exit(2)
  }
  let current: ShapedLinks | undefined
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      process.stderr.write(`bench:tbf-goodput: ${signal}, tearing down the namespaces\n`)
      void (current?.destroy() ?? Promise.resolve()).finally(() => process.exit(130))
    })
  }
  const started = Date.now()
  const loadBefore = load()
  const uptimeBefore = loadavg().map(l => l.toFixed(2)).join(', ')
  const rows: GoodputResult[] = []
  const tag = `tg${process.pid % 10000}`
  for (const mbit of rates) {
    const totalBytes = Math.round((mbytes ?? mbit / 8 * 5) * 1e6)
    process.stderr.write(`[tbf-goodput] ${mbit} Mbit/s: ${(totalBytes / 1e6).toFixed(1)} MB per case\n`)
    rows.push(...await measureRate({ tag, mbit, cases: [ONE_FLOW, INCAST], totalBytes, onLinks: (l) => { current = l } }))
  }
  const seconds = ((Date.now() - started) / 1000).toFixed(0)
  const args = [`--rates ${rates.join(',')}`, ...(mbytes !== undefined ? [`--mbytes ${mbytes}`] : [])].join(' ')
  process.stdout.write([
    '',
    `Peers in network namespaces on a bridge, each veth shaped by tbf on both ends (bench/lib/shaped-links.ts, as bench:links); ${seconds} s wall; load average ${loadBefore} before, ${load()} after (1/5/15 min) (\`uptime\` at the start: ${uptimeBefore}).`,
    'Goodput = payload bits/s at the receiver from its first byte to its last (the first chunk not counted); ratio = goodput ÷ the receiver\'s line rate; payload ÷ tbf bytes = what the receiver got ÷ what tbf let into its link (headers: 1448/1514 = 0.956 with timestamps at MTU 1500).',
    '',
    goodputTable(rows),
    '',
    `Reproduce: \`npm run bench:tbf-goodput -- ${args}\``,
    ''
  ].join('\n'))
}

await main().catch((err: Error) => { process.stderr.write(`bench:tbf-goodput: ${err.message}\n`); process.exit(1) })
