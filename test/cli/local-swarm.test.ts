import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, existsSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { AGENT_BUNDLE } from '../../agent/process/agent-process.js'
import { loadNewestCheckpoint } from '../../agent/checkpoint/index.js'

const CLI = fileURLToPath(new URL('../../cli/local-swarm.js', import.meta.url))

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
  const { code, err } = await run(AGENT_BUNDLE, [], { AVS_SWARM: '', AVS_POD_NAME: 'x-0', AVS_PREFIX: 'p', AVS_TARGET_GROUP_SIZE: 'four', AVS_PERIOD: '10 minutes' })
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
  // A rule the API server checks in CEL is checked here too (api/v1alpha1/spec-rules.ts): the sidecar port on the metrics port.
  writeFileSync(join(dir, 'clash.yaml'), swarm('  workload: {sidecarPort: 9400}\n'))
  const clash = await run(CLI, [join(dir, 'clash.yaml')])
  assert.equal(clash.code, 1)
  assert.match(clash.err, /spec\.workload\.sidecarPort: workload\.sidecarPort must differ from network\.port and metrics\.port/)
  // Hold the first pod's metrics port (the runtime gives pods 127.0.0.4 onwards).
  const blocker = createServer()
  await new Promise<void>(resolve => blocker.listen(9400, '127.0.0.4', resolve))
  try {
    writeFileSync(join(dir, 'ok.yaml'), swarm())
    const taken = await run(CLI, [join(dir, 'ok.yaml'), '--duration', '5'])
    assert.equal(taken.code, 1, taken.out + taken.err)
    assert.match(taken.err, /port 9400 on 127\.0\.0\.4 is already in use/)
    for (const r of [broken, unknown, clash, taken]) assert.doesNotMatch(r.err, /\n\s+at /, 'no stack trace')
  } finally {
    blocker.close()
  }
})

test('local runtime: a 4-agent swarm with checkpoints and completion averages, prints progress, ends complete, and leaves its checkpoints and report', { timeout: 180_000 }, async () => {
  writeFileSync(join(dir, 'run.yaml'), swarm('  checkpoint: {every: 2, keep: 2, volume: {claimName: ckpt}}\n  completion: {rounds: 3}\n'))
  const checkpoints = join(dir, 'checkpoints')
  const { code, out, err } = await run(CLI, [join(dir, 'run.yaml'), '--duration', '120', '--out', join(dir, 'runs'), '--checkpoints', checkpoints], {}, 170_000)
  assert.equal(code, 0, err)
  assert.match(out, /time {2}ready {2}rounds/)
  assert.match(out, /run ended because +the run is complete/, out)
  assert.match(out, /newest checkpoint +round 3: \S+\/tiny\/round-3\.json /, out)
  const runDir = join(dir, 'runs', readdirSync(join(dir, 'runs'))[0])
  assert.ok(existsSync(join(runDir, 'report.html')))
  const summary = JSON.parse(readFileSync(join(runDir, 'summary.json'), 'utf8')) as { samples: Array<{ rounds: number, ready: number, completed: number }> }
  const last = summary.samples.at(-1)!
  assert.equal(last.ready, 4, 'every agent became ready')
  assert.equal(last.completed, 4, 'every agent completed the run')
  // Not 4 × 3 rounds: an agent that joined from a donor takes the group's round count and averages fewer itself.
  assert.ok(last.rounds > 0, 'the agents completed averaging rounds')
  assert.match(readFileSync(join(runDir, 'report.html'), 'utf8'), /<svg/)
  // The folder standing in for the claim holds the final checkpoint, which verifies.
  const { checkpoint } = await loadNewestCheckpoint(checkpoints, 'tiny', undefined, { log: () => {} })
  assert.equal(checkpoint?.manifest.round, 3)
  assert.deepEqual(checkpoint.manifest.tensors.map(t => t.name), ['dense1/kernel', 'dense1/bias', 'dense2/kernel', 'dense2/bias'])
})

/** A sidecar swarm whose pods' trainer is `node <dir>/<script>` (the image is not used locally). */
const sidecarSwarm = (name: string, replicas: number, sidecarPort: number, script: string, trainerExtra = ''): string => `apiVersion: averaging.swarm.io/v1alpha1
kind: AveragingSwarm
metadata: {name: ${name}}
spec:
  replicas: ${replicas}
  network: {port: 31337}
  metrics: {port: 9400}
  averaging: {targetGroupSize: 3, minGroupSize: 2, averagingExpiration: 2s, requestTimeout: 1s, allreduceTimeout: 20s}
  bootstrap: {replicas: 1}
  workload:
    type: sidecar
    sidecarPort: ${sidecarPort}
    trainer:
      image: example/unused:1
      command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(join(dir, script))}]${trainerExtra}
`

