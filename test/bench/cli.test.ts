import { test } from 'node:test'
import assert from 'node:assert/strict'
import { numberList } from '../../bench/lib/cli.js'

test('numberList: a comma-separated list of numbers in range; anything else is an error naming the option and the item', () => {
  assert.deepEqual(numberList('64, 256,1024', '--peers', 2), [64, 256, 1024])
  assert.deepEqual(numberList('0,1.5,100', '--crash', 0, 100), [0, 1.5, 100])
  assert.throws(() => numberList('64,x', '--peers', 2), { message: '--peers takes a comma-separated list of numbers from 2, not "x"' })
  assert.throws(() => numberList('64,,256', '--peers', 2), { message: '--peers takes a comma-separated list of numbers from 2, not ""' })
  assert.throws(() => numberList('1', '--peers', 2), /from 2, not "1"/)
  assert.throws(() => numberList('101', '--crash', 0, 100), { message: '--crash takes a comma-separated list of numbers from 0 to 100, not "101"' })
  assert.throws(() => numberList('Infinity', '--x'), { message: '--x takes a comma-separated list of numbers, not "Infinity"' })
})
