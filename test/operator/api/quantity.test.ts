import { test } from 'node:test'
import assert from 'node:assert/strict'
import { parseQuantity } from '../../../api/v1alpha1/quantity.js'

test('quantities read as Kubernetes reads them; what it does not parse is undefined', () => {
  const cases: Array<[unknown, number | undefined]> = [
    [1, 1], ['1', 1], ['500m', 0.5], ['2Gi', 2 * 2 ** 30], ['1.5G', 1.5e9], ['+.8', 0.8], ['1e3', 1000], ['2E-1', 0.2],
    ['0.5', 0.5], ['100Ki', 102400], ['3n', 3e-9], ['1E', 1e18], ['one', undefined], ['1 Gi', undefined], ['', undefined], [null, undefined]
  ]
  for (const [v, want] of cases) {
    const got = parseQuantity(v)
    if (want === undefined) assert.equal(got, undefined, String(v))
    else assert.ok(got !== undefined && Math.abs(got - want) <= 1e-12 * Math.max(1, want), `${String(v)}: ${got}`)
  }
})
