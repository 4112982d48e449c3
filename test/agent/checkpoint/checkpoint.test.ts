import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, open, readFile, readdir, rm, truncate, writeFile } from 'node:fs/promises'
import { hostname, tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  CheckpointError, CheckpointTakenError, SafetensorsReader, loadNewestCheckpoint, verifyCheckpoint, writeCheckpoint, type CheckpointSchema
} from '../../../agent/checkpoint/index.js'
import { floatBitsToBfloat, floatBitsToHalf, widen } from '../../../agent/workloads/sidecar/dtypes.js'
import { roundTensors } from './tensors.js'

const SIZES: Array<[string, 'float32' | 'float16' | 'bfloat16', number[]]> = [
  ['w', 'float32', [300, 7]], ['h', 'float16', [1 << 20 | 3]], ['b', 'bfloat16', [1100, 1000]], ['s', 'float32', []], ['e', 'float16', [0]]
]
const SCHEMA: CheckpointSchema = SIZES.map(([name, dtype, shape]) => ({ name, dtype, shape }))
const quiet = { log: () => {} }

async function withDir (fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'ckpt-'))
  try { await fn(dir) } finally { await rm(dir, { recursive: true, force: true }) }
}

/** What a stored value reads back as: float32 unchanged, 16-bit narrowed round-to-nearest-even then widened. */
function expected (dtype: string, data: Float32Array): Float32Array {
  if (dtype === 'float32') return data
  const bits = new Uint32Array(data.buffer, data.byteOffset, data.length)
  const narrow = dtype === 'float16' ? floatBitsToHalf : floatBitsToBfloat
  const stored = Uint16Array.from(bits, narrow)
  const out = new Float32Array(data.length)
  widen(dtype as 'float16', stored, out, 0)
  return out
}

/** The data file a round's manifest names (`round-<n>-<writer tag>.safetensors`). */
async function dataFile (folder: string, round: number): Promise<string> {
  const name = JSON.parse(await readFile(join(folder, `round-${round}.json`), 'utf8')).file.name as string
  assert.match(name, new RegExp(`^round-${round}-[0-9a-f]{12}\\.safetensors$`))
  return name
}

/** A folder's files with the writer tags of data files replaced by `*`. */
async function listing (folder: string): Promise<string[]> {
  return (await readdir(folder)).map(n => n.replace(/-[0-9a-f]{12}\.safetensors$/, '-*.safetensors')).sort()
}

async function writeRounds (dir: string, rounds: number[], keep = 3): Promise<void> {
  for (const round of rounds) {
    await writeCheckpoint({ dir, swarm: 'sw', round, samples: round * 100, tensors: roundTensors(round, SIZES), keep, trainerState: { outerMomentum: ['w.m'] } })
  }
}

test('a checkpoint round-trips every dtype (16-bit narrowed exactly as the sidecar does) with its manifest and latest', async () => {
  await withDir(async dir => {
    await writeRounds(dir, [4])
    assert.deepEqual(await listing(join(dir, 'sw')), ['latest', 'round-4-*.safetensors', 'round-4.json'])
    assert.deepEqual(JSON.parse(await readFile(join(dir, 'sw', 'latest'), 'utf8')), { round: 4, manifest: 'round-4.json', data: await dataFile(join(dir, 'sw'), 4) })
    const { checkpoint, skipped } = await loadNewestCheckpoint(dir, 'sw', SCHEMA, quiet)
    assert.deepEqual(skipped, [])
    assert.ok(checkpoint !== null)
    const m = checkpoint.manifest
    assert.equal(m.round, 4)
    assert.equal(m.samples, 400)
    assert.deepEqual(m.trainerState, { outerMomentum: ['w.m'] })
    assert.ok(!Number.isNaN(Date.parse(m.time)))
    assert.deepEqual(m.tensors.map(t => [t.name, t.dtype, t.shape]), SIZES)
    for (const src of roundTensors(4, SIZES)) {
      const got: Float32Array = checkpoint.tensors.get(src.name)!
      assert.deepEqual(new Uint32Array(got.buffer), new Uint32Array(expected(src.dtype, src.data as Float32Array).buffer), src.name)
    }
    const reader = await SafetensorsReader.open(checkpoint.path)
    try {
      assert.equal(reader.metadata['averaging_swarm.round'], '4')
      assert.equal(reader.metadata.format, 'pt')
    } finally { await reader.close() }
  })
})

