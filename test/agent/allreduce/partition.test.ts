import { test } from 'node:test'
import assert from 'node:assert/strict'
import { type Part, assignParts, elementsPerPart, planParts } from '../../../agent/allreduce/partition.js'
import { spanFractions } from '../../../agent/allreduce/load-balancing.js'
import { makePlan } from '../../../agent/allreduce/plan.js'
import { codecFor } from '../../../agent/compression/index.js'
import { PeerMode, type PeerInfo } from '../../../agent/proto/averaging.js'
import { seededRandom } from '../compression/random.js'


const sum = (xs: readonly number[]): number => xs.reduce((s, x) => s + x, 0)

test('planParts cuts each tensor separately into parts of at most elementsPerPart', () => {
  const parts = planParts([10, 0, 3, 4], 4)
  assert.deepEqual(parts.map(p => [p.index, p.tensorIndex, p.offset, p.length]), [
    [0, 0, 0, 4], [1, 0, 4, 4], [2, 0, 8, 2],
    [3, 2, 10, 3],
    [4, 3, 13, 4]
  ])
  assert.deepEqual(planParts([], 5), [])
  assert.deepEqual(planParts([0, 0], 5), [])
  assert.equal(planParts([1_000_000], 131072).length, 8)
  assert.throws(() => planParts([1], 0), /^Error: Parts must hold a positive whole number of elements, got 0\.$/)
  assert.throws(() => planParts([1], 1.5), /positive whole number/)
  assert.throws(() => planParts([3, -1], 2), /Tensor 1 has size -1/)
  assert.throws(() => planParts([2.5], 2), /Tensor 0 has size 2.5/)
})

test('planParts random property: parts tile the vector in order and never cross a tensor boundary', () => {
  const random = seededRandom(1)
  for (let iteration = 0; iteration < 500; iteration++) {
    const sizes = Array.from({ length: Math.floor(random() * 8) }, () => random() < 0.2 ? 0 : Math.floor(random() * 1000))
    const per = 1 + Math.floor(random() * 300)
    const parts = planParts(sizes, per)
    let offset = 0
    const starts: number[] = []
    for (const s of sizes) { starts.push(offset); offset += s }
    let position = 0
    parts.forEach((p, k) => {
      assert.equal(p.index, k)
      assert.equal(p.offset, position)
      assert.ok(p.length >= 1 && p.length <= per)
      assert.ok(p.offset >= starts[p.tensorIndex] && p.offset + p.length <= starts[p.tensorIndex] + sizes[p.tensorIndex])
      position += p.length
    })
    assert.equal(position, sum(sizes))
    assert.equal(parts.length, sum(sizes.map(s => Math.ceil(s / per))))
  }
})

test('elementsPerPart divides the part size by the codec\'s bytes per element, at least 1', () => {
  assert.equal(elementsPerPart(2 ** 19, 4), 131072)
  assert.equal(elementsPerPart(2 ** 19, 2), 262144)
  assert.equal(elementsPerPart(2 ** 19, 1), 524288)
  assert.equal(elementsPerPart(65536, 4), 16384)
  assert.equal(elementsPerPart(3, 4), 1)
  assert.equal(elementsPerPart(10, 3), 3)
  assert.throws(() => elementsPerPart(0, 4), /^Error: Part size must be a positive number of bytes, got 0\.$/)
  assert.throws(() => elementsPerPart(100, 0), /Bytes per element must be a positive number/)
  assert.throws(() => elementsPerPart(NaN, 4), /Part size/)
})

test('assignParts follows the pivots and gives a straddling part to the larger share', () => {
  // 10 parts of 10 elements, total 100, equal halves: pivot at 50 falls on a part boundary.
  const parts = planParts([100], 10)
  assert.deepEqual(assignParts(parts, [0.5, 0.5]), [5, 5])
  // Pivot at 54: part [50, 60) has 4 elements for peer 0 and 6 for peer 1 → peer 1.
  assert.deepEqual(assignParts(parts, [0.54, 0.46]), [5, 5])
  // Pivot at 56: peer 0 owns 6 of part [50, 60) → peer 0.
  assert.deepEqual(assignParts(parts, [0.56, 0.44]), [6, 4])
  // Pivot at 55: a tie goes to the earlier peer.
  assert.deepEqual(assignParts(parts, [0.55, 0.45]), [6, 4])
  // One part spanning three peers' spans: the middle peer owns most of it.
  assert.deepEqual(assignParts(planParts([10], 10), [0.1, 0.8, 0.1]), [0, 1, 0])
  assert.deepEqual(assignParts([], [0.3, 0.7]), [0, 0])
})

