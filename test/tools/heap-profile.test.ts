import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const run = promisify(execFile)
const dist = fileURLToPath(new URL('../../', import.meta.url))

test('the major-GC sampling hook writes a heap profile at exit, and the summary names the function that kept its allocations', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'avs-heap-'))
  t.after(async () => { await rm(dir, { recursive: true, force: true }) })
  const script = join(dir, 'allocates.mjs')
  // Kept alive to the end: sampled whatever the collector does.
  await writeFile(script, 'const kept = []\nfunction keepsArrays () { for (let i = 0; i < 20000; i++) kept.push(new Array(64).fill(i)) }\nkeepsArrays()\nprocess.exit(0)\n')
  await run(process.execPath, ['--import', join(dist, 'tools/profile/major-gc-sampling.js'), script], { env: { ...process.env, AVS_HEAP_SAMPLING_DIR: dir } })
  const profiles = (await readdir(dir)).filter(f => f.endsWith('.heapprofile'))
  assert.equal(profiles.length, 1)
  const { stdout } = await run(process.execPath, [join(dist, 'tools/profile/heap-profile-summary.js'), join(dir, profiles[0]), '--top', '5'])
  const firstSite = stdout.split('\n')[2]
  assert.match(firstSite, /keepsArrays allocates\.mjs:2/, stdout)
})
