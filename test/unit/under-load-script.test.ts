import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

// scripts/under-load.sh, the "N of N under CPU burners" command: its tally, its exit code, its
// burners gone after, and its one sentence when dist/ is not built. Runs of tiny test files only.
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const SCRIPT = join(ROOT, 'scripts', 'under-load.sh')

function underLoad (script: string, out: string, files: string[]): { status: number | null, stdout: string, stderr: string } {
  const r = spawnSync('bash', [script, ...files], {
    env: { ...process.env, RUNS: '1', BURNERS: '1', OUT: out },
    encoding: 'utf8',
    timeout: 15_000
  })
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

/** Burner processes of this OUT still alive (pgrep -f on the marker in their command line). */
function burnersLeft (out: string): string {
  return spawnSync('pgrep', ['-af', `under-load-burner:${out}`], { encoding: 'utf8' }).stdout.trim()
}

test('scripts/under-load.sh: tally per file, exit code, burners gone, dist/ check', { timeout: 20_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'under-load-'))
  try {
    const pass = join(dir, 'tiny-pass.test.js')
    const fail = join(dir, 'tiny-fail.test.js')
    writeFileSync(pass, "const { test } = require('node:test')\ntest('passes', () => {})\n")
    writeFileSync(fail, "const { test } = require('node:test')\nconst assert = require('node:assert')\ntest('fails', () => { assert.equal(1, 2) })\n")

    const outA = join(dir, 'out-a')
    const a = underLoad(SCRIPT, outA, [pass])
    assert.equal(a.status, 0, a.stdout + a.stderr)
    assert.match(a.stdout, new RegExp(`^PASS ${pass}: 1/1 passed$`, 'm'))
    assert.equal(burnersLeft(outA), '', 'no burner left')

    const outB = join(dir, 'out-b')
    const b = underLoad(SCRIPT, outB, [pass, fail])
    assert.notEqual(b.status, 0, b.stdout + b.stderr)
    assert.match(b.stdout, new RegExp(`^PASS ${pass}: 1/1 passed$`, 'm'))
    assert.match(b.stdout, new RegExp(`^FAIL ${fail}: 0/1 passed, 1 failed; failing runs' logs:$`, 'm'))
    const failingLog = /^ {2}(\S+run-1\.log)$/m.exec(b.stdout)?.[1]
    assert.ok(failingLog !== undefined && existsSync(failingLog), `the failing run's log is listed and kept: ${b.stdout}`)
    assert.equal(burnersLeft(outB), '', 'no burner left')

    // A checkout without dist/: one sentence, exit 2, nothing run.
    const bare = join(dir, 'bare')
    mkdirSync(join(bare, 'scripts'), { recursive: true })
    copyFileSync(SCRIPT, join(bare, 'scripts', 'under-load.sh'))
    const c = underLoad(join(bare, 'scripts', 'under-load.sh'), join(dir, 'out-c'), [])
    assert.equal(c.status, 2)
    assert.match(c.stderr.trim(), /^under-load: dist\/ is not built .*npm run build.*\.$/)
    assert.equal(c.stderr.trim().split('\n').length, 1)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
