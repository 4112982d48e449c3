import { test } from 'node:test'
import assert from 'node:assert/strict'
import { compareQuantities, parseQuantity } from '../../../api/v1alpha1/quantity.js'

test('quantities read as Kubernetes reads them; what it does not parse is undefined', () => {
  const cases: Array<[unknown, number | undefined]> = [
    [1, 1], ['1', 1], ['500m', 0.5], ['2Gi', 2 * 2 ** 30], ['1.5G', 1.5e9], ['+.8', 0.8], ['1e3', 1000], ['2E-1', 0.2],
    ['0.5', 0.5], ['100Ki', 102400], ['3n', 3e-9], ['1E', 1e18], ['one', undefined], ['1 Gi', undefined], ['', undefined], [null, undefined], ['.', undefined]
  ]
  for (const [v, want] of cases) {
    const got = parseQuantity(v)
    if (want === undefined) assert.equal(got, undefined, String(v))
    else assert.ok(got !== undefined && Math.abs(Number(got.num) / Number(got.den) - want) <= 1e-12 * Math.max(1, want), `${String(v)}: ${got?.num}/${got?.den}`)
  }
})

test('quantities compare exactly, as Kubernetes compares them, where floating point would not', () => {
  const q = (v: string) => parseQuantity(v)!
  assert.equal(compareQuantities(q('1'), q('1000m')), 0)
  assert.equal(compareQuantities(q('1Ki'), q('1024')), 0)
  assert.equal(compareQuantities(q('1.0000000000000000001'), q('1')), 1)
  assert.equal(compareQuantities(q('910807988639409111040m'), q('910807988639409111041m')), -1)
  assert.equal(compareQuantities(q('2Gi'), q('2G')), 1)
})
