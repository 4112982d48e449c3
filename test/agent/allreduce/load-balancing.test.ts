import { test } from 'node:test'
import assert from 'node:assert/strict'
import { type PeerMode, MEASURED_RATE_TOLERANCE, apportion, measuredAsEqual, spanFractions } from '../../../agent/allreduce/load-balancing.js'
import { seededRandom } from '../compression/random.js'


const nodes = (n: number): PeerMode[] => new Array<PeerMode>(n).fill('node')
const sum = (xs: readonly number[]): number => xs.reduce((s, x) => s + x, 0)
const close = (a: number, b: number, eps = 1e-12): boolean => Math.abs(a - b) <= eps

/** The LP objective hivemind minimises: max over positive-bandwidth peers of (1 + (N − 2) w_i) / b_i. */
function cost (w: readonly number[], b: readonly number[]): number {
  let worst = 0
  for (let i = 0; i < w.length; i++) if (b[i] > 0) worst = Math.max(worst, (1 + (w.length - 2) * w[i]) / b[i])
  return worst
}

test('no declared bandwidth: equal split among non-client peers', () => {
  assert.deepEqual(spanFractions([null, null, null, null], nodes(4)), [0.25, 0.25, 0.25, 0.25])
  assert.deepEqual(spanFractions([null, null, null], ['node', 'client', 'auxiliary']), [0.5, 0, 0.5])
  // Bandwidth exactly 0 also means "reduces nothing" when nobody declared a positive bandwidth.
  assert.deepEqual(spanFractions([null, 0, null, 0], nodes(4)), [0.5, 0, 0.5, 0])
})

test('equal declared bandwidths give an equal split for any group size', () => {
  for (let n = 1; n <= 16; n++) {
    const w = spanFractions(new Array(n).fill(100), nodes(n))
    for (const x of w) assert.ok(close(x, 1 / n), `n=${n}: ${w.join(',')}`)
    assert.ok(close(sum(w), 1))
  }
})

test('client peers get 0 whatever bandwidth they declare', () => {
  const w = spanFractions([10, 1000, 10, 10], ['node', 'client', 'node', 'auxiliary'])
  assert.equal(w[1], 0)
  for (const i of [0, 2, 3]) assert.ok(close(w[i], 1 / 3))
})

test('with N = 2 the split is proportional to bandwidth', () => {
  const w = spanFractions([1, 3], nodes(2))
  assert.ok(close(w[0], 0.25) && close(w[1], 0.75), w.join(','))
  assert.deepEqual(spanFractions([5, null], nodes(2)), [0.5, 0.5])
  assert.deepEqual(spanFractions([5], nodes(1)), [1])
})

test('a peer with twice the bandwidth reduces more, and the closed form matches the LP optimum', () => {
  const b = [1, 1, 1, 1, 1, 1, 1, 2]
  const w = spanFractions(b, nodes(8))
  assert.ok(w[7] > w[0], w.join(','))
  // Every reducing peer has the same cost (1 + (N-2) w_i) / b_i: the water level.
  const level = (1 + 6 * w[0]) / 1
  assert.ok(close((1 + 6 * w[7]) / 2, level, 1e-12))
  // Here λ = 14/9: w_slow = (14/9 − 1)/6 = 5/54, w_fast = (28/9 − 1)/6 = 19/54.
  assert.ok(close(w[0], 5 / 54) && close(w[7], 19 / 54))
})

test('a very slow peer gets nothing when the LP says so (N = 3, bandwidths 1, 1, 10)', () => {
  const w = spanFractions([1, 1, 10], nodes(3))
  assert.deepEqual(w, [0, 0, 1])
})

test('unspecified peers count as the mean of the declared positive bandwidths', () => {
  const withNull = spanFractions([2, null, 4, 1], nodes(4))
  const explicit = spanFractions([2, 7 / 3, 4, 1], nodes(4))
  for (let i = 0; i < 4; i++) assert.ok(close(withNull[i], explicit[i]))
  // A declared 0 stays 0 even when others are positive.
  assert.equal(spanFractions([0, 5, 5, null], nodes(4))[0], 0)
})

