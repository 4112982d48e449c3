import { test } from 'node:test'
import assert from 'node:assert/strict'
import { niceTicks, tickLabel, renderReport } from '../../cli/local/report.js'
import type { SwarmSample } from '../../cli/local/progress.js'

test('niceTicks: round steps of 1, 2 or 5 × 10^k that cover the range', () => {
  // The old report's rounds axis read "0.0, 16, 32, 49, 65".
  assert.deepEqual(niceTicks(0, 65, 5, true), [0, 10, 20, 30, 40, 50, 60, 70])
  assert.deepEqual(niceTicks(0, 60, 8), [0, 10, 20, 30, 40, 50, 60])
  assert.deepEqual(niceTicks(0, 1.1, 5), [0, 0.2, 0.4, 0.6, 0.8, 1, 1.2])
  assert.deepEqual(niceTicks(0, 250, 5, true), [0, 50, 100, 150, 200, 250])

  const t = niceTicks(0.31, 2.27, 5)
  assert.ok(t[0] <= 0.31 && t[t.length - 1] >= 2.27)
  assert.deepEqual(t, [0, 0.5, 1, 1.5, 2, 2.5])
  assert.ok(t.every((v, i) => i === 0 || Math.abs(v - t[i - 1] - (t[1] - t[0])) < 1e-9), 'evenly spaced')
  // Integer series never get fractional ticks, even when tiny.
  assert.deepEqual(niceTicks(0, 3, 5, true), [0, 1, 2, 3])
  // A flat series still gets an axis; no floating-point noise in labels.
  assert.deepEqual(niceTicks(0, 0), [0, 0.2, 0.4, 0.6, 0.8, 1])
  assert.ok(niceTicks(0, 0.7, 7).every(v => String(v).length <= 4))
  assert.equal(tickLabel(0.30000000000000004), '0.3')
  assert.equal(tickLabel(20000), '20k')
})

test('the report is full width and labels both axes with round ticks', () => {
  const samples: SwarmSample[] = [10, 20, 30, 40, 50, 60].map((t, i) => ({
    t, ready: 4, rounds: 13 * i, failures: 0, deltaRounds: 0, pseudoGradientRounds: 0, bytesSent: 0, meanGroupSize: 4, meanLoss: NaN, meanHeldOutLoss: NaN, meanDivergence: 0.1 / (i + 1), meanSteps: NaN, meanTrainerLoss: 2 - i * 0.3, trainerSamples: 100 * i, completed: 0, checkpointRound: NaN
  }))
  const html = renderReport('digits', 4, samples, [], { agents: '4' }, 'sidecar')
  assert.match(html, /<svg viewBox="0 0 \d+ \d+" width="100%"/)
  assert.doesNotMatch(html, /max-width:720px/)
  assert.match(html, /Training loss the trainers report/)
  const labels = [...html.matchAll(/text-anchor="middle">([^<]+)</g)].map(m => m[1])
  for (const tick of ['0', '10', '20', '30', '40', '50', '60']) assert.ok(labels.includes(tick), `x tick ${tick}`)
  const rounds = html.slice(html.indexOf('Averaging rounds completed'))
  const yLabels = [...rounds.matchAll(/text-anchor="end">([^<]+)</g)].map(m => m[1])
  assert.deepEqual(yLabels, ['0', '10', '20', '30', '40', '50', '60', '70'])
})
