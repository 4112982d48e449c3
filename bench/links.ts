/**
 * Shaped links (real-world bandwidths): the all-reduce benchmark with every peer in a network namespace of its
 * own, its link shaped by tc tbf in both directions (bench/lib/shaped-links.ts), built and torn
 * down by this script. Rows: profile × implementation × codec; each reports the median round of
 * the slowest peer against the floor (the busiest link's bytes at line rate), and CPU per GB moved.
 * npm run bench:links -- --help
 */
import { readFileSync } from 'node:fs'
import { loadavg } from 'node:os'
import { Command } from 'commander'
import { formatElements, parseElements } from './lib/report.js'
import { shapedLinksUnsupported, type ShapedLinks } from './lib/shaped-links.js'
import { profileRates } from './lib/links-math.js'
import { linksTable, type LinksRow } from './lib/links-report.js'
import { codecsOf, runLinksRow, type RateChange } from './lib/links-run.js'

function parseChanges (text: string | undefined): RateChange[] {
  if (text === undefined) return []
  return text.split(',').map((c) => {
    const [r, p, m] = c.split(':').map(Number)
    if (![r, p, m].every(Number.isFinite)) throw new Error(`--change takes ROUND:PEER:MBIT[,...], got "${c}"`)
    return { beforeRound: r, peer: p, mbit: m }
  })
}

/**
 * Which TCP congestion control the peers' namespaces ran: a new namespace takes the host's default, and
 * it matters through tbf (bbr against cubic moves the 100 Mbit/s round by ~5 %).
 */
function tcpCongestionControl (sysctls: readonly string[]): string {
  const set = sysctls.map(s => /^net\.ipv4\.tcp_congestion_control=(\S+)$/.exec(s)?.[1]).find(v => v !== undefined)
  if (set !== undefined) return `TCP congestion control ${set} (set)`
  try {
    return `TCP congestion control ${readFileSync('/proc/sys/net/ipv4/tcp_congestion_control', 'utf8').trim()} (the host's default)`
  } catch {
    return 'TCP congestion control unknown'
  }
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
    .option('--sysctl <list>', 'KEY=VALUE,...: set in every peer\'s namespace (e.g. net.ipv4.tcp_notsent_lowat=131072)')
    .option('--flows <ms>', 'sample every flow\'s TCP progress (ss) this often: per-round tables and samples next to the logs')
    .option('--timeout <s>', 'seconds one row may take', '900')
    .option('--logs <dir>', 'peer logs', 'bench/results/logs/links')
    .parse().opts<{ profiles: string, impl: string, compression: string, elements: string, rounds: string, warmup: string, change?: string, sysctl?: string, flows?: string, timeout: string, logs: string }>()

  const unsupported = await shapedLinksUnsupported()
  if (unsupported !== undefined) {
    process.stderr.write(`bench:links cannot run here: ${unsupported}.\n`)
    process.exit(2)
  }
  const flowsEveryMs = o.flows !== undefined ? Number(o.flows) : undefined
  if (flowsEveryMs !== undefined && !(flowsEveryMs >= 50)) throw new Error(`--flows takes a sampling interval of at least 50 ms, got "${o.flows ?? ''}"`)
  const elements = parseElements(o.elements)
  const rounds = Number(o.rounds); const warmup = Number(o.warmup)
  const changes = parseChanges(o.change)
  const rows: LinksRow[] = []
  const started = Date.now()
  const loadBefore = loadavg().map(l => l.toFixed(1)).join(' ')
  let current: ShapedLinks | undefined
  // Ctrl-C or a kill: take the namespaces and bridge down before leaving.
  let interrupted = false
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      interrupted = true
      process.stderr.write(`bench:links: ${signal}, tearing down the namespaces\n`)
      void (current?.destroy() ?? Promise.resolve()).finally(() => process.exit(130))
    })
  }
  const tag = `lk${process.pid % 10000}`
  for (const profile of o.profiles.split(';').map(s => s.trim()).filter(Boolean)) {
    const rates = profileRates(profile)
    for (const impl of o.impl.split(',').map(s => s.trim()).filter(Boolean)) {
      for (const codec of codecsOf(impl, o.compression.split(',').map(s => s.trim()))) {
        if (interrupted) break
        rows.push(await runLinksRow({ profile, rates, impl, codec, elements, rounds, warmup, changes, timeoutS: Number(o.timeout), logs: o.logs, tag, sysctls: o.sysctl?.split(',').map(s => s.trim()).filter(Boolean), flowsEveryMs, onLinks: (l) => { current = l } }))
      }
    }
  }
  // The row a signal cut short ends on its own; its table would mislead.
  if (interrupted) { await new Promise(() => {}) }
  const minutes = ((Date.now() - started) / 60000).toFixed(1)
  const sysctls = o.sysctl?.split(',').map(s => s.trim()).filter(Boolean) ?? []
  process.stdout.write(`\n${formatElements(elements)} float32 per peer, ${warmup} warm-up + ${rounds} measured rounds; ${minutes} min wall; load average ${loadBefore} before, ${loadavg().map(l => l.toFixed(1)).join(' ')} after (1/5/15 min); ${tcpCongestionControl(sysctls)}${sysctls.length > 0 ? `; sysctls ${sysctls.join(' ')}` : ''}${changes.length > 0 ? `; rate changes ${o.change ?? ''}` : ''}\n\n`)
  process.stdout.write(linksTable(rows) + '\n')
}

await main().catch((err: Error) => { process.stderr.write(`bench:links: ${err.message}\n`); process.exit(1) })