test('all-client or all-zero groups throw one clear sentence', () => {
  const message = /^Error: No peer in the group can reduce: every peer is a client or declares zero bandwidth\.$/
  assert.throws(() => spanFractions([null, 10], ['client', 'client']), message)
  assert.throws(() => spanFractions([0, 0, 0], nodes(3)), message)
  assert.throws(() => spanFractions([], []), message)
  assert.throws(() => spanFractions([1, 2], nodes(3)), /one mode per peer/)
  assert.throws(() => spanFractions([-1, 2], nodes(2)), /Peer 0 declares bandwidth -1/)
  assert.throws(() => spanFractions([NaN, 2], nodes(2)), /must be null or a finite number/)
  assert.throws(() => spanFractions([1, 2], ['node', 'bogus' as PeerMode]), /unknown mode "bogus"/)
})

test('random groups: fractions are valid, deterministic, monotone in bandwidth, and optimal for the LP', () => {
  const random = seededRandom(31337)
  const modesAll: PeerMode[] = ['node', 'node', 'node', 'client', 'auxiliary']
  for (let iteration = 0; iteration < 2000; iteration++) {
    const n = 1 + Math.floor(random() * 12)
    const modes = Array.from({ length: n }, () => modesAll[Math.floor(random() * modesAll.length)])
    const bandwidths = Array.from({ length: n }, () => {
      const r = random()
      return r < 0.2 ? null : r < 0.3 ? 0 : Math.round(random() * 1000) / 10
    })
    let w: number[]
    try {
      w = spanFractions(bandwidths, modes)
    } catch (err) {
      // Only legitimate when nobody can reduce.
      assert.ok(bandwidths.every((b, i) => modes[i] === 'client' || b === 0), String(err))
      continue
    }
    assert.equal(w.length, n)
    assert.ok(close(sum(w), 1, 1e-9), `sum ${sum(w)}`)
    for (let i = 0; i < n; i++) {
      assert.ok(w[i] >= 0 && w[i] <= 1)
      if (modes[i] === 'client') assert.equal(w[i], 0)
    }
    assert.deepEqual(spanFractions(bandwidths, modes), w, 'deterministic')
    const declaredPositive = bandwidths.filter((b, i) => modes[i] !== 'client' && b !== null && b > 0) as number[]
    if (declaredPositive.length > 0 && n > 2) {
      const mean = sum(declaredPositive) / declaredPositive.length
      const eff = bandwidths.map((b, i) => modes[i] === 'client' ? 0 : b ?? mean)
      // Monotone: more bandwidth never means a smaller fraction.
      for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) if (eff[i] > eff[j]) assert.ok(w[i] >= w[j] - 1e-12)
      // Optimal: no random feasible alternative beats it.
      const best = cost(w, eff)
      for (let trial = 0; trial < 20; trial++) {
        const alt = eff.map(b => b > 0 ? random() : 0)
        const s = sum(alt)
        if (s === 0) continue
        assert.ok(cost(alt.map(x => x / s), eff) >= best - 1e-9, 'a random split beat the water-filling split')
      }
      // Also no nearby perturbation beats it (moves mass from one reducer to another).
      for (let i = 0; i < n; i++) {
        for (let j = 0; j < n; j++) {
          if (i === j || eff[j] === 0 || w[i] === 0) continue
          const alt = w.slice(); const delta = Math.min(w[i], 1e-3); alt[i] -= delta; alt[j] += delta
          assert.ok(cost(alt, eff) >= best - 1e-12)
        }
      }
    }
  }
})

