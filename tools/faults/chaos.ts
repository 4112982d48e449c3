#!/usr/bin/env node
// The chaos run: `npm run chaos -- --agents 8 --rounds 30 --seed 1`. Real agent processes
// average while random agents are SIGKILLed (and restarted) or SIGSTOPped (and resumed) mid-round.
import { join, resolve } from 'node:path'
import { cpus, loadavg } from 'node:os'
import { Command } from 'commander'
import { FAULT_KINDS, runChaos, type ChaosOptions, type ChaosResult, type FaultKind } from './chaos-run.js'
import { formatTable, ms, sci } from './table.js'

function report (r: ChaosResult, command: string, load: string, baseline?: ChaosResult): string {
  const agents = formatTable(
    ['agent', 'role', 'processes', 'attempted', 'averaged', 'failed', 'mean group', 'max step', 'parts kept', 'NaN', 'state loads'],
    r.agents.map(a => [a.name, a.role, String(a.incarnations), String(a.attempted), String(a.averaged), String(a.failed),
      Number.isFinite(a.meanGroupSize) ? a.meanGroupSize.toFixed(1) : '-', ms(a.maxStepMs), String(a.partsKeptLocal), String(a.nonFinite), String(a.stateLoadLogLines)]))
  const kindName: Record<FaultKind, string> = { kill: 'SIGKILL+restart', term: 'SIGTERM+restart', stop: 'SIGSTOP/SIGCONT' }
  const hit = (f: ChaosResult['faults'][number]): string => f.peersHit === undefined || f.peersHit.steps === 0
    ? '-'
    : `${f.peersHit.steps}: ${f.peersHit.averagedWith} with, ${f.peersHit.averagedWithout} without, ${f.peersHit.failed} failed; ${ms(f.peersHit.maxWallMs)}`
  const faults = formatTable(
    ['fault', 'agent', 'at step', 'left in', 'down', 'recovered in', 'restart to averaged', 'state origin', 'bytes lost', 'group\'s steps under way: with/without it, failed; slowest'],
    r.faults.map(f => [kindName[f.kind], r.agents[f.agent].name, String(f.duringAttempt), ms(f.leaveMs), ms(f.downMs), ms(f.recoverMs), ms(f.rejoinMs),
      f.origin ?? '-', f.bytesLost === undefined ? '-' : String(f.bytesLost), hit(f)]))
  const first = r.spreadSeries[0]?.spread ?? NaN
  const last = r.spreadSeries.at(-1)?.spread ?? NaN
  const total = r.agents.reduce((n, a) => n + a.attempted, 0)
  const ok = r.agents.reduce((n, a) => n + a.averaged, 0)
  return [
    agents, '', faults, '',
    `rounds attempted/averaged (all agents): ${total}/${ok}`,
    `slowest step outside its own freeze:    ${ms(r.maxStepMs)} (bound: step timeout + all-reduce timeout = ${ms(r.stepBoundMs)})`,
    `spread between agents (max range):      ${sci(first)} -> ${sci(last)}, rose ${r.spreadRises} times in ${r.spreadSeries.length} samples`,
    `state per agent:                        ${r.stateBytes} bytes`,
    `run time:                               ${ms(r.wallMs)}`,
    `averaged steps per minute (all agents): ${r.averagedPerMinute.toFixed(1)} over ${ms(r.throughputWindowMs)}${r.faults.length > 0 ? ' of the fault schedule' : ''}${baseline === undefined ? '' : ` against ${baseline.averagedPerMinute.toFixed(1)} without faults in the same run: ${(100 * r.averagedPerMinute / baseline.averagedPerMinute).toFixed(1)} %`}`,
    ...stallLines(r, baseline),
    `violations:                             ${r.violations.length === 0 ? 'none' : ''}`,
    ...r.violations.map(v => `  - ${v}`),
    `machine load (1-min average, start/end): ${load}`,
    `command: ${command}`
  ].join('\n')
}

/**
 * The times the harness stood still (the whole machine, e.g. a VM paused for a snapshot, or the harness
 * hosting every trainer), and the throughput over the rest of the window, against a baseline's rest too.
 */
function stallLines (r: ChaosResult, baseline?: ChaosResult): string[] {
  const list = (x: ChaosResult): string => x.stalls.length === 0
    ? 'none'
    : `${x.stalls.length}, ${ms(x.stalls.reduce((n, s) => n + s.ms, 0))} in all (${x.stalls.slice(0, 5).map(s => `${ms(s.ms)} at ${ms(s.at)}`).join(', ')}${x.stalls.length > 5 ? ', ...' : ''})`
  const lines = [`harness stood still (≥ 1 s late):       ${list(r)}${baseline === undefined ? '' : `; without faults: ${list(baseline)}`}`]
  const rest = (x: ChaosResult): number => x.averagedPerMinute * x.throughputWindowMs / (x.throughputWindowMs - x.stalledInWindowMs)
  if (r.stalledInWindowMs > 0 || (baseline !== undefined && baseline.stalledInWindowMs > 0)) {
    lines.push(`  averaged steps per minute while it ran: ${rest(r).toFixed(1)}${baseline === undefined ? '' : ` against ${rest(baseline).toFixed(1)} without faults: ${(100 * rest(r) / rest(baseline)).toFixed(1)} %`}`)
  }
  return lines
}

