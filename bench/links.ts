/**
 * Shaped links (issue 20): the all-reduce benchmark with every peer in a network namespace of its
 * own, its link shaped by tc tbf in both directions (bench/lib/shaped-links.ts), built and torn
 * down by this script. Rows: profile × implementation × codec; each reports the median round of
 * the slowest peer against the floor (the busiest link's bytes at line rate), and CPU per GB moved.
 * npm run bench:links -- --help
 */
import { mkdirSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { Command } from 'commander'
import { implNamed, type ImplSpec } from './lib/impls.js'
import { ROOT, progress, runImpl, type Placement } from './lib/run-impl.js'
import { formatElements, parseElements, statsOf, type RunOutcome } from './lib/report.js'
import { createShapedLinks, shapedLinksUnsupported, type ShapedLinks } from './lib/shaped-links.js'
import { bestSplitFloor, bytesPerElement, equalSplitFloor, profileRates } from './lib/links-math.js'
import { linksTable, type LinksRow } from './lib/links-report.js'

/** `ours-declared`: bandwidth set by hand to the true rates; `ours-equal`: the same for all (spans equal); `ours`: measured. */
function specFor (name: string): ImplSpec {
  if (name === 'ours-declared' || name === 'ours-equal') return { ...implNamed('ours'), name }
  return implNamed(name)
}

/** Codecs an implementation can run: gloo and the TCP pattern move float32 only; auto is ours alone. */
function codecsOf (impl: string, asked: readonly string[]): string[] {
  if (impl === 'gloo' || impl === 'tcp') return ['none']
  if (impl === 'hivemind') return asked.filter(c => c !== 'auto')
  return [...asked]
}

interface RateChange { beforeRound: number, peer: number, mbit: number }

function parseChanges (text: string | undefined): RateChange[] {
  if (text === undefined) return []
  return text.split(',').map((c) => {
    const [r, p, m] = c.split(':').map(Number)
    if (![r, p, m].every(Number.isFinite)) throw new Error(`--change takes ROUND:PEER:MBIT[,...], got "${c}"`)
    return { beforeRound: r, peer: p, mbit: m }
  })
}

async function main (): Promise<void> {
  const o = new Command()
    .name('bench:links')
    .description('All-reduce over shaped links: one network namespace per peer on a bridge, tbf both ways (root needed).')
    .option('--profiles <list>', 'semicolon-separated: 100m, 1g, mixed (2×1G + 2×100M), 8x100m, or rates "1000,100,100"', '100m;1g;mixed;8x100m')
    .option('--impl <list>', 'tcp, ours, ours-declared, ours-equal, hivemind, gloo', 'tcp,ours,hivemind,gloo')
    .option('--compression <list>', 'codecs for ours (none, float16, auto) and hivemind (none, float16)', 'none,float16,auto')
    .option('--elements <n>', 'float32 elements per peer', '25M')
    .option('--rounds <n>', 'measured rounds', '3')
    .option('--warmup <n>', 'warm-up rounds', '1')
    .option('--change <list>', 'ROUND:PEER:MBIT,...: before round ROUND (0-based, warm-up included) set PEER\'s link to MBIT both ways')
    .option('--timeout <s>', 'seconds one row may take', '900')
    .option('--logs <dir>', 'peer logs', 'bench/results/logs/links')
    .parse().opts<{ profiles: string, impl: string, compression: string, elements: string, rounds: string, warmup: string, change?: string, timeout: string, logs: string }>()

  const unsupported = await shapedLinksUnsupported()
  if (unsupported !== undefined) {
    process.stderr.write(`bench:links cannot run here: ${unsupported}.\n`)
    process.exit(2)
  }
  const elements = parseElements(o.elements)
  const rounds = Number(o.rounds); const warmup = Number(o.warmup)
  const changes = parseChanges(o.change)
  const rows: LinksRow[] = []
  const started = Date.now()
  let current: ShapedLinks | undefined
  // Ctrl-C or a kill: take the namespaces and bridge down before leaving.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => { void (current?.destroy() ?? Promise.resolve()).finally(() => process.exit(130)) })
  }
  const tag = `lk${process.pid % 10000}`
  for (const profile of o.profiles.split(';').map(s => s.trim()).filter(Boolean)) {
    const rates = profileRates(profile)
    for (const impl of o.impl.split(',').map(s => s.trim()).filter(Boolean)) {
      for (const codec of codecsOf(impl, o.compression.split(',').map(s => s.trim()))) {
        // Fresh namespaces per row: a rate changed mid-run or a stuck peer never leaks into the next row.
        const links = current = await createShapedLinks(tag, 1 + (process.pid % 200), rates)
        const logDir = resolve(ROOT, o.logs, `${profile.replace(/,/g, '-')}-${impl}-${codec}`)
        mkdirSync(logDir, { recursive: true })
        let before: Array<{ sent: number, received: number }> = []
        let moved: Array<{ sent: number, received: number }> = []
        const placement: Placement = {
          coordHost: links.gateway,
          wireMeter: false,
          wrap: (rank) => ['ip', 'netns', 'exec', links.namespaces[rank]],
          env: (rank) => ({
            BENCH_HOST: links.addrs[rank],
            ...(impl === 'ours-declared' ? { BENCH_BANDWIDTH: String(rates[rank] * 1e6 / 8) } : {}),
            ...(impl === 'ours-equal' ? { BENCH_BANDWIDTH: '1' } : {})
          }),
          async onBarrier (name) {
            const round = /^round-(\d+)$/.exec(name)
            if (round != null) {
              for (const c of changes.filter(c => c.beforeRound === Number(round[1]))) {
                await links.setRate(c.peer, c.mbit)
                progress(`${profile} ${impl}: peer ${c.peer}'s link set to ${c.mbit} Mbit/s before round ${c.beforeRound}`)
              }
            }
            if (name === `round-${warmup}`) before = await links.counters()
            if (name === 'done') moved = (await links.counters()).map((c, i) => ({ sent: c.sent - before[i].sent, received: c.received - before[i].received }))
          }
        }
        let outcome: RunOutcome
        try {
          outcome = await runImpl(specFor(impl), rates.length, rates.length, elements, {
            rounds, warmup, partBytes: 65536, compression: codec, timeoutS: Number(o.timeout), logDir, placement
          })
        } finally {
          await links.destroy()
          current = undefined
        }
        const bytes = elements * bytesPerElement(codec)
        rows.push({
          profile, rates, impl, codec, outcome, stats: statsOf(outcome),
          floorEqualS: equalSplitFloor(bytes, rates),
          floorBestS: bestSplitFloor(bytes, rates),
          movedBytesPerRoundPerPeer: moved.length > 0 ? moved.reduce((s, m) => s + m.sent + m.received, 0) / moved.length / rounds : null
        })
      }
    }
  }
  const minutes = ((Date.now() - started) / 60000).toFixed(1)
  process.stdout.write(`\n${formatElements(elements)} float32 per peer, ${warmup} warm-up + ${rounds} measured rounds; ${minutes} min wall${changes.length > 0 ? `; rate changes ${o.change ?? ''}` : ''}\n\n`)
  process.stdout.write(linksTable(rows) + '\n')
}

await main().catch((err: Error) => { process.stderr.write(`bench:links: ${err.message}\n`); process.exit(1) })
