import { test } from 'node:test'
import assert from 'node:assert/strict'
import { formatBytes, formatDuration, TransferProgress } from '../../../agent/util/transfer-progress.js'

test('a transfer reports at most once an interval, none once it is done, with amount, rate and time left', () => {
  let now = 1_000_000
  const lines: string[] = []
  const total = 4 * 1024 ** 3
  const p = new TransferProgress('downloading the state from P', total, l => { lines.push(l) }, 5000, () => now)
  now += 4000
  p.update(0.05 * total)
  assert.deepEqual(lines, [], 'nothing within the first interval')
  now += 1000
  p.update(0.25 * total)
  assert.deepEqual(lines, ['downloading the state from P: 1.00 GiB of 4.00 GiB (25 %), 214.7 MB/s, about 15 s left'])
  now += 2000
  p.update(0.3 * total)
  assert.equal(lines.length, 1, 'not again within the interval')
  now += 3000
  p.update(0.5 * total)
  assert.equal(lines[1], 'downloading the state from P: 2.00 GiB of 4.00 GiB (50 %), 214.7 MB/s, about 10 s left')
  now += 60_000
  p.update(total)
  assert.equal(lines.length, 2, 'the end is the caller\'s line')
})

test('bytes and durations read as a person writes them', () => {
  assert.deepEqual([0, 812, 1024, 65536, 308_468, 1.5 * 1024 ** 2, 4 * 1024 ** 3, 3 * 1024 ** 4].map(formatBytes),
    ['0 B', '812 B', '1.00 KiB', '64.0 KiB', '301 KiB', '1.50 MiB', '4.00 GiB', '3.00 TiB'])
  assert.deepEqual([0.2, 40, 89, 95, 240, 5399, 9000].map(formatDuration), ['1 s', '40 s', '89 s', '2 min', '4 min', '90 min', '2.5 h'])
})
