import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, open, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { SafetensorsReader, writeSafetensors, type TensorSource } from '../../../agent/checkpoint/index.js'

// Python's safetensors (the reference implementation, Rust underneath) from the venv .ci/run prepares:
// .venv over /usr/bin/python3 (Debian's numpy and torch) with `pip install './clients/python[test]'`, whose
// test extra brings safetensors.
const python = process.env.PYTHON ?? resolve(process.cwd(), '.venv/bin/python')
const run = promisify(execFile)

async function py (script: string, ...args: string[]): Promise<any> {
  if (!existsSync(python)) assert.fail(`${python} is missing: create it as .ci/run does (a venv over /usr/bin/python3 with ./clients/python[test] installed)`)
  const { stdout } = await run(python, ['-c', script, ...args], { maxBuffer: 64 << 20 })
  return JSON.parse(stdout)
}

const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex')
const bytesOf = (a: Float32Array | Uint16Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength)

const READ = `
import json, sys
import numpy as np
from safetensors import safe_open
import safetensors.numpy
path = sys.argv[1]
out = {}
with safe_open(path, framework='np') as f:
    out['__metadata__'] = f.metadata()
arrays = safetensors.numpy.load_file(path) if sys.argv[2] == 'np' else None
import torch, safetensors.torch
tensors = safetensors.torch.load_file(path)
for name, t in tensors.items():
    dt = str(t.dtype).replace('torch.', '')
    if dt == 'bfloat16':
        raw = t.view(torch.int16).numpy().tobytes()
    else:
        raw = arrays[name].tobytes() if arrays is not None else t.numpy().tobytes()
        assert arrays is None or str(arrays[name].dtype) == dt, (name, arrays[name].dtype, dt)
    out[name] = {'dtype': dt, 'shape': list(t.shape), 'hex': raw.hex()}
print(json.dumps(out))
`

test('Python safetensors reads every dtype we write back bit for bit, metadata included', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'st-py-'))
  try {
    const everyHalf = Uint16Array.from({ length: 65536 }, (_, i) => i)
    const specials = new Float32Array(new Uint32Array([
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff, 0x00000001, 0x807fffff, 0x7f7fffff, 0x3f800000, 0x33800000
    ]).buffer)
    const normal = Float32Array.from({ length: 4097 }, (_, i) => Math.sin(i) * 1e3 ** ((i % 7) - 3))
    const tensors: TensorSource[] = [
      { name: 'f32.specials', dtype: 'float32', shape: [3, 4], data: specials },
      { name: 'f32.normal', dtype: 'float32', shape: [4097], data: normal },
      { name: 'f16.every', dtype: 'float16', shape: [256, 256], data: everyHalf },
      { name: 'bf16.every', dtype: 'bfloat16', shape: [65536], data: everyHalf },
      { name: 'f16.narrowed', dtype: 'float16', shape: [4097], data: normal },
      { name: 'bf16.narrowed', dtype: 'bfloat16', shape: [17, 241], data: normal },
      { name: 'scalar', dtype: 'float32', shape: [], data: new Float32Array([2.5]) },
      { name: 'empty', dtype: 'bfloat16', shape: [0, 3], data: new Float32Array(0) }
    ]
    const metadata = { format: 'pt', 'averaging_swarm.round': '12', unicode: 'größe ✓', empty: '' }
    const path = join(dir, 'ours.safetensors')
    const fh = await open(path, 'wx')
    try { await writeSafetensors(fh, tensors, metadata) } finally { await fh.close() }
    // What each tensor's stored bytes must be: read back with our reader (the narrowing is tested against torch elsewhere).
    const reader = await SafetensorsReader.open(path)
    const stored = new Map<string, string>()
    try { for (const t of tensors) stored.set(t.name, hex(await reader.readRaw(t.name))) } finally { await reader.close() }
    for (const t of tensors) if (t.dtype === 'float32' || t.data instanceof Uint16Array) assert.equal(stored.get(t.name), hex(bytesOf(t.data)), t.name)

    // numpy has no bfloat16: load_file with numpy only when the file has none, so read twice.
    const got = await py(READ, path, 'torch')
    assert.deepEqual(got.__metadata__, metadata)
    const torchName = { float32: 'float32', float16: 'float16', bfloat16: 'bfloat16' }
    for (const t of tensors) {
      assert.deepEqual(got[t.name], { dtype: torchName[t.dtype], shape: t.shape, hex: stored.get(t.name) }, t.name)
    }
    assert.equal(Object.keys(got).length, tensors.length + 1)
    const npOnly = tensors.filter(t => t.dtype !== 'bfloat16')
    const path2 = join(dir, 'ours-np.safetensors')
    const fh2 = await open(path2, 'wx')
    try { await writeSafetensors(fh2, npOnly, metadata) } finally { await fh2.close() }
    const gotNp = await py(READ, path2, 'np')
    for (const t of npOnly) assert.equal(gotNp[t.name].hex, stored.get(t.name), t.name)

    // The 16-bit narrowing of float32 values matches torch's .to(float16/bfloat16) bit for bit.
    const narrowed = await py(`
import json, sys, torch, numpy as np
x = torch.from_numpy(np.frombuffer(bytes.fromhex(sys.argv[1]), dtype=np.float32).copy())
print(json.dumps({'f16': x.to(torch.float16).view(torch.int16).numpy().tobytes().hex(), 'bf16': x.to(torch.bfloat16).view(torch.int16).numpy().tobytes().hex()}))
`, hex(bytesOf(normal)))
    assert.equal(stored.get('f16.narrowed'), narrowed.f16)
    assert.equal(stored.get('bf16.narrowed'), narrowed.bf16)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
})

