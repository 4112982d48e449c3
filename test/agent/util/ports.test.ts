import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createServer } from 'node:net'
import { ephemeralLow, freePorts } from '../../../agent/util/ports.js'

test('freePorts: distinct ports below the kernel\'s ephemeral range, each free to bind once released', async () => {
  const ports = await freePorts(24)
  assert.equal(new Set(ports).size, 24, `distinct: ${ports.join(', ')}`)
  const low = ephemeralLow()
  // Outbound connections take their local ports from the ephemeral range: a port chosen there can be gone by the time it is bound.
  if (low !== undefined) assert.ok(ports.every(p => p >= 20_000 && p < low), `below ${low}: ${ports.join(', ')}`)
  for (const port of ports) {
    const s = createServer()
    await new Promise<void>((resolve, reject) => { s.once('error', reject); s.listen(port, '127.0.0.1', resolve) })
    await new Promise<void>(resolve => { s.close(() => { resolve() }) })
  }
})

test('freePorts: a port someone holds is never handed out', async () => {
  const held = await Promise.all(Array.from({ length: 8 }, async () => {
    const [port] = await freePorts(1)
    const s = createServer()
    await new Promise<void>((resolve, reject) => { s.once('error', reject); s.listen(port, '127.0.0.1', resolve) })
    return s
  }))
  try {
    const taken = new Set(held.map(s => (s.address() as { port: number }).port))
    for (let i = 0; i < 20; i++) for (const p of await freePorts(4)) assert.ok(!taken.has(p), `port ${p} is held`)
  } finally {
    await Promise.all(held.map(async s => await new Promise<void>(resolve => { s.close(() => { resolve() }) })))
  }
})