test('local runtime: SIGTERM stops the run as Ctrl-C does: the agents stop with it and the summary is written', { timeout: 120_000 }, async () => {
  writeFileSync(join(dir, 'term.yaml'), swarm())
  const outDir = join(dir, 'term-runs')
  const child = spawn(process.execPath, [CLI, join(dir, 'term.yaml'), '--duration', '100', '--out', outDir], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''; let err = ''
  child.stderr.on('data', (d: Buffer) => { err += d.toString() })
  const exited = new Promise<number | null>(resolve => { child.on('exit', code => { resolve(code) }) })
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`no agent became ready:\n${out}${err}`)) }, 90_000)
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString()
      if (/^ +\d+s +4\/4 /m.test(out)) { clearTimeout(timer); resolve() }
    })
  })
  child.kill('SIGTERM')
  assert.equal(await exited, 0, out + err)
  assert.match(out, /Stopped \(SIGTERM\): stopping the agents\./)
  assert.match(out, /run ended because +interrupted/)
  const runDir = join(outDir, readdirSync(outDir)[0])
  assert.ok(existsSync(join(runDir, 'summary.json')), 'the summary was written')
  const pids = readdirSync(runDir).filter(f => f.endsWith('.log')).flatMap(f => [...readFileSync(join(runDir, f), 'utf8').matchAll(/--- incarnation \d+ \(pid (\d+)\)/g)].map(m => Number(m[1])))
  assert.equal(pids.length, 4, `one agent process per pod: ${pids.join(', ')}`)
  const running = pids.filter(pid => { try { process.kill(pid, 0); return true } catch { return false } })
  assert.deepEqual(running, [], 'no agent outlives the command')
})

test('local runtime: --faults kills and freezes agents in turn; a killed agent comes back with the swarm\'s state and averages again', { timeout: 150_000 }, async () => {
  writeFileSync(join(dir, 'faults.yaml'), swarm())
  const bad = await run(CLI, [join(dir, 'faults.yaml'), '--faults', 'reboot'])
  assert.equal(bad.code, 1)
  assert.match(bad.err, /--faults takes a list of kill, stop and pod \(e\.g\. kill,stop\), got "reboot"/)
  const { code, out, err } = await run(CLI, [join(dir, 'faults.yaml'), '--duration', '40', '--faults', 'kill,stop', '--fault-every', '5', '--out', join(dir, 'fault-runs')], {}, 140_000)
  assert.equal(code, 0, out + err)
  assert.match(out, /run ended because +--duration 40 s reached/, 'no agent exit ended the run')
  const injected = /faults injected +(\d+): (\d+) agents killed and started again, (\d+) frozen/.exec(out)
  assert.ok(injected !== null && Number(injected[2]) >= 3 && Number(injected[3]) >= 3, out)
  // The first kill (the second fault, 10 s in): its agent's new process loads the swarm's state and averages with the others.
  const victim = /fault: (\S+)'s agent killed \(SIGKILL\); a new process in 1 s\n/.exec(out)
  assert.ok(victim !== null, out)
  const runDir = join(dir, 'fault-runs', readdirSync(join(dir, 'fault-runs'))[0])
  const log = readFileSync(join(runDir, `${victim[1]}.log`), 'utf8')
  const second = log.split('--- incarnation 2 ')[1]
  assert.ok(second !== undefined, `${victim[1]} was started again:\n${log}`)
  assert.match(second, /loaded the swarm state from a peer/)
  assert.match(second, /"msg":"averaged"/)
  const summary = JSON.parse(readFileSync(join(runDir, 'summary.json'), 'utf8')) as { samples: Array<{ ready: number }> }
  assert.ok(summary.samples.some(s => s.ready === 4), 'all four agents ready at some sample')
})

test('local runtime: --faults pod kills a sidecar pod\'s agent and trainer and starts both again; the new trainer averages with the others', { timeout: 150_000 }, async () => {
  writeFileSync(join(dir, 'looping-trainer.mjs'), LOOPING_TRAINER)
  writeFileSync(join(dir, 'pods.yaml'), sidecarSwarm('pods', 3, 19501, 'looping-trainer.mjs'))
  const { code, out, err } = await run(CLI, [join(dir, 'pods.yaml'), '--duration', '40', '--faults', 'pod', '--fault-every', '12', '--out', join(dir, 'pod-runs')], {}, 140_000)
  assert.equal(code, 0, out + err)
  assert.match(out, /run ended because +--duration 40 s reached/, 'no agent exit ended the run')
  assert.match(out, /faults injected +\d+: 0 agents killed and started again, 0 frozen, \d+ pods killed and started again \(agent and trainer\)/)
  const victim = /fault: (\S+) lost \(agent and trainer SIGKILLed\); both start again in 1 s\n/.exec(out)
  assert.ok(victim !== null, out)
  const runDir = join(dir, 'pod-runs', readdirSync(join(dir, 'pod-runs'))[0])
  // The trainer's log holds both incarnations; the second registered (its client waited for the new agent) and averaged.
  const second = readFileSync(join(runDir, `${victim[1]}.trainer.log`), 'utf8').split('trainer started\n')
  assert.equal(second.length >= 3, true, `${victim[1]}'s trainer started twice:\n${second.join('|')}`)
  assert.match(second[2], /step \d+ averaged=true/, `the restarted trainer averaged:\n${second[2]}`)
  assert.doesNotMatch(out, /trainer of \S+ failed/, 'a killed trainer is not reported as failed')
})

