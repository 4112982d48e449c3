import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

// The README's trainer example end to end, shortened: `npm start -- examples/diloco-digits.yaml` (8 agents, 8 real
// PyTorch DiLoCo trainers on non-IID shards) with 200 inner steps instead of 800, then the example's own tools on
// the run, digest.py and compare.py, so that none of them rots. The interpreter is the one .ci/run prepares.
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')
const python = process.env.PYTHON ?? resolve(repo, '.venv/bin/python')
const CLI = resolve(repo, 'dist/cli/local-swarm.js')
const STEPS = 200
const TRAINERS = 8

async function run (cmd: string, args: string[], timeoutMs: number): Promise<{ code: number | null, out: string }> {
  return await new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: repo, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (d: Buffer) => { out += d.toString() })
    child.stderr.on('data', (d: Buffer) => { out += d.toString() })
    const timer = setTimeout(() => { child.kill('SIGTERM') }, timeoutMs)
    child.on('close', (code) => { clearTimeout(timer); resolve({ code, out }) })
  })
}

test('examples/diloco-digits: 8 PyTorch DiLoCo trainers finish through their agents, the final checkpoint holds an outer step they took, and it beats every shard alone', { timeout: 420_000 }, async () => {
  assert.ok(existsSync(python), `${python} is missing: create it as .ci/run does (a venv with pip install ./clients/python[test])`)
  const dir = mkdtempSync(join(tmpdir(), 'avs-digits-'))
  const yaml = readFileSync(join(repo, 'examples/diloco-digits.yaml'), 'utf8')
  const short = yaml.replace('"--steps", "800"', `"--steps", "${STEPS}"`)
  assert.notEqual(short, yaml, 'the example\'s trainer args hold "--steps", "800" (this test shortens them)')
  writeFileSync(join(dir, 'digits.yaml'), short)
  const runs = join(dir, 'runs')
  const checkpoints = join(dir, 'checkpoints')

  const swarm = await run(process.execPath, [CLI, join(dir, 'digits.yaml'), '--duration', '300', '--out', runs, '--checkpoints', checkpoints, '--python', python], 360_000)
  assert.equal(swarm.code, 0, swarm.out.slice(-20_000))
  assert.match(swarm.out, /run ended because\s+every trainer finished and the run is complete/, swarm.out.slice(-5000))
  const runDir = join(runs, readdirSync(runs)[0])
  const logs = readdirSync(runDir).filter(f => f.endsWith('.trainer.log'))
  assert.equal(logs.length, TRAINERS)
  const rounds: number[] = []
  const logged = new Set<string>()
  for (const name of logs) {
    const log = readFileSync(join(runDir, name), 'utf8')
    assert.match(log, new RegExp(`final held-out accuracy [\\d.]+ \\(shard \\d, ${STEPS} inner steps, ${STEPS / 20} outer steps, \\d+ averaged`), `${name}:\n${log}`)
    const done = /agent: complete True, final checkpoint round (\d+)/.exec(log)
    assert.ok(done !== null, `${name} finished its run through the agent:\n${log}`)
    rounds.push(Number(done[1]))
    for (const m of log.matchAll(/, averaged in a group of \d+.*, params ([0-9a-f]{16}), /g)) logged.add(m[1])
  }

  // digest.py reads the run and the swarm's newest checkpoint: θ there is bit for bit the θ of an averaged outer
  // step the trainers logged (the run kept its result). Each agent ends at its own group's last round, so the
  // trainers are told different final rounds (groups of 4 in 8); the newest is the latest checkpoint.
  const digest = await run(python, ['examples/diloco-digits/digest.py', runs, '--checkpoints', join(checkpoints, 'diloco-digits')], 120_000)
  assert.equal(digest.code, 0, digest.out)
  assert.match(digest.out, new RegExp(`trainers ${TRAINERS}, processes started ${TRAINERS}, tracebacks 0, waits for an agent 0`), digest.out)
  const outer = /outer steps averaged (\d+), alone (\d+)/.exec(digest.out)
  assert.ok(outer !== null, digest.out)
  assert.equal(Number(outer[1]) + Number(outer[2]), TRAINERS * STEPS / 20, digest.out)
  const theta = /θ in the latest checkpoint \(round (\d+)\): held-out accuracy ([\d.]+), params ([0-9a-f]{16})/.exec(digest.out)
  assert.ok(theta !== null, digest.out)
  assert.equal(Number(theta[1]), Math.max(...rounds), `the latest checkpoint is the newest final round a trainer was told (${rounds.join(', ')})`)
  assert.ok(logged.has(theta[3]), `θ in the final checkpoint (${theta[3]}) is one a trainer logged after an averaged outer step`)

  // compare.py's baselines for the same steps: the swarm's θ beats every trainer alone on its own shard.
  const compare = await run(python, ['examples/diloco-digits/compare.py', '--steps', String(STEPS), '--run', runDir], 180_000)
  assert.equal(compare.code, 0, compare.out)
  assert.match(compare.out, new RegExp(`${TRAINERS} trainers with DiLoCo through the swarm: mean [\\d.]+`), compare.out)
  const alone = /each shard alone: mean [\d.]+, max ([\d.]+)/.exec(compare.out)
  assert.ok(alone !== null, compare.out)
  assert.ok(Number(theta[2]) > Number(alone[1]), `the swarm's θ (${theta[2]}) beats the best shard alone (${alone[1]}):\n${compare.out}`)
})
