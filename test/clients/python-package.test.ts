import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

// clients/python's pytest suite (the averaging-swarm package against real agent processes from
// dist/agent/main.js) with the interpreter .ci/run prepares: .venv, created from /usr/bin/python3
// with the system's torch and numpy, plus `pip install ./clients/python[test]`.
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')
const python = process.env.PYTHON ?? resolve(repo, '.venv/bin/python')

test('clients/python: pytest passes (unit tests, and the package against real agents)', { timeout: 600_000 }, async () => {
  assert.ok(existsSync(python), `${python} is missing: create it as .ci/run does (a venv with pip install ./clients/python[test])`)
  const child = spawn(python, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'clients/python/tests'], { cwd: repo, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.on('data', (d: Buffer) => { output += d.toString() })
  child.stderr.on('data', (d: Buffer) => { output += d.toString() })
  const code = await new Promise<number | null>(resolve => child.on('close', resolve))
  assert.equal(code, 0, `pytest failed (exit ${String(code)}):\n${output.slice(-20_000)}`)
})