test('assignParts gives nothing to zero-fraction peers wherever they sit', () => {
  const parts = planParts([37, 5, 58], 7)
  for (const fractions of [[0, 1], [1, 0], [0, 0.5, 0, 0.5, 0], [0, 0, 1, 0, 0], [0.2, 0, 0.3, 0, 0.5]]) {
    const counts = assignParts(parts, fractions)
    assert.equal(sum(counts), parts.length)
    fractions.forEach((f, i) => { if (f === 0) assert.equal(counts[i], 0, `fractions ${fractions.join(',')}`) })
  }
})

test('assignParts: equal fractions split equal parts equally; a client peer gets no parts', () => {
  const parts = planParts([4096 * 12], 4096)
  assert.deepEqual(assignParts(parts, spanFractions([null, null, null, null], ['node', 'node', 'node', 'node'])), [3, 3, 3, 3])
  assert.deepEqual(assignParts(parts, spanFractions([null, null, null, null], ['node', 'client', 'node', 'auxiliary'])), [4, 0, 4, 4])
})

test('assignParts rejects invalid fractions and parts that do not tile the vector', () => {
  const parts = planParts([20], 5)
  assert.throws(() => assignParts(parts, [0, 0]), /^Error: Cannot assign parts: no peer has a positive fraction\.$/)
  assert.throws(() => assignParts(parts, []), /no peer has a positive fraction/)
  assert.throws(() => assignParts(parts, [1, -0.1]), /Fraction 1 is -0.1/)
  assert.throws(() => assignParts(parts, [1, NaN]), /Fraction 1 is NaN/)
  const gap: Part[] = [parts[0], parts[2]]
  assert.throws(() => assignParts(gap, [1]), /Part 1 \(offset 10, length 5\) does not continue the previous parts at offset 5/)
  assert.throws(() => assignParts([{ index: 0, tensorIndex: 0, offset: 0, length: 0 }], [1]), /positive length/)
})

test('assignParts random property: sums, contiguity, zero fractions, closeness to the ideal span, determinism', () => {
  const random = seededRandom(99)
  for (let iteration = 0; iteration < 2000; iteration++) {
    const sizes = Array.from({ length: 1 + Math.floor(random() * 6) }, () => Math.floor(random() * 5000))
    const per = 1 + Math.floor(random() * 700)
    const parts = planParts(sizes, per)
    const peers = 1 + Math.floor(random() * 9)
    const fractions = Array.from({ length: peers }, () => random() < 0.25 ? 0 : random())
    if (sum(fractions) === 0) fractions[Math.floor(random() * peers)] = 1
    const counts = assignParts(parts, fractions)
    assert.equal(counts.length, peers)
    assert.equal(sum(counts), parts.length)
    assert.deepEqual(assignParts(parts, fractions), counts)
    const total = sum(sizes)
    const fsum = sum(fractions)
    let start = 0
    let cumulative = 0
    for (let i = 0; i < peers; i++) {
      assert.ok(Number.isInteger(counts[i]) && counts[i] >= 0)
      if (fractions[i] === 0) assert.equal(counts[i], 0)
      // The run of whole parts covers the ideal span up to about one part at each end.
      const runElements = sum(parts.slice(start, start + counts[i]).map(p => p.length))
      const ideal = fractions[i] / fsum * total
      assert.ok(Math.abs(runElements - ideal) <= 2 * per + 1, `peer ${i}: ${runElements} elements vs ideal ${ideal}, part ${per}`)
      // The run starts where the previous pivot is, within one part.
      if (counts[i] > 0) assert.ok(Math.abs(parts[start].offset - Math.floor(cumulative * total)) <= per)
      start += counts[i]
      cumulative += fractions[i] / fsum
    }
  }
})

test('makePlan: measured rates close together give equal spans once every member says they are measured; an older member keeps the old rule', () => {
  const info = (bandwidth: number, bandwidthMeasured?: boolean): PeerInfo => ({ mode: PeerMode.NODE, bandwidth, bandwidthMeasured, weight: 1, userData: new Uint8Array(0), dataPort: 0, addrs: [], dataAddrs: [], round: 0 })
  const rates = [12.75e6, 12.25e6, 12.6e6, 13.6e6]
  const spans = (infos: PeerInfo[]): number[] => {
    const plan = makePlan(infos, [800_000], 4096, codecFor('none'))
    return plan.spanStart.map((s, i) => plan.spanEnd[i] - s)
  }
  // 800,000 float32 in parts of 1024 elements: 782 parts, 195 or 196 each when split equally.
  const merged = spans(rates.map(b => info(b, true)))
  assert.ok(Math.max(...merged) - Math.min(...merged) <= 1, merged.join(','))
  // One member from before the rule (no bandwidth_measured): every member keeps the water-filling of the raw rates.
  const old = spans([info(rates[0]), ...rates.slice(1).map(b => info(b, true))])
  assert.ok(old[3] > 1.1 * old[1], old.join(','))
  // Rates set by hand are exact: never merged.
  const byHand = spans(rates.map(b => info(b, false)))
  assert.deepEqual(byHand, old)
})
