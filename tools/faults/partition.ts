#!/usr/bin/env node
// The network partition: `npm run partition` (root, iproute2). Two halves of a real swarm
// in two network namespaces are cut apart, keep averaging on their own, then merge after healing.
import { resolve } from 'node:path'
import { cpus, loadavg } from 'node:os'
import { Command } from 'commander'
import { runPartition, type PartitionResult } from './partition-run.js'
import { partitionUnsupported } from './two-halves.js'
import { formatTable, ms, sci } from './table.js'

function partitionReport (r: PartitionResult, command: string, load: string): string {
  const table = formatTable(
    ['phase', 'half', 'attempted', 'averaged', 'mean group', 'cross-half groups', 'max step'],
    r.phases.map(p => [p.phase, p.half === 0 ? 'A' : 'B', String(p.attempted), String(p.averaged), Number.isFinite(p.meanGroupSize) ? p.meanGroupSize.toFixed(1) : '-', String(p.crossHalf), ms(p.maxStepMs)]))
  return [
    table, '',
    `cut for:                               ${ms(r.partitionMs)}`,
    `gap between the halves' means:         at the cut ${sci(r.gapAtCut)}, at the heal ${sci(r.gapAtHeal)}, at the end ${sci(r.gapAtEnd)}`,
    `spread within each half at the heal:   A ${sci(r.spreadWithinAtHeal[0])}, B ${sci(r.spreadWithinAtHeal[1])}; whole swarm at the end ${sci(r.spreadAtEnd)}`,
    `first group spanning both halves:      ${ms(r.firstCrossGroupMs)} after healing`,
    `gap back to its level at the cut:      ${r.mergeMs === undefined ? 'not within the run' : `${ms(r.mergeMs)} after healing`}`,
    `NaN or infinite values returned:       ${r.nonFinite}`,
    `run time:                              ${ms(r.wallMs)}`,
    `violations:                            ${r.violations.length === 0 ? 'none' : ''}`,
    ...r.violations.map(v => `  - ${v}`),
    `machine load (1-min average, start/end): ${load}`,
    `command: ${command}`
  ].join('\n')
}

async function main (): Promise<void> {
  const program = new Command()
    .name('partition')
    .description('Split a real local swarm into two network namespaces, cut the link between them, heal it; report averaging and merging.')
    .option('--per-half <n>', 'agents in each half', '4')
    .option('--bootstrap <n>', 'bootstrap agents (alternating halves)', '2')
    .option('--warm <n>', 'averaged steps per agent before the cut', '3')
    .option('--cut <n>', 'steps per agent during the cut', '6')
    .option('--heal <n>', 'steps per agent after healing', '8')
    .option('--elements <n>', 'float32 values per agent', '16384')
    .option('--period <ms>', 'trainer time between steps', '1500')
    .option('--drift <x>', 'added per step during the cut, + in half A, - in half B', '0.05')
    .option('--allreduce-timeout <s>', 'the swarm\'s allreduceTimeout', '10')
    .option('--out <dir>', 'agent logs', 'runs')
    .parse()
  const o = program.opts<Record<string, string>>()
  const why = await partitionUnsupported()
  if (why !== undefined) throw new Error(`cannot make a network partition here: ${why}`)
  const loadAtStart = loadavg()[0]
  const result = await runPartition({
    perHalf: Number(o.perHalf), bootstrap: Number(o.bootstrap), warmSteps: Number(o.warm), partitionSteps: Number(o.cut), healSteps: Number(o.heal),
    elements: Number(o.elements), periodMs: Number(o.period), drift: Number(o.drift),
    timing: { targetGroupSize: 4, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1, allreduceTimeout: Number(o.allreduceTimeout) },
    subnet: 1 + (process.pid % 200), outDir: resolve(o.out, `partition-${new Date().toISOString().replace(/[:.]/g, '-')}`), log: (l) => { console.log(l) }
  })
  console.log('\n' + partitionReport(result, `npm run partition -- ${process.argv.slice(2).join(' ')}`.trim(), `${loadAtStart.toFixed(1)} / ${loadavg()[0].toFixed(1)} on ${cpus().length} cores`))
  if (result.violations.length > 0) process.exitCode = 1
}

main().catch((err: unknown) => { process.stderr.write(`partition: ${(err as Error).message}\n`); process.exitCode = 1 })