test('16-bit tensors may be given as stored bits; float32 must be a Float32Array; a length mismatch is refused', async () => {
  await withDir(async dir => {
    const bits = Uint16Array.from([0x3c00, 0x7e01, 0xfc00, 0x0001])
    await writeCheckpoint({ dir, swarm: 'sw', round: 1, samples: 1, tensors: [{ name: 'x', dtype: 'float16', shape: [4], data: bits }] })
    const reader = await SafetensorsReader.open(join(dir, 'sw', await dataFile(join(dir, 'sw'), 1)))
    try { assert.deepEqual(new Uint16Array((await reader.readRaw('x')).buffer), bits) } finally { await reader.close() }
    await assert.rejects(writeCheckpoint({ dir, swarm: 'sw', round: 2, samples: 1, tensors: [{ name: 'x', dtype: 'float32', shape: [4], data: bits }] }), /must be given as a Float32Array/)
    await assert.rejects(writeCheckpoint({ dir, swarm: 'sw', round: 2, samples: 1, tensors: [{ name: 'x', dtype: 'float32', shape: [5], data: new Float32Array(4) }] }), /4 values for shape \[5\]/)
    await assert.rejects(writeCheckpoint({ dir, swarm: 'sw', round: 1, samples: 1, tensors: [] }), (e: unknown) => e instanceof CheckpointTakenError && /already checkpointed/.test(e.message))
    await assert.rejects(writeCheckpoint({ dir, swarm: 'sw', round: 0, samples: 1, tensors: [] }), (e: unknown) => e instanceof CheckpointTakenError && /older than its checkpoint of round 1/.test(e.message))
    await assert.rejects(writeCheckpoint({ dir, swarm: '../x', round: 3, samples: 1, tensors: [] }), CheckpointError)
    // A failed write leaves no temporary file behind and round 1 intact.
    assert.deepEqual(await listing(join(dir, 'sw')), ['latest', 'round-1-*.safetensors', 'round-1.json'])
  })
})

test('only the newest K complete checkpoints are kept', async () => {
  await withDir(async dir => {
    await writeRounds(dir, [1, 2, 3, 4, 5], 2)
    assert.deepEqual(await listing(join(dir, 'sw')), ['latest', 'round-4-*.safetensors', 'round-4.json', 'round-5-*.safetensors', 'round-5.json'])
  })
})

