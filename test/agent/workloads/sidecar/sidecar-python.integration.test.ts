import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { existsSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { startSidecarSwarm } from '../../sidecar-fixture.js'
import { SidecarClient } from '../../../../clients/typescript/sidecar-client.js'
import { maxAbsDiff, weightedMean } from '../../swarm-fixture.js'

const run = promisify(execFile)
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../../../../..')
const clientDir = resolve(repo, 'clients/python')
// The interpreter .ci/run gives the averaging-swarm package (pip install ./clients/python[test]).
const venvPython = resolve(repo, '.venv/bin/python')
const python = process.env.PYTHON ?? (existsSync(venvPython) ? venvPython : 'python3')

async function py (args: string[]): Promise<string> {
  try {
    const { stdout } = await run(python, args, { cwd: clientDir, timeout: 90_000, env: { ...process.env, AVS_SHM_DIR: '' } })
    return stdout
  } catch (err) {
    const e = err as { stderr?: string, message: string }
    throw new Error(`${python} ${args.slice(0, 2).join(' ')} failed: ${(e.stderr ?? '').trim().split('\n').at(-1) ?? e.message}`)
  }
}

// One step from Python over binary bodies: w = arange * 0.5 - 3, b = [1, 2, 3], weight 3; prints the result as JSON.
const PY_STEP = `
import json, sys, numpy as np
from averaging_swarm import DecentralizedAverager
a = DecentralizedAverager({"w": np.arange(12, dtype=np.float32).reshape(4, 3) * 0.5 - 3, "b": np.array([1, 2, 3], np.float32)}, url=sys.argv[1], transport="binary")
assert a.registration["created"] is True
r = a.step(weight=3, gather={"lang": "python"}, timeout=30)
with a.get_tensors() as t:
    w, b = t["w"].copy(), t["b"].copy()
origin = a.load_state_from_peers()
with a.get_tensors() as t:
    state_w = t["w"].copy()
print(json.dumps({"averaged": r.averaged, "error": r.error, "group": r.group_size, "gathered": sorted(g["lang"] for g in r.gathered.values()),
                  "wShape": list(w.shape), "w": w.ravel().tolist(), "b": b.tolist(), "origin": origin, "stateW": state_w.ravel().tolist()}))
`

test('the averaging-swarm package is installed (.ci/run: pip install ./clients/python[test] into .venv)', async () => {
  assert.match(await py(['-c', 'import averaging_swarm, numpy; print(numpy.__version__)']), /^\d+\.\d+/)
})

test('the Python client steps against a real agent and gets the exact weighted mean', { timeout: 120_000 }, async () => {
  const swarm = await startSidecarSwarm(2)
  try {
    const ts = new SidecarClient(swarm.agents[1].url)
    await ts.register([{ name: 'w', shape: [4, 3] }, { name: 'b', shape: [3] }])
    const tsValues = { w: Float32Array.from({ length: 12 }, (_, i) => 10 - i), b: Float32Array.of(-7, 0.25, 9) }
    const [out, tsResult] = await Promise.all([
      py(['-c', PY_STEP, swarm.agents[0].url]),
      ts.step(tsValues, { weight: 1, gather: { lang: 'typescript' }, timeout: 30 })
    ])
    const result = JSON.parse(out) as { averaged: boolean, error: string | null, group: number, gathered: string[], wShape: number[], w: number[], b: number[], origin: string, stateW: number[] }
    assert.equal(result.averaged, true, result.error ?? '')
    assert.equal(result.group, 2)
    assert.deepEqual(result.gathered, ['python', 'typescript'])
    assert.deepEqual(result.wShape, [4, 3])
    const pyW = Float32Array.from({ length: 12 }, (_, i) => i * 0.5 - 3)
    const expectedW = weightedMean([pyW, tsValues.w], [3, 1])
    const expectedB = weightedMean([Float32Array.of(1, 2, 3), tsValues.b], [3, 1])
    assert.ok(maxAbsDiff(result.w, expectedW) < 1e-5, `python w off by ${maxAbsDiff(result.w, expectedW)}`)
    assert.ok(maxAbsDiff(result.b, expectedB) < 1e-5, `python b off by ${maxAbsDiff(result.b, expectedB)}`)
    assert.ok(maxAbsDiff(tsResult.tensors.w, expectedW) < 1e-5, 'the TypeScript side got the same mean')
    assert.equal(result.origin, 'averaged')
    assert.deepEqual(result.stateW, result.w, 'state returns the averaged tensors')
  } finally {
    await swarm.stop()
  }
})

test('two example numpy trainers on their own agents average every period and end on the same weights', { timeout: 180_000 }, async () => {
  const swarm = await startSidecarSwarm(2)
  try {
    const outs = await Promise.all(swarm.agents.map(async (a, shard) =>
      await py(['example_numpy_trainer.py', '--url', a.url, '--shard', String(shard), '--steps', '200', '--period', '40', '--json'])))
    const [r0, r1] = outs.map(o => JSON.parse(o.trim().split('\n').at(-1) ?? '') as { rounds: number, failed: number, heldOutLoss: number, w: number[], b: number[] })
    for (const r of [r0, r1]) {
      assert.equal(r.failed, 0)
      assert.equal(r.rounds, 5, 'every period ended in an averaging round')
      assert.ok(r.heldOutLoss < 0.5, `held-out loss ${r.heldOutLoss}`)
    }
    assert.deepEqual(r0.w, r1.w, 'both trainers hold the same weights after the last round')
    assert.deepEqual(r0.b, r1.b)
  } finally {
    await swarm.stop()
  }
})
