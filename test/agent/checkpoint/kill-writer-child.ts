// Not a test: the child the kill-loop test SIGKILLs. Writes checkpoints of increasing rounds into
// argv[2] (swarm "kill", keep argv[3]) forever, printing "done <round>" after each write returns.
import { listCheckpoints, writeCheckpoint } from '../../../agent/checkpoint/index.js'
import { KILL_SIZES, cheapTensors } from './tensors.js'

const dir = process.argv[2]
const keep = Number(process.argv[3] ?? 2)
const existing = await listCheckpoints(dir, 'kill')
let round = existing.filter(c => c.manifest).reduce((r, c) => Math.max(r, c.round), 0) + 1
for (;;) {
  await writeCheckpoint({ dir, swarm: 'kill', round, samples: round * 32, tensors: cheapTensors(round, KILL_SIZES), keep })
  process.stdout.write(`done ${round}\n`)
  round++
}
