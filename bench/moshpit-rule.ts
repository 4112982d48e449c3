/**
 * The Moshpit grid rule alone (npm run bench:moshpit-rule -- --help): no agents, no network, the
 * agent's grouping and span rules with exact means (bench/lib/moshpit-rule.ts), under crashes, with
 * a failed reducer's span kept local (hivemind's rule, ours before span repair) and repaired by the
 * survivors (agent/allreduce/repair.ts), and random groups (the Moshpit paper's baseline). Medians of seeded simulations, rounds 1 to d + 2: what any
 * implementation of the rule can reach, the reference bench:moshpit-scale sets its agents beside.
 */
import { Command } from 'commander'
import { ruleMedians } from './lib/moshpit-rule.js'
import { defaultGroupSize, gridDimensions } from './lib/moshpit-math.js'
import { numberList } from './lib/cli.js'

function main (): void {
  const o = new Command()
    .name('bench:moshpit-rule')
    .description('The Moshpit grid rule alone: largest deviation / variance against the live mean per round, span kept local against span repaired.')
    .option('--peers <list>', 'swarm sizes', '64,256,1024')
    .option('--crash <percent>', 'percent of live peers crashing per round once their group assembled (round(rate × live), as bench:moshpit-scale)', '1')
    .option('--elements <n>', 'values per peer', '64')
    .option('--part-elements <n>', 'elements per streamed part (1: every member reduces a span; the agent\'s 64 KiB parts make a small vector one part)', '1')
    .option('--sims <n>', 'seeded simulations per row (medians)', '20')
    .option('--seed <s>', 'seed', '1')
    .parse()
    .opts<Record<string, string>>()
  const crash = Number(o.crash) / 100
  const sizes = numberList(o.peers, '--peers', 2)
  console.log(`Medians of ${o.sims} simulations, ${o.elements} elements, ${o.partElements} per part, ${o.crash} % of the live peers crashing per round: largest deviation / variance after each round.\n`)
  console.log('| peers | group (d) | failed span | round 1 | round 2 | round 3 | round 4 | round 5 | round 6 |')
  console.log('|---:|---|---|---|---|---|---|---|---|')
  for (const peers of sizes) {
    const g = defaultGroupSize(peers)
    const d = gridDimensions(peers, g)
    for (const [grouping, repair] of [['grid', false], ['grid', true], ['random', true]] as const) {
      const rows = ruleMedians({ peers, groupSize: g, elements: Number(o.elements), rounds: 6, elementsPerPart: Number(o.partElements), repair, grouping, crashesPerRound: (live) => Math.round(crash * live) }, Number(o.sims), o.seed)
      const label = `${repair ? 'repaired' : 'kept local'}${grouping === 'random' ? ', random groups' : ''}`
      console.log(`| ${peers} | ${g} (${d}) | ${label} | ${rows.map(r => `${r.deviation.toExponential(1)} / ${r.variance.toExponential(1)}`).join(' | ')} |`)
    }
  }
}

try {
  main()
} catch (err) {
  process.stderr.write(`bench:moshpit-rule: ${err instanceof Error ? err.message : String(err)}\n`)
  process.exitCode = 1
}
