/**
 * The grid rule's simulation (bench/lib/moshpit-rule.ts), which bench:moshpit-scale prints beside
 * its agents' figures: without crashes it must hold the exact mean after exactly d rounds on every
 * exact grid the bench runs (else "ours ÷ the rule" compares with a wrong reference); with crashes
 * it must stay above that and shrink; a seed must repeat. And the variance is what its doc says.
 */
import { test } from 'node:test'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import assert from 'node:assert/strict'
import { simulateGridRule } from '../../bench/lib/moshpit-rule.js'
import { distanceToMean } from '../../bench/lib/moshpit-math.js'

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

for (const [peers, groupSize, d] of [[16, 4, 2], [64, 4, 3], [256, 4, 4], [1024, 32, 2]]) {
  test(`without crashes ${peers} peers in groups of ${groupSize} hold the exact mean after exactly ${d} rounds`, () => {
    for (const elementsPerPart of [undefined, 1]) {
      for (const seed of [1, 2, 3]) {
        const rounds = simulateGridRule({ peers, groupSize, elements: 16, rounds: d + 1, seed, elementsPerPart })
        const at = `seed ${seed}, ${elementsPerPart ?? 'default'} elements per part`
        // Not before: after d − 1 rounds a peer has met g^(d−1) of the N values at most.
        assert.ok(rounds[d - 2].deviation > 1e-3, `round ${d - 1} (${at}): ${rounds[d - 2].deviation}`)
        assert.ok(rounds[d - 1].deviation < 1e-12, `round ${d} (${at}): ${rounds[d - 1].deviation}`)
        assert.ok(rounds[d].deviation < 1e-12, `round ${d + 1} (${at}): ${rounds[d].deviation}`)
        assert.ok(rounds.every(r => r.live === peers && r.crashed === 0))
      }
    }
  })
}

test('with crashes the rule stays above the exact mean after d rounds, and the distance shrinks round by round', () => {
  for (const [peers, groupSize, crashes, d] of [[64, 4, 1, 3], [1024, 32, 10, 2]]) {
    const sims = Array.from({ length: 20 }, (_, seed) => simulateGridRule({ peers, groupSize, elements: 16, rounds: 6, seed, crashesPerRound: crashes }))
    for (const s of sims) assert.deepEqual(s.map(r => r.live), [1, 2, 3, 4, 5, 6].map(k => peers - k * crashes))
    const deviation = [0, 1, 2, 3, 4, 5].map(k => median(sims.map(s => s[k].deviation)))
    const variance = [0, 1, 2, 3, 4, 5].map(k => median(sims.map(s => s[k].variance)))
    assert.ok(deviation[d - 1] > 1e-6, `${peers}/${groupSize}: median deviation after ${d} rounds ${deviation[d - 1]}`)
    assert.ok(variance[d - 1] > 1e-12, `${peers}/${groupSize}: median variance after ${d} rounds ${variance[d - 1]}`)
    for (let k = 1; k < 6; k++) {
      assert.ok(variance[k] < variance[k - 1], `${peers}/${groupSize}: median variance ${variance.map(v => v.toExponential(1)).join(', ')}`)
    }
    assert.ok(deviation[5] < deviation[0] / 10, `${peers}/${groupSize}: median deviation ${deviation.map(v => v.toExponential(1)).join(', ')}`)
  }
})

test('the same seed gives the same rounds, another seed others', () => {
  const options = { peers: 64, groupSize: 4, elements: 16, rounds: 5, crashesPerRound: (live: number) => Math.round(0.05 * live) }
  assert.deepEqual(simulateGridRule({ ...options, seed: 9 }), simulateGridRule({ ...options, seed: 9 }))
  assert.notDeepEqual(simulateGridRule({ ...options, seed: 9 }), simulateGridRule({ ...options, seed: 10 }))
})

test('variance is the mean over peers and elements of the squared distance to the mean; deviation the largest distance', () => {
  // Means 1 and 0; distances 1, 1 and 0.5, 0.5: squares 1 + 1 + 0.25 + 0.25 over 4 values.
  const { deviation, variance } = distanceToMean([[0, 0.5], [2, -0.5]])
  assert.equal(deviation, 1)
  assert.equal(variance, 2.5 / 4)
  assert.deepEqual(distanceToMean([]), { deviation: 0, variance: 0 })
  assert.equal(distanceToMean([[0], [Number.NaN]]).deviation, Number.POSITIVE_INFINITY)
})

test('span repair (the default) leaves the survivors closer to their mean than keeping a victim\'s span local', () => {
  const after4 = (repair: boolean): number => median(Array.from({ length: 20 }, (_, seed) =>
    simulateGridRule({ peers: 64, groupSize: 4, elements: 16, rounds: 4, seed, crashesPerRound: 1, elementsPerPart: 1, repair })[3].deviation))
  const kept = after4(false)
  const repaired = after4(true)
  assert.ok(repaired < kept / 1.5, `median deviation after round 4: ${repaired} with repair, ${kept} without`)
})

test('random groups do not reach the exact mean in d rounds, and the grid beats them at 10 % crashes', () => {
  for (const [peers, groupSize, d] of [[16, 4, 2], [64, 4, 3]]) {
    const random = Array.from({ length: 20 }, (_, seed) => simulateGridRule({ peers, groupSize, elements: 16, rounds: d, seed, grouping: 'random' }))
    assert.ok(median(random.map(r => r[d - 1].deviation)) > 1e-3, `${peers} peers: random groups after ${d} rounds`)
    assert.ok(random.every(r => r.every(x => x.live === peers)))
  }
  const crashes = (live: number): number => Math.round(0.1 * live)
  const after = (grouping: 'grid' | 'random', k: number): number => median(Array.from({ length: 20 }, (_, seed) =>
    simulateGridRule({ peers: 64, groupSize: 4, elements: 16, rounds: 4, seed, crashesPerRound: crashes, elementsPerPart: 1, grouping })[k].variance))
  for (let k = 1; k < 4; k++) assert.ok(after('grid', k) < after('random', k), `round ${k + 1}: grid ${after('grid', k)}, random ${after('random', k)}`)
})

test('bench:moshpit-rule prints a row per size for a span kept local and repaired, and for random groups', () => {
  const script = fileURLToPath(new URL('../../bench/moshpit-rule.js', import.meta.url))
  const out = spawnSync(process.execPath, [script, '--peers', '16,64', '--sims', '2'], { encoding: 'utf8' })
  assert.equal(out.status, 0, out.stderr)
  const rows = out.stdout.split('\n').filter(l => /^\| \d+ \|/.test(l))
  assert.deepEqual(rows.map(l => l.split('|').slice(1, 4).map(c => c.trim()).join(' ')), ['16 4 (2) kept local', '16 4 (2) repaired', '16 4 (2) repaired, random groups', '64 4 (3) kept local', '64 4 (3) repaired', '64 4 (3) repaired, random groups'])
  for (const row of rows) assert.equal(row.split('|').length - 2, 9, `six rounds in ${row}`)
})