test('apportion gives integer counts that sum exactly to the total, proportional to scores', () => {
  assert.deepEqual(apportion(10, [1, 1, 1]), [4, 3, 3]) // tie on remainders → lower index first
  assert.deepEqual(apportion(100, [0.5, 0.25, 0.25]), [50, 25, 25])
  assert.deepEqual(apportion(7, [0, 1, 0, 1]), [0, 4, 0, 3])
  assert.deepEqual(apportion(0, [1, 2]), [0, 0])
  assert.deepEqual(apportion(0, [0, 0]), [0, 0])
  assert.deepEqual(apportion(5, [1]), [5])
  assert.deepEqual(apportion(3, [1e-300, 1, 1e-300]), [0, 3, 0])
  assert.throws(() => apportion(3, [0, 0]), /^Error: Cannot apportion 3 items when every score is zero\.$/)
  assert.throws(() => apportion(-1, [1]), /non-negative integer/)
  assert.throws(() => apportion(2.5, [1]), /non-negative integer/)
  assert.throws(() => apportion(3, [1, -1]), /Score 1 is -1/)
  assert.throws(() => apportion(3, [1, NaN]), /Score 1 is NaN/)
})

test('apportion random property: exact sum, within one of the quota, zero scores get zero, deterministic', () => {
  const random = seededRandom(7)
  for (let iteration = 0; iteration < 3000; iteration++) {
    const k = 1 + Math.floor(random() * 10)
    const scores = Array.from({ length: k }, () => random() < 0.2 ? 0 : random() * 10 ** Math.floor(random() * 6 - 3))
    if (sum(scores) === 0) scores[0] = 1
    const total = Math.floor(random() * (random() < 0.5 ? 20 : 1e9))
    const counts = apportion(total, scores)
    assert.equal(sum(counts), total)
    const s = sum(scores)
    for (let i = 0; i < k; i++) {
      assert.ok(Number.isInteger(counts[i]) && counts[i] >= 0)
      if (scores[i] === 0) assert.equal(counts[i], 0)
      assert.ok(Math.abs(counts[i] - total * scores[i] / s) < 1 + 1e-6, `count ${counts[i]} vs quota ${total * scores[i] / s}`)
    }
    assert.deepEqual(apportion(total, scores), counts)
  }
})

test('measuredAsEqual: measured rates within the tolerance of their run\'s smallest become its mean; others stay', () => {
  // The 8 × 100 Mbit/s run's declarations: one run, one mean, an equal split.
  const measured = [102, 98, 101, 99, 109, 98, 99, 102]
  const merged = measuredAsEqual(measured, measured.map(() => true))
  const mean = sum(measured) / measured.length
  assert.ok(merged.every(b => b === mean), merged.join(','))
  for (const w of spanFractions(merged, nodes(8))) assert.ok(close(w, 1 / 8))
  // Links apart by more than the tolerance keep their own rates (the mixed profile).
  assert.deepEqual(measuredAsEqual([1000, 100, 950, 104], [true, true, true, true]), [975, 102, 975, 102])
  // A run is measured from its smallest: 100, 114 merge; 116 starts a run of its own with 125.
  assert.deepEqual(measuredAsEqual([100, 114, 116, 125], [true, true, true, true]), [107, 107, 120.5, 120.5])
  // Rates set by hand and undeclared ones are not touched, nor do they join a run.
  assert.deepEqual(measuredAsEqual([100, 104, null, 108], [true, false, false, true]), [104, 104, null, 104])
  assert.deepEqual(measuredAsEqual([0, 100, 105], [true, true, true]), [0, 102.5, 102.5])
  // The same whatever the order of the members (every member computes it for itself).
  const order = [3, 0, 7, 5, 1, 6, 2, 4]
  const shuffled = measuredAsEqual(order.map(i => measured[i]), order.map(() => true))
  assert.ok(shuffled.every(b => b === merged[0]))
})

test('measuredAsEqual at the tolerance\'s edge: exactly the factor merges, just above does not', () => {
  assert.deepEqual(measuredAsEqual([100, 100 * MEASURED_RATE_TOLERANCE], [true, true]), [100 * (1 + MEASURED_RATE_TOLERANCE) / 2, 100 * (1 + MEASURED_RATE_TOLERANCE) / 2])
  const above = measuredAsEqual([100, 100 * MEASURED_RATE_TOLERANCE * 1.0001], [true, true])
  assert.equal(above[0], 100)
})
