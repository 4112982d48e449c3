import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, existsSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const CLI = fileURLToPath(new URL('../../cli/local-swarm.js', import.meta.url))
const AGENT = fileURLToPath(new URL('../../agent/main.js', import.meta.url))

async function run (file: string, args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 120_000): Promise<{ code: number | null, out: string, err: string }> {
  return await new Promise((resolve) => {
    const child = spawn(process.execPath, [file, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''; let err = ''
    child.stdout.on('data', (d: Buffer) => { out += d.toString() })
    child.stderr.on('data', (d: Buffer) => { err += d.toString() })
    const timer = setTimeout(() => { child.kill('SIGKILL') }, timeoutMs)
    child.on('exit', (code) => { clearTimeout(timer); resolve({ code, out, err }) })
  })
}

const dir = mkdtempSync(join(tmpdir(), 'avs-cli-'))
const swarm = (extra = ''): string => `apiVersion: averaging.swarm.io/v1alpha1
kind: AveragingSwarm
metadata: {name: tiny}
spec:
  replicas: 4
  network: {port: 31337}
  metrics: {port: 9400}
  averaging: {targetGroupSize: 4, minGroupSize: 2, averagingExpiration: 3s, requestTimeout: 1s, allreduceTimeout: 20s, period: 4s}
  bootstrap: {replicas: 1}
${extra}`

test('the agent rejects bad environment values with one sentence each and no stack trace', async () => {
  const { code, err } = await run(AGENT, [], { AVS_SWARM: '', AVS_POD_NAME: 'x-0', AVS_PREFIX: 'p', AVS_TARGET_GROUP_SIZE: 'four', AVS_PERIOD: '10 minutes' })
  assert.equal(code, 2)
  assert.match(err, /AVS_SWARM is required/)
  assert.match(err, /AVS_TARGET_GROUP_SIZE: "four" is not an integer/)
  assert.match(err, /AVS_PERIOD: "10 minutes" is not a duration/)
  assert.doesNotMatch(err, /\n\s+at /, 'no stack trace')
})

test('local runtime: malformed YAML, an unknown field and a taken port each end with one clear sentence', async () => {
  writeFileSync(join(dir, 'broken.yaml'), 'spec: [unclosed')
  const broken = await run(CLI, [join(dir, 'broken.yaml')])
  assert.equal(broken.code, 1)
  assert.match(broken.err, /is not valid YAML/)
  writeFileSync(join(dir, 'unknown.yaml'), swarm('  colour: blue\n'))
  const unknown = await run(CLI, [join(dir, 'unknown.yaml')])
  assert.equal(unknown.code, 1)
  assert.match(unknown.err, /spec has an unknown field "colour"/)
  // Hold the first pod's metrics port (the runtime gives pods 127.0.0.4 onwards).
  const blocker = createServer()
  await new Promise<void>(resolve => blocker.listen(9400, '127.0.0.4', resolve))
  try {
    writeFileSync(join(dir, 'ok.yaml'), swarm())
    const taken = await run(CLI, [join(dir, 'ok.yaml'), '--duration', '5'])
    assert.equal(taken.code, 1, taken.out + taken.err)
    assert.match(taken.err, /port 9400 on 127\.0\.0\.4 is already in use/)
    for (const r of [broken, unknown, taken]) assert.doesNotMatch(r.err, /\n\s+at /, 'no stack trace')
  } finally {
    blocker.close()
  }
})

test('local runtime: a 4-agent swarm averages, prints progress and writes its report', { timeout: 180_000 }, async () => {
  writeFileSync(join(dir, 'run.yaml'), swarm())
  const { code, out, err } = await run(CLI, [join(dir, 'run.yaml'), '--duration', '25', '--out', join(dir, 'runs')], {}, 170_000)
  assert.equal(code, 0, err)
  assert.match(out, /time {2}ready {2}rounds/)
  const runDir = join(dir, 'runs', readdirSync(join(dir, 'runs'))[0])
  assert.ok(existsSync(join(runDir, 'report.html')))
  const summary = JSON.parse(readFileSync(join(runDir, 'summary.json'), 'utf8')) as { samples: Array<{ rounds: number, ready: number }> }
  const last = summary.samples.at(-1)!
  assert.equal(last.ready, 4, 'every agent became ready')
  assert.ok(last.rounds > 0, 'the agents completed averaging rounds')
  assert.match(readFileSync(join(runDir, 'report.html'), 'utf8'), /<svg/)
})
