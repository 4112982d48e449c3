#!/usr/bin/env node
// Pure-averaging sidecar trainers for the agents of one network namespace (their sidecar APIs
// listen on that namespace's loopback, so the trainers must run inside it, as a pod's trainer
// container shares its pod's network). Started by the partition run with `ip netns exec`.
// argv[2]: JSON TrainerMainConfig. stdout: one JSON line per trainer start and step.
// stdin: "drift <x>" adds x to every value before each step; "stop" ends after the current steps.
import { createInterface } from 'node:readline'
import { encodeFloat32 } from '../../agent/workloads/sidecar/tensor-codec.js'
import { runTrainer } from './sidecar-trainer.js'

export interface TrainerMainConfig {
  readonly agents: ReadonlyArray<{ readonly agent: number, readonly port: number, readonly seed: string, readonly offset: number }>
  readonly elements: number
  readonly periodMs: number
  readonly stepLimitMs: number
}

const config = JSON.parse(process.argv[2] ?? '{}') as TrainerMainConfig
let drift = 0
const budgets = config.agents.map(() => ({ attempts: 0, rounds: Infinity }))
const controller = new AbortController()
const out = (o: unknown): void => { process.stdout.write(JSON.stringify(o) + '\n') }

createInterface({ input: process.stdin }).on('line', (line) => {
  const [cmd, arg] = line.trim().split(/\s+/)
  if (cmd === 'drift') drift = Number(arg)
  if (cmd === 'stop') for (const b of budgets) b.rounds = 0
}).on('close', () => { for (const b of budgets) b.rounds = 0 })

await Promise.all(config.agents.map(async (a, k) => {
  await runTrainer({
    agent: a.agent, incarnation: 1, baseUrl: `http://127.0.0.1:${a.port}`, elements: config.elements, seed: a.seed, offset: a.offset, adoptPeerState: false,
    periodMs: config.periodMs, stepLimitMs: config.stepLimitMs, budget: budgets[k], signal: controller.signal,
    beforeStep: (values) => {
      if (drift === 0) return values
      const next = values.slice()
      for (let j = 0; j < next.length; j++) next[j] += drift
      return next
    },
    onAttempt: (agent, attempt) => { out({ type: 'attempt', agent, attempt, drift, at: Date.now() }) },
    onStart: (r) => { out({ type: 'start', ...r, values: encodeFloat32(r.values) }) },
    onStep: (r) => { out({ type: 'step', ...r, values: encodeFloat32(r.values) }) }
  }).catch((err: unknown) => { out({ type: 'error', agent: a.agent, message: (err as Error).message }) })
}))
// stdout is a pipe, which Node writes asynchronously on Linux: exiting at once cut the last step's
// line off at the pipe's 64 KiB (seen twice in one partition run, both trainers' final lines cut at
// 73,088 characters, under load). Exit once everything written has reached the pipe.
await new Promise<void>(resolve => { process.stdout.write('', () => { resolve() }) })
process.exit(0)