test('a corrupt or partial newest checkpoint is skipped with its reason and the one before it is used', async () => {
  const corruptions: Array<[string, (folder: string) => Promise<void>, RegExp]> = [
    ['flipped data byte', async f => {
      const fh = await open(join(f, await dataFile(f, 3)), 'r+')
      const { size } = await fh.stat()
      const b = Buffer.alloc(1)
      await fh.read(b, 0, 1, size - 5)
      b[0] ^= 0x10
      await fh.write(b, 0, 1, size - 5)
      await fh.close()
    }, /tensor "b" has sha256 [0-9a-f]{12}… where the manifest has/],
    ['truncated data', async f => { await truncate(join(f, await dataFile(f, 3)), 5000) }, /past the \d+ bytes of data/],
    ['garbage header', async f => {
      const fh = await open(join(f, await dataFile(f, 3)), 'r+')
      await fh.write(Buffer.from('garbage!garbage!'), 0, 16, 0)
      await fh.close()
    }, /header length \d+ exceeds the limit/],
    ['data file missing', async f => { await rm(join(f, await dataFile(f, 3))) }, /data file named by the manifest is missing/],
    ['manifest missing', async f => { await rm(join(f, 'round-3.json')) }, /no manifest: the write did not complete/],
    ['manifest garbage', async f => { await writeFile(join(f, 'round-3.json'), '{"format": ') }, /manifest is not valid JSON/],
    ['manifest of another round', async f => { await writeFile(join(f, 'round-3.json'), await readFile(join(f, 'round-2.json'))) }, /manifest's round is missing or invalid/]
  ]
  for (const [what, corrupt, reason] of corruptions) {
    await withDir(async dir => {
      await writeRounds(dir, [1, 2, 3])
      await corrupt(join(dir, 'sw'))
      const lines: string[] = []
      const { checkpoint, skipped } = await loadNewestCheckpoint(dir, 'sw', SCHEMA, { log: l => lines.push(l) })
      assert.equal(checkpoint?.manifest.round, 2, what)
      assert.equal(skipped.length, 1, what)
      assert.match(skipped[0].file, /^round-3(-[0-9a-f]{12})?\.(json|safetensors)$/, what)
      assert.match(skipped[0].reason, reason, what)
      assert.equal(lines.length, 1)
      assert.match(lines[0], /^checkpoint: skipping sw\/round-3[.-]/)
      const v = await verifyCheckpoint(dir, 'sw', 3)
      assert.equal(v.ok, false, what)
      assert.equal((await verifyCheckpoint(dir, 'sw', 2)).ok, true)
    })
  }
})

test('a checkpoint that does not match the schema is skipped; with none valid the result is null', async () => {
  await withDir(async dir => {
    assert.deepEqual(await loadNewestCheckpoint(dir, 'sw', SCHEMA, quiet), { checkpoint: null, skipped: [] })
    await writeRounds(dir, [1])
    const other: CheckpointSchema = SCHEMA.map((t, i) => i === 0 ? { ...t, shape: [7, 300] } : t)
    const { checkpoint, skipped } = await loadNewestCheckpoint(dir, 'sw', other, quiet)
    assert.equal(checkpoint, null)
    assert.deepEqual(skipped, [{ file: 'round-1.json', reason: 'does not match the schema: tensor "w" has shape [300, 7] where the schema has [7, 300]' }])
    const dtypes = await loadNewestCheckpoint(dir, 'sw', SCHEMA.map(t => ({ ...t, dtype: 'float32' as const })), quiet)
    assert.match(dtypes.skipped[0].reason, /tensor "h" is float16 where the schema has float32/)
  })
})

test('agents writing one round at once: exactly one checkpoint is written, the others hear CheckpointTakenError', async () => {
  await withDir(async dir => {
    await writeRounds(dir, [1])
    const writers = [10, 20, 30, 40].map(async (seed) => await writeCheckpoint({ dir, swarm: 'sw', round: 2, samples: seed, tensors: roundTensors(seed, SIZES) }))
    const outcomes = await Promise.allSettled(writers)
    const won = outcomes.flatMap((o, i) => o.status === 'fulfilled' ? [i] : [])
    assert.equal(won.length, 1, 'one writer wins')
    for (const o of outcomes) if (o.status === 'rejected') assert.ok(o.reason instanceof CheckpointTakenError, String(o.reason))
    const { checkpoint } = await loadNewestCheckpoint(dir, 'sw', SCHEMA, quiet)
    const seed = [10, 20, 30, 40][won[0]]
    assert.equal(checkpoint?.manifest.samples, seed)
    const w = roundTensors(seed, SIZES)[0]
    assert.deepEqual(checkpoint.tensors.get('w'), w.data)
    // The losers left nothing behind: one data file and one manifest per round, no claim, no temporary.
    assert.deepEqual(await listing(join(dir, 'sw')), ['latest', 'round-1-*.safetensors', 'round-1.json', 'round-2-*.safetensors', 'round-2.json'])
  })
})

test('claims: a live writer\'s holds its round; a dead writer\'s, or an empty one (killed between create and write), does not', async () => {
  await withDir(async dir => {
    await writeRounds(dir, [1])
    const folder = join(dir, 'sw')
    const write = async (round: number): Promise<unknown> => await writeCheckpoint({ dir, swarm: 'sw', round, samples: round, tensors: roundTensors(round, SIZES) })
    // A live writer on this host (this test's parent process stands in for one): the round is refused.
    await writeFile(join(folder, '.round-2.claim'), `${hostname()} ${process.ppid} someone-else\n`)
    await assert.rejects(write(2), (err: Error) => err instanceof CheckpointTakenError && /Round 2 is being written by another agent/.test(err.message))
    // The same claim once its writer is gone, and an empty claim: both taken over, the round written, no claim left.
    await writeFile(join(folder, '.round-2.claim'), `${hostname()} 999999999 someone-else\n`)
    await write(2)
    await writeFile(join(folder, '.round-3.claim'), '')
    await write(3)
    assert.deepEqual((await readdir(folder)).filter(n => n.endsWith('.claim') || n.endsWith('.tmp')), [])
    assert.equal((await loadNewestCheckpoint(dir, 'sw', SCHEMA, quiet)).checkpoint?.manifest.round, 3)
  })
})
