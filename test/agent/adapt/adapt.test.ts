import { test } from 'node:test'
import assert from 'node:assert/strict'
import { parseNetDev, peakWindowRate, shortRound, smoothRate } from '../../../agent/adapt/link-rate.js'
import { chooseCodec, CHANGED_RATIO, CodecClock, MAX_REPROBE_ROUNDS, REPROBE_ROUNDS, type AutoCodec } from '../../../agent/adapt/codec-choice.js'

test('peakWindowRate: the fastest window, not the round mean', () => {
  // 1 s at 10 MB/s, then 1 s idle (waiting for a slow peer): the mean is 5 MB/s, the link 10.
  const samples = Array.from({ length: 41 }, (_, k) => ({ t: k * 50, bytes: Math.min(k, 20) * 500_000 }))
  assert.equal(Math.round(peakWindowRate(samples, 300)!), 10_000_000)
  assert.equal(peakWindowRate([{ t: 0, bytes: 0 }], 300), undefined)
  assert.equal(peakWindowRate([{ t: 0, bytes: 0 }, { t: 100, bytes: 0 }], 300), undefined)
  // A round shorter than the window measures nothing (when its few samples fell, not the link).
  assert.equal(peakWindowRate([{ t: 0, bytes: 0 }, { t: 100, bytes: 1000 }], 300), undefined)
  assert.equal(peakWindowRate([{ t: 0, bytes: 0 }, { t: 50, bytes: 900 }, { t: 299, bytes: 1000 }], 300), undefined)
  // One window exactly: its mean.
  assert.equal(peakWindowRate([{ t: 0, bytes: 0 }, { t: 150, bytes: 100 }, { t: 300, bytes: 3000 }], 300), 10_000)
  assert.equal(shortRound(299, 300), true)
  assert.equal(shortRound(300, 300), false)
})

test('smoothRate: noise is averaged, a halved or doubled link is taken at once', () => {
  assert.equal(smoothRate(undefined, 100), 100)
  assert.equal(smoothRate(100, 120), 110)
  assert.equal(smoothRate(100, 40), 40)
  assert.equal(smoothRate(100, 250), 250)
  assert.equal(smoothRate(100, undefined), 100)
  assert.equal(smoothRate(100, Number.NaN), 100)
})

test('parseNetDev sums every interface', () => {
  const text = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    100       1    0    0    0     0          0         0      200       2    0    0    0     0       0          0
  eth0:   1000      10    0    0    0     0          0         0     3000      30    0    0    0     0       0          0
`
  assert.deepEqual(parseNetDev(text), { rx: 1100, tx: 3200 })
  assert.equal(parseNetDev('garbage'), undefined)
})

test('chooseCodec: explores what a member has not measured, then the least slowest-member time', () => {
  assert.equal(chooseCodec([{}, { none: 1 }]), 'none')
  assert.equal(chooseCodec([{ none: 1 }, { none: 1 }]), 'float16')
  assert.equal(chooseCodec([{ none: 1.6, float16: 1.8 }, { none: 1.7, float16: 1.75 }]), 'none')
  assert.equal(chooseCodec([{ none: 13, float16: 7 }, { none: 12, float16: 6.5 }]), 'float16')
  // The slowest member decides: the round ends with it.
  assert.equal(chooseCodec([{ none: 1, float16: 2 }, { none: 9, float16: 5 }]), 'float16')
  assert.equal(chooseCodec([{ none: 1, float16: 1 }]), 'none')
  // Within the margin: none (exact, no codec CPU), so noise does not flip the group every round.
  assert.equal(chooseCodec([{ none: 2.5, float16: 2.4 }]), 'none')
  assert.equal(chooseCodec([{ none: Number.NaN, float16: 1 }]), 'none')
})

test('CodecClock forgets a codec left unused for REPROBE_ROUNDS rounds, so a changed link is tried again', () => {
  const clock = new CodecClock()
  clock.record('none', 2)
  clock.record('float16', 1)
  assert.deepEqual(clock.times, { none: 2, float16: 1 })
  clock.record('float16', 3)
  assert.equal(clock.times.float16, 2)
  for (let k = 0; k < REPROBE_ROUNDS - 2; k++) clock.record('float16', 2)
  assert.equal(clock.times.none, undefined)
  assert.equal(chooseCodec([clock.times]), 'none')
})

/** Rounds of one member choosing alone with the given round time per codec; the rounds float16 ran. */
function float16Rounds (clock: CodecClock, rounds: number, time: (codec: AutoCodec, round: number) => number, from = 0): number[] {
  const used: number[] = []
  for (let r = from; r < from + rounds; r++) {
    const codec = chooseCodec([clock.times])
    if (codec === 'float16') used.push(r)
    clock.record(codec, time(codec, r))
  }
  return used
}

test('CodecClock backs off probing a codec that keeps losing: 10, 20, 40, 80, then every 160 rounds', () => {
  const clock = new CodecClock()
  const used = float16Rounds(clock, 470, c => c === 'none' ? 1 : 2)
  // Round 1 learns float16; then a probe after each wait: 10, 20, 40, 80, 160 rounds of none.
  assert.deepEqual(used, [1, 12, 33, 74, 155, 316])
  assert.equal(clock.reprobeAfter('float16'), MAX_REPROBE_ROUNDS)
  assert.equal(clock.reprobeAfter('none'), REPROBE_ROUNDS)
})

test('CodecClock: a probe the codec wins resets its wait; a changed round time probes at once', () => {
  const clock = new CodecClock()
  float16Rounds(clock, 200, c => c === 'none' ? 1 : 2)
  assert.ok(clock.reprobeAfter('float16') > REPROBE_ROUNDS)
  // The link slows: none takes 3x as long, float16 is now the faster. The moving average of none
  // crosses CHANGED_RATIO within a few rounds and float16 is measured at once, not 160 rounds later.
  assert.ok(3 >= CHANGED_RATIO)
  const used = float16Rounds(clock, 10, c => c === 'none' ? 3 : 2, 200)
  assert.ok(used.length > 0 && used[0] < 205, `float16 probed at ${String(used[0])}`)
  assert.equal(chooseCodec([clock.times]), 'float16')
  assert.equal(clock.reprobeAfter('float16'), REPROBE_ROUNDS)
  // Noise below CHANGED_RATIO does not: none stays probed on its schedule only.
  const quiet = new CodecClock()
  const steady = float16Rounds(quiet, 300, (c, r) => c === 'none' ? (r % 2 === 0 ? 1.3 : 0.8) : 2)
  assert.deepEqual(steady, [1, 12, 33, 74, 155])
})