test('a file written by Python safetensors is read by our reader, bit for bit, metadata included', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'st-py-'))
  try {
    const path = join(dir, 'theirs.safetensors')
    const want = await py(`
import json, sys, torch, numpy as np
import safetensors.torch
g = np.random.default_rng(7)
bits = torch.from_numpy(g.integers(0, 65536, size=5000, dtype=np.int64).astype(np.uint16).view(np.int16))
t = {
  'layer.0.weight': torch.from_numpy(g.standard_normal((31, 17)).astype(np.float32)),
  'half': bits.view(torch.float16).reshape(50, 100),
  'brain': bits.flip(0).view(torch.bfloat16),
  'zzz.scalar': torch.tensor(-0.0, dtype=torch.float32),
  'aaa.empty': torch.zeros((0,), dtype=torch.float16),
}
safetensors.torch.save_file(t, sys.argv[1], metadata={'format': 'pt', 'who': 'python'})
out = {}
for k, v in t.items():
    raw = (v.view(torch.int16) if v.dtype == torch.bfloat16 else v).contiguous().numpy().tobytes()
    out[k] = {'dtype': {torch.float32: 'F32', torch.float16: 'F16', torch.bfloat16: 'BF16'}[v.dtype], 'shape': list(v.shape), 'hex': raw.hex()}
print(json.dumps(out))
`, path)
    const reader = await SafetensorsReader.open(path)
    try {
      assert.deepEqual(reader.metadata, { format: 'pt', who: 'python' })
      assert.deepEqual(reader.tensors.map(t => t.name).sort(), Object.keys(want).sort())
      for (const [name, w] of Object.entries(want as Record<string, { dtype: string, shape: number[], hex: string }>)) {
        const e = reader.entry(name)
        assert.deepEqual({ dtype: e.dtype, shape: e.shape }, { dtype: w.dtype, shape: w.shape }, name)
        assert.equal(hex(await reader.readRaw(name)), w.hex, name)
        const { values } = await reader.readFloat32(name)
        assert.equal(values.length, w.hex.length / (e.dtype === 'F32' ? 8 : 4), name)
      }
    } finally { await reader.close() }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
})
