/**
 * Codec micro-benchmark: encode and decode throughput, compression ratio and relative RMSE on N(0, 1) float32 data.
 * Throughput is in MB/s of raw float32 input (4 bytes per value), best of a few repetitions after a warm-up.
 *
 *   npm run bench:codecs                      # 25M values
 *   node_modules/.bin/node dist/bench/codecs.js 1000000
 */
import { COMPRESSION_NAMES, codecFor } from '../agent/compression/index.js'
import { normalArray } from '../agent/util/random.js'

const DEFAULT_ELEMENTS = 25_000_000
const REPETITIONS = 3

function bestSeconds (run: () => void): number {
  let best = Infinity
  for (let r = 0; r < REPETITIONS; r++) {
    const start = process.hrtime.bigint()
    run()
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9)
  }
  return best
}

function relativeRmse (x: Float32Array, y: Float32Array): number {
  let err = 0
  let ref = 0
  for (let i = 0; i < x.length; i++) { const d = x[i] - y[i]; err += d * d; ref += x[i] * x[i] }
  return Math.sqrt(err / ref)
}

function main (): void {
  const argument = process.argv[2]
  const n = argument === undefined ? DEFAULT_ELEMENTS : Number(argument)
  if (!Number.isSafeInteger(n) || n < 1) {
    console.error(`Usage: codecs.js [elements]; "${argument ?? ''}" is not a positive integer.`)
    process.exit(2)
  }
  const values = normalArray(n, 1)
  const warmup = normalArray(Math.min(n, 1_000_000), 2)
  const megabytes = (4 * n) / 1e6
  console.log(`Codec throughput on ${n.toLocaleString('en-US')} float32 values (${megabytes.toFixed(0)} MB), N(0,1), ` +
    `Node ${process.version}, best of ${REPETITIONS}.\n`)
  console.log('| codec | encode MB/s | decode MB/s | encoded bytes | ratio | relative RMSE |')
  console.log('|---|---:|---:|---:|---:|---:|')
  for (const name of COMPRESSION_NAMES) {
    const codec = codecFor(name)
    for (let w = 0; w < 3; w++) codec.decode(codec.encode(warmup), warmup.length)
    let encoded = codec.encode(values)
    const encodeSeconds = bestSeconds(() => { encoded = codec.encode(values) })
    let decoded = codec.decode(encoded, n)
    const decodeSeconds = bestSeconds(() => { decoded = codec.decode(encoded, n) })
    const ratio = (4 * n) / encoded.length
    // 'none' encodes as a zero-copy view on the input, so its encode time measures nothing useful.
    const encodeRate = name === 'none' ? 'zero-copy' : (megabytes / encodeSeconds).toFixed(0)
    console.log(`| ${name} | ${encodeRate} | ${(megabytes / decodeSeconds).toFixed(0)} | ` +
      `${encoded.length.toLocaleString('en-US')} | ${ratio.toFixed(2)} | ${relativeRmse(values, decoded).toExponential(2)} |`)
  }
}

main()