/** The command line and its defaults. */
function commandLine (): Command {
  return new Command()
    .name('chaos')
    .description('Kill and freeze random agents of a real local swarm mid-round; report rounds, recovery and divergence.')
    .option('--agents <n>', 'agent processes', '8')
    .option('--bootstrap <n>', 'of which bootstrap agents', '2')
    .option('--rounds <n>', 'steps each agent attempts', '30')
    .option('--seed <s>', 'seed of the faults and the initial values', '1')
    .option('--faults <list|n>', 'kill,stop,... in order, or a count of random ones', '6')
    .option('--elements <n>', 'float32 values per agent', '65536')
    .option('--period <ms>', 'trainer time between steps', '1500')
    .option('--fault-gap <ms>', 'mean pause between faults', '6000')
    .option('--fixed-cadence', 'a fault every --fault-gap ms on a fixed clock (the anchors\' one every 15 s), not a random gap after the previous one')
    .option('--overlap', 'trainers train while their step runs (ParameterAverager.step(wait=False)), so an iteration lasts the longer of the two')
    .option('--baseline', 'first run the same swarm without faults, and report the throughput against it')
    .option('--freeze <ms>', 'SIGSTOP length', '5000')
    .option('--restart-delay <ms>', 'time a killed agent stays down', '1000')
    .option('--allreduce-timeout <s>', 'the swarm\'s allreduceTimeout', '10')
    .option('--slack <ms>', 'allowance over each step\'s bound for HTTP and JSON on a loaded machine', '2000')
    .option('--out <dir>', 'agent logs', 'runs')
    .option('--grace <s>', 'seconds from SIGTERM to SIGKILL in a term fault: the swarm\'s terminationGracePeriodSeconds, which the agents hear of (a round still running near the kill hands its span off)')
    .option('--unbundled', 'run the agents from dist/agent/main.js as tsc leaves it (~970 modules), not dist/agent-bundle/main.js, the one file the agent image runs (the default)')
    .option('--log-level <level>', 'the agents\' log level (debug: matchmaking\'s and the all-reduce\'s decisions, to tell what a slow step waited for)', 'info')
}

async function main (): Promise<void> {
  const o = commandLine().parse().opts<Record<string, string>>()
  const faults: FaultKind[] | number = /^\d+$/.test(o.faults) ? Number(o.faults) : o.faults.split(',').map(f => {
    if (!(FAULT_KINDS as readonly string[]).includes(f)) throw new Error(`--faults takes ${FAULT_KINDS.join(', ')}, not "${f}"`)
    return f as FaultKind
  })
  const outDir = resolve(o.out, `chaos-${new Date().toISOString().replace(/[:.]/g, '-')}`)
  const loadAtStart = loadavg()[0]
  const options: ChaosOptions = {
    agents: Number(o.agents), bootstrap: Number(o.bootstrap), rounds: Number(o.rounds), seed: o.seed, elements: Number(o.elements),
    periodMs: Number(o.period), faults, warmupLimitMs: 120_000, faultGapMs: Number(o.faultGap), fixedCadence: o.fixedCadence !== undefined, overlap: o.overlap !== undefined,
    freezeMs: Number(o.freeze), restartDelayMs: Number(o.restartDelay),
    timing: { targetGroupSize: 4, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1, allreduceTimeout: Number(o.allreduceTimeout) },
    subnet: 1 + (process.pid % 200), slackMs: Number(o.slack), outDir, logLevel: o.logLevel, unbundled: o.unbundled !== undefined,
    ...(o.grace !== undefined ? { graceSeconds: Number(o.grace) } : {}), log: (l) => { console.log(l) }
  }
  let baseline: ChaosResult | undefined
  if (o.baseline !== undefined) {
    console.log('baseline: the same swarm and rounds without faults')
    baseline = await runChaos({ ...options, faults: [], outDir: join(outDir, 'baseline') })
    console.log(`baseline: ${baseline.averagedPerMinute.toFixed(1)} averaged steps per minute, ${ms(baseline.wallMs)}`)
  }
  const result = await runChaos(options)
  console.log('\n' + report(result, `npm run chaos -- ${process.argv.slice(2).join(' ')}`.trim(), `${loadAtStart.toFixed(1)} / ${loadavg()[0].toFixed(1)} on ${cpus().length} cores`, baseline))
  console.log(`\nagent logs: ${join(outDir)}`)
  if (result.violations.length > 0) process.exitCode = 1
}

main().catch((err: unknown) => { process.stderr.write(`chaos: ${(err as Error).message}\n`); process.exitCode = 1 })
