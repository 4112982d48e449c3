import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { loadNewestCheckpoint, writeCheckpoint, type CheckpointSchema } from '../../../agent/checkpoint/index.js'
import { KILL_SIZES, cheapTensors, storedValues } from './tensors.js'

const CHILD = fileURLToPath(new URL('./kill-writer-child.js', import.meta.url))
const ITERATIONS = Number(process.env.KILL_ITERATIONS ?? 32)
const SCHEMA: CheckpointSchema = KILL_SIZES.map(([name, dtype, shape]) => ({ name, dtype, shape }))

/** Seeded so a failure can be replayed: KILL_SEED=<n>. */
let seed = Number(process.env.KILL_SEED ?? Date.now() % 1_000_000)
const random = (): number => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648 }

test(`a writer SIGKILLed at random times ${ITERATIONS} times never leaves a partial checkpoint that restore would use`, { timeout: 300_000 }, async t => {
  const startSeed = seed
  const dir = await mkdtemp(join(tmpdir(), 'ckpt-kill-'))
  const stats = { completedRounds: 0, killsWithTemporary: 0, killsWithOrphan: 0, emptyLoads: 0 }
  let lastDone = 0
  try {
    for (let i = 0; i < ITERATIONS; i++) {
      const child = spawn(process.execPath, [CHILD, dir, '2'], { stdio: ['ignore', 'pipe', 'pipe'] })
      child.stdout.setEncoding('utf8')
      let stderr = ''
      child.stderr.setEncoding('utf8').on('data', (s: string) => { stderr += s })
      child.stdout.on('data', (s: string) => {
        for (const m of s.matchAll(/done (\d+)/g)) { lastDone = Math.max(lastDone, Number(m[1])); stats.completedRounds++ }
      })
      const exited = new Promise<NodeJS.Signals | null>(resolve => child.once('exit', (_code, signal) => resolve(signal)))
      // Node starts in ~100-300 ms here and one 28 MB write takes ~50-300 ms: the kills land before the first
      // write, inside writes (data, fsync, rename, manifest, latest) and inside pruning.
      await new Promise(resolve => setTimeout(resolve, 150 + random() * 900))
      child.kill('SIGKILL')
      // A writer that stopped by itself (an error a killed predecessor left it) would make every later kill land on nothing.
      assert.equal(await exited, 'SIGKILL', `iteration ${i} (seed ${startSeed}): the writer exited before the kill: ${stderr.trim()}`)
      const names = await readdir(join(dir, 'kill')).catch(() => [] as string[])
      if (names.some(n => n.endsWith('.tmp'))) stats.killsWithTemporary++
      const { checkpoint, skipped } = await loadNewestCheckpoint(dir, 'kill', SCHEMA, { log: () => {} })
      // The only thing a kill may leave newer than the newest complete checkpoint is a data file whose manifest was not yet renamed.
      for (const s of skipped) assert.match(s.reason, /^no manifest: the write did not complete$/, `iteration ${i} (seed ${startSeed}): ${s.file}: ${s.reason}`)
      if (skipped.length > 0) stats.killsWithOrphan++
      if (checkpoint === null) {
        assert.equal(lastDone, 0, `iteration ${i} (seed ${startSeed}): round ${lastDone} was complete but nothing was restored`)
        stats.emptyLoads++
        continue
      }
      const round = checkpoint.manifest.round
      assert.ok(round >= lastDone, `iteration ${i} (seed ${startSeed}): restored round ${round} but round ${lastDone} was complete`)
      for (const src of cheapTensors(round, KILL_SIZES)) {
        const want = storedValues(src.dtype, src.data as Float32Array)
        assert.ok(Buffer.from(checkpoint.tensors.get(src.name)!.buffer).equals(Buffer.from(want.buffer)), `iteration ${i}: tensor ${src.name} of round ${round}`)
      }
      lastDone = Math.max(lastDone, round)
    }
    // A writer that runs to the end cleans the killed writers' temporaries and keeps 2 complete checkpoints.
    await writeCheckpoint({ dir, swarm: 'kill', round: lastDone + 1000, samples: 0, tensors: cheapTensors(0, KILL_SIZES), keep: 2 })
    const names = await readdir(join(dir, 'kill'))
    assert.deepEqual(names.filter(n => n.endsWith('.tmp')), [])
    assert.equal(names.filter(n => n.endsWith('.json')).length, 2)
    t.diagnostic(`seed ${startSeed}: ${JSON.stringify({ iterations: ITERATIONS, lastRound: lastDone, ...stats })}`)
    assert.ok(stats.killsWithTemporary + stats.killsWithOrphan >= 3, `too few kills landed inside a write: ${JSON.stringify(stats)}`)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
})
