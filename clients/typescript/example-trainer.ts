/**
 * A trainer in TypeScript that averages through the agent's sidecar API (local SGD): it fits
 * y = x·w + b by SGD on its own shard of synthetic data and, every `--period` steps, hands its
 * weights to the agent and continues from the swarm's mean, weighted by samples seen.
 *
 *   AVS_SIDECAR_PORT=9401 node dist/clients/typescript/example-trainer.js --shard 0 --steps 200 --period 40
 */
import { parseArgs } from 'node:util'
import { SidecarClient } from './sidecar-client.js'

const IN = 8

/** Deterministic uniform numbers in [0, 1) for a seed (mulberry32), so runs repeat exactly. */
function random (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = Math.imul(a ^ (a >>> 15), 1 | a)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Shard s sees inputs around s/2, with feature s pushed further out: non-IID by design. */
function shard (s: number, n: number, seed: number): Array<{ x: Float32Array, y: number }> {
  const truth = random(1234)
  const w = Float32Array.from({ length: IN }, () => truth() * 4 - 2)
  const b = truth() * 2 - 1
  const rnd = random(seed)
  return Array.from({ length: n }, () => {
    const x = Float32Array.from({ length: IN }, (_, i) => s * 0.5 + (rnd() * 2 - 1) * 1.7 + (i === s % IN ? 3 : 0))
    return { x, y: x.reduce((sum, v, i) => sum + v * w[i], b) + (rnd() - 0.5) * 0.1 }
  })
}

function mse (w: Float32Array, b: Float32Array, data: ReadonlyArray<{ x: Float32Array, y: number }>): number {
  return data.reduce((sum, { x, y }) => sum + (x.reduce((p, v, i) => p + v * w[i], b[0]) - y) ** 2, 0) / data.length
}

async function main (): Promise<void> {
  const { values } = parseArgs({
    options: {
      url: { type: 'string', default: `http://127.0.0.1:${process.env.AVS_SIDECAR_PORT ?? '9401'}` },
      shard: { type: 'string', default: '0' },
      steps: { type: 'string', default: '200' },
      period: { type: 'string', default: '40' },
      lr: { type: 'string', default: '0.01' },
      json: { type: 'boolean', default: false }
    }
  })
  const s = Number(values.shard)
  const steps = Number(values.steps)
  const period = Number(values.period)
  const lr = Number(values.lr)
  const data = shard(s, 2000, s + 1)
  const heldOut = [0, 1, 2, 3].flatMap(h => shard(h, 200, 100 + h))
  const rnd = random(s + 7)

  const client = new SidecarClient(values.url)
  await client.register([{ name: 'w', shape: [IN] }, { name: 'b', shape: [1] }])
  const state = await client.state()
  // A restarted trainer continues from the swarm's weights instead of from scratch.
  let w = state.origin === 'initial' ? new Float32Array(IN) : state.tensors.w
  let b = state.origin === 'initial' ? new Float32Array(1) : state.tensors.b
  let rounds = 0
  let failed = 0
  let seen = 0
  for (let step = 1; step <= steps; step++) {
    const batch = Array.from({ length: 32 }, () => data[Math.floor(rnd() * data.length)])
    const gw = new Float32Array(IN)
    let gb = 0
    for (const { x, y } of batch) {
      const err = x.reduce((p, v, i) => p + v * w[i], b[0]) - y
      for (let i = 0; i < IN; i++) gw[i] += (2 * err * x[i]) / batch.length
      gb += (2 * err) / batch.length
    }
    for (let i = 0; i < IN; i++) w[i] -= lr * gw[i]
    b[0] -= lr * gb
    seen += batch.length
    if (step % period === 0 || step === steps) {
      const result = await client.step({ w, b }, { weight: seen, gather: { shard: s }, timeout: 30 })
      if (result.averaged) {
        w = result.tensors.w
        b = result.tensors.b
        rounds++
        seen = 0
      } else {
        failed++
        console.error(`step ${step}: not averaged: ${result.error ?? ''}`)
      }
      if (!values.json) console.log(`step ${step}: shard loss ${mse(w, b, data).toFixed(4)}, held-out loss ${mse(w, b, heldOut).toFixed(4)}, group of ${result.groupSize}`)
    }
  }
  const summary = { shard: s, rounds, failed, heldOutLoss: mse(w, b, heldOut), w: [...w], b: [...b] }
  console.log(values.json ? JSON.stringify(summary) : `done: ${rounds} rounds averaged, ${failed} not, held-out loss ${summary.heldOutLoss.toFixed(4)}`)
}

main().catch(err => {
  console.error(err instanceof Error ? err.message : String(err))
  process.exit(1)
})
