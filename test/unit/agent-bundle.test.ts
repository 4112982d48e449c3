/**
 * The agent bundled into one file (scripts/bundle-agent.mjs, part of `npm run build`), which the agent image runs:
 * every file it starts a worker from is next to it, and those workers work from there. The bundle's agent itself
 * runs in the chaos test (test/reliability/chaos.test.ts: kills, a graceful leave and a freeze, exact state after).
 */
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { AGENT_BUNDLE } from '../../agent/process/agent-process.js'

test('the agent bundle: every worker it starts by URL is bundled next to it', () => {
  assert.ok(existsSync(AGENT_BUNDLE), `${AGENT_BUNDLE} exists after npm run build`)
  const workers = [...readFileSync(AGENT_BUNDLE, 'utf8').matchAll(/new URL\("\.\/([^"]+)", import\.meta\.url\)/g)].map(m => m[1])
  assert.deepEqual(workers.sort(), ['data-thread.js', 'sha256-worker.js'], 'the workers the agent starts (a new one needs an entry point in scripts/bundle-agent.mjs)')
  for (const w of workers) assert.ok(existsSync(join(dirname(AGENT_BUNDLE), w)), `${w} is next to the bundle`)
})

test('the agent bundle: its checkpoint hashing worker hashes a shared buffer as node:crypto does', async () => {
  const bytes = new Uint8Array(new SharedArrayBuffer(1 << 20))
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 2654435761) >>> 24
  const worker = new Worker(join(dirname(AGENT_BUNDLE), 'sha256-worker.js'))
  try {
    const answer = await new Promise<{ id: number, hex?: string, error?: string }>((resolve, reject) => {
      worker.once('message', resolve)
      worker.once('error', reject)
      worker.postMessage({ id: 7, buffer: bytes.buffer, offset: 1000, length: 500_000 })
    })
    assert.deepEqual(answer, { id: 7, hex: createHash('sha256').update(bytes.subarray(1000, 501_000)).digest('hex') })
  } finally {
    await worker.terminate()
  }
})