// A trainer that steps until it is stopped, announcing each start; it waits for its agent's API as the Python client
// does (a pod starts agent and trainer together).
const LOOPING_TRAINER = `
const base = 'http://127.0.0.1:' + process.env.AVS_SIDECAR_PORT
const call = async (path, body) => {
  const r = await fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  return await r.json()
}
console.log('trainer started')
for (;;) {
  try { await call('/v1/register', { tensors: [{ name: 'w', shape: [4] }] }); break } catch { await new Promise(r => setTimeout(r, 200)) }
}
const enc = a => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64')
const w = new Float32Array(4).fill(1)
for (let i = 0; ; i++) {
  const r = await call('/v1/step', { tensors: { w: enc(w) }, weight: 1, timeout: 5 }).catch(async err => { await new Promise(r => setTimeout(r, 200)); return { averaged: false, error: err.message } })
  console.log('step ' + i + ' averaged=' + r.averaged)
}
`

// A tiny trainer for the sidecar runs: it pulls a 4-value "model" towards its own target (its
// shard), averages through its agent every step, reports its loss, and exits after 6 steps. The
// trainer of pod -agent-2 fails at once with one line on stderr, as a broken trainer would.
const TRAINER = `
const port = process.env.AVS_SIDECAR_PORT
const pod = process.env.AVS_POD_NAME ?? ''
if (process.env.AVS_SHM_DIR === undefined) { console.error('no AVS_SHM_DIR'); process.exit(4) }
if (pod.endsWith('-agent-2')) { console.error('trainer boom: cannot load the data shard'); process.exit(3) }
const base = 'http://127.0.0.1:' + port
const call = async (path, body) => {
  const r = await fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  return r.status === 204 ? {} : await r.json()
}
const target = pod.length % 7
let w = new Float32Array(4).fill(target)
const enc = a => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64')
const dec = s => { const b = Buffer.from(s, 'base64'); return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4).slice() }
await call('/v1/register', { tensors: [{ name: 'w', shape: [4] }] })
let averaged = 0
for (let i = 0; i < 6; i++) {
  const r = await call('/v1/step', { tensors: { w: enc(w) }, weight: 1, timeout: 5 })
  if (r.averaged) { averaged++; w = dec(r.tensors.w) }
  const loss = w.reduce((s, v) => s + (v - target) ** 2, 0) / 4 + 0.5
  const rep = await fetch(base + '/v1/report', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ loss, samples: 10 }) })
  if (rep.status !== 204) { console.error('report answered ' + rep.status); process.exit(5) }
  console.log('step ' + i + ' averaged=' + r.averaged + ' loss=' + loss.toFixed(4))
}
console.log('trainer done: ' + averaged + ' averaged rounds')
`

test('local runtime: a sidecar swarm runs each pod trainer, averages, shows the trainers loss, and reports a failing trainer', { timeout: 180_000 }, async () => {
  writeFileSync(join(dir, 'trainer.mjs'), TRAINER)
  writeFileSync(join(dir, 'sidecar.yaml'), sidecarSwarm('side', 4, 19401, 'trainer.mjs', `
      env:
        - {name: AVS_POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}`))
  const { code, out, err } = await run(CLI, [join(dir, 'sidecar.yaml'), '--duration', '90', '--out', join(dir, 'side-runs')], {}, 170_000)
  assert.equal(code, 1, 'a failed trainer makes the run fail\n' + out + err)
  assert.match(out, /the trainer image example\/unused:1 is not used locally/)
  assert.match(out, /trainer of side-agent-2 failed \(exit code 3\): trainer boom: cannot load the data shard/)
  assert.match(err, /trainer boom: cannot load the data shard/)
  assert.match(out, /run ended because\s+every trainer exited/)
  assert.match(out, /trainer-loss/)
  const runDir = join(dir, 'side-runs', readdirSync(join(dir, 'side-runs'))[0])
  for (const pod of ['side-bootstrap-0-0', 'side-agent-0', 'side-agent-1']) {
    const log = readFileSync(join(runDir, `${pod}.trainer.log`), 'utf8')
    assert.match(log, /trainer done: [1-6] averaged rounds/, `${pod} averaged:\n${log}`)
  }
  const summary = JSON.parse(readFileSync(join(runDir, 'summary.json'), 'utf8')) as { samples: Array<{ rounds: number, meanTrainerLoss: number | null }> }
  assert.ok(summary.samples.at(-1)!.rounds > 0, 'the agents completed averaging rounds')
  const html = readFileSync(join(runDir, 'report.html'), 'utf8')
  assert.match(html, /Training loss the trainers report/)
  assert.ok(summary.samples.some(s => s.meanTrainerLoss != null && s.meanTrainerLoss >= 0.5), 'the loss the trainers reported reached the progress samples')
  assert.doesNotMatch(html, /No trainer reported its loss/)
  assert.match(out, /trainer loss \(last reported, mean\)\s+\d/)
})
