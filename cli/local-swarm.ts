#!/usr/bin/env node
// The README's main command: a local swarm from an AveragingSwarm YAML, on this machine, with
// no cluster. Agents run as processes on loopback addresses, configured exactly as the
// operator configures their pods (the same builders make the same env).
import { readFileSync, mkdirSync, writeFileSync, createWriteStream, existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { spawn, type ChildProcess } from 'node:child_process'
import { createServer } from 'node:net'
import { randomUUID } from 'node:crypto'
import { delimiter, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Command } from 'commander'
import { parse } from 'yaml'
import { validateSwarm } from '../api/v1alpha1/validate.js'
import { withDefaults, type AveragingSwarm } from '../api/v1alpha1/index.js'
import { buildDesired } from '../operator/builders/desired.js'
import { ensureIdentityKeys } from '../operator/builders/identity.js'
import { DEFAULT_BUILDER_CONFIG } from '../operator/builders/config.js'
import { loadTensorBackend } from '../agent/tensors/backend.js'
import { LocalModel } from '../agent/workloads/builtin/model.js'
import { makeHeldOut, makeShard } from '../agent/workloads/builtin/synthetic-data.js'
import { describeError } from '../agent/errors.js'
import { expandPods, type LocalPod } from './local/pods.js'
import { startStaticDns } from './local/dns.js'
import { sampleSwarm, type SwarmSample } from './local/progress.js'
import { renderReport, type SoloPoint } from './local/report.js'

class UserError extends Error {}

function loadSwarm (file: string): AveragingSwarm {
  let text: string
  try { text = readFileSync(file, 'utf8') } catch { throw new UserError(`cannot read ${file}`) }
  let obj: unknown
  try { obj = parse(text) } catch (err) { throw new UserError(`${file} is not valid YAML: ${describeError(err).split('\n')[0]}`) }
  const problems = validateSwarm(obj)
  if (problems.length > 0) throw new UserError(`${file} is not a valid AveragingSwarm: ${problems.join('; ')}`)
  const swarm = obj as AveragingSwarm
  // A local uid stands in for the one the API server assigns, so owner references build as in a cluster.
  return { ...swarm, metadata: { namespace: 'default', uid: randomUUID(), ...swarm.metadata }, spec: withDefaults(swarm.spec as never) }
}

async function checkPortFree (ip: string, port: number): Promise<void> {
  await new Promise<void>((resolvePort, reject) => {
    const server = createServer()
    server.once('error', () => { reject(new UserError(`port ${port} on ${ip} is already in use; stop what holds it or change spec.network.port / spec.metrics.port`)) })
    server.listen(port, ip, () => { server.close(() => { resolvePort() }) })
  })
}

/** What a trainer left behind when it exited. */
interface TrainerExit { readonly pod: string, readonly code: number | null, readonly signal: string | null, readonly lastErr: string, readonly lastOut: string }

/** The per-pod folder agent and trainer share as AVS_SHM_DIR: memory-backed where /dev/shm exists, as the pod's emptyDir. */
function makeShmRoot (swarmName: string): string {
  const base = existsSync('/dev/shm') ? '/dev/shm' : tmpdir()
  return mkdtempSync(join(base, `avs-${swarmName}-`))
}

/** The trainer's command line: the spec's command and args, with --python standing in for a bare python/python3. */
function trainerArgv (pod: LocalPod, python: string | undefined): string[] {
  const t = pod.trainer
  if (t === undefined || t.command.length === 0) {
    throw new UserError('workload.trainer.command is required to run a sidecar swarm locally: the trainer image is not used here, so its entrypoint cannot run (e.g. command: ["python3", "trainer.py"])')
  }
  const argv = [...t.command, ...t.args]
  if (python !== undefined && /^python(3(\.\d+)?)?$/.test(argv[0])) argv[0] = python
  return argv
}

/** Last non-empty line of a stream, kept as the stream flows (for a failing trainer's one-line reason). */
function lastLineOf (stream: NodeJS.ReadableStream | null, onLine: (line: string) => void): void {
  let tail = ''
  stream?.on('data', (d: Buffer) => {
    tail = (tail + d.toString()).slice(-4096)
    const lines = tail.split('\n').map(l => l.trim()).filter(l => l.length > 0)
    if (lines.length > 0) onLine(lines[lines.length - 1].slice(0, 300))
  })
}

async function waitReady (pod: LocalPod, metricsPort: number, until: () => boolean): Promise<void> {
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline && !until()) {
    try {
      if ((await fetch(`http://${pod.ip}:${metricsPort}/readyz`, { signal: AbortSignal.timeout(1000) })).ok) return
    } catch { /* not listening yet */ }
    await new Promise(r => setTimeout(r, 250))
  }
}

async function main (): Promise<void> {
  const program = new Command()
    .name('local-swarm')
    .description('Run an AveragingSwarm on this machine: agents (and, for a sidecar swarm, their trainers) as processes on loopback, no cluster.')
    .argument('[file]', 'AveragingSwarm YAML', 'examples/local.yaml')
    .option('-d, --duration <seconds>', 'how long to run before the summary (a sidecar run ends earlier when every trainer has exited)', '60')
    .option('-o, --out <dir>', 'where logs and the report go', 'runs')
    .option('--python <path>', 'interpreter that runs a sidecar trainer whose command is python or python3 (default: the one on PATH, with <repo>/.venv/bin first when it exists)')
    .parse()
  const file = program.args[0] ?? 'examples/local.yaml'
  const opts = program.opts<{ duration: string, out: string, python?: string }>()
  const duration = Number(opts.duration)
  if (!(duration > 0)) throw new UserError(`--duration must be a positive number of seconds, got "${opts.duration}"`)

  const swarm = loadSwarm(file)
  const spec = swarm.spec
  const sidecar = spec.workload.type === 'sidecar'
  const namespace = swarm.metadata.namespace ?? 'default'
  const identity = await ensureIdentityKeys(undefined, spec.bootstrap.replicas)
  const dnsRecords = new Map<string, string>()
  const dns = await startStaticDns(dnsRecords)
  const desired = buildDesired(swarm, {
    config: { ...DEFAULT_BUILDER_CONFIG, agentDnsServers: dns.address }, identityData: identity, podMonitorAvailable: false
  })
  const pods = expandPods(desired.objects, namespace, DEFAULT_BUILDER_CONFIG.clusterDomain)
  for (const pod of pods) dnsRecords.set(pod.hostname, pod.ip)
  const metricsPort = spec.metrics.port
  // Every pod has its own loopback in a cluster; here they share 127.0.0.1, so pod i's agent API
  // (and its trainer) use workload.sidecarPort + i.
  const sidecarPorts = pods.map((_, i) => spec.workload.sidecarPort + i)
  const trainers = sidecar ? pods.filter(p => p.trainer !== undefined) : []
  try {
    if (sidecar) {
      if (trainers.length === 0) throw new UserError('this sidecar swarm has no trainer container (workload.trainer)')
      for (const pod of trainers) trainerArgv(pod, opts.python)
      if (opts.python !== undefined && !existsSync(opts.python)) throw new UserError(`--python ${opts.python} does not exist`)
    }
    for (const pod of pods) { await checkPortFree(pod.ip, spec.network.port); await checkPortFree(pod.ip, metricsPort) }
    if (sidecar) for (const port of sidecarPorts) await checkPortFree('127.0.0.1', port)
  } catch (err) {
    dns.close()
    throw err
  }

  const runDir = resolve(opts.out, `${swarm.metadata.name}-${new Date().toISOString().replace(/[:.]/g, '-')}`)
  mkdirSync(runDir, { recursive: true })
  const repoRoot = fileURLToPath(new URL('../..', import.meta.url))
  const agentMain = fileURLToPath(new URL('../agent/main.js', import.meta.url))
  const shmRoot = sidecar ? makeShmRoot(swarm.metadata.name) : undefined
  console.log(`Starting ${pods.length} agents${sidecar ? ` and ${trainers.length} trainers` : ''} of swarm "${swarm.metadata.name}" from ${file} (logs in ${runDir})`)
  const children: ChildProcess[] = []
  const trainerChildren: ChildProcess[] = []
  const exits: string[] = []
  const trainerExits: TrainerExit[] = []
  let stopping = false
  let wake: () => void = () => {}
  const agentEnvOf = new Map<string, Record<string, string>>()
  pods.forEach((pod, i) => {
    const extra: Record<string, string> = {}
    if (sidecar && shmRoot !== undefined) {
      const shmDir = join(shmRoot, pod.name)
      mkdirSync(shmDir, { recursive: true })
      extra.AVS_SIDECAR_PORT = String(sidecarPorts[i])
      extra.AVS_SHM_DIR = shmDir
    }
    agentEnvOf.set(pod.name, extra)
    const child = spawn(process.execPath, [agentMain], { env: { ...process.env, ...pod.env, ...extra }, stdio: ['ignore', 'pipe', 'pipe'] })
    const log = createWriteStream(join(runDir, `${pod.name}.log`))
    child.stdout?.pipe(log); child.stderr?.pipe(log)
    child.on('exit', (code, signal) => { if (!stopping) { exits.push(`${pod.name} exited (${signal ?? code}); see ${join(runDir, `${pod.name}.log`)}`); wake() } })
    children.push(child)
  })

  if (sidecar) {
    const venvBin = join(repoRoot, '.venv', 'bin')
    const pathFirst = existsSync(venvBin) ? [venvBin] : []
    const first = trainers[0].trainer!
    console.log(`trainers run locally as \`${trainerArgv(trainers[0], opts.python).join(' ')}\` in ${repoRoot}${pathFirst.length > 0 ? ` with ${venvBin} first on PATH` : ''}; the trainer image ${first.image} is not used locally`)
    for (const pod of trainers) {
      const argv = trainerArgv(pod, opts.python)
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        ...pod.trainer!.env,
        ...agentEnvOf.get(pod.name),
        PATH: [...pathFirst, process.env.PATH ?? ''].join(delimiter),
        PYTHONUNBUFFERED: '1'
      }
      const logPath = join(runDir, `${pod.name}.trainer.log`)
      // A pod starts its containers together; starting each trainer once its agent is ready spares
      // the trainer's client the retries (it must still tolerate them in a cluster).
      void waitReady(pod, metricsPort, () => stopping).then(() => {
        if (stopping) return
        const child = spawn(argv[0], argv.slice(1), { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] })
        let lastErr = ''; let lastOut = ''
        lastLineOf(child.stderr, l => { lastErr = l })
        lastLineOf(child.stdout, l => { lastOut = l })
        const log = createWriteStream(logPath)
        child.stdout?.pipe(log); child.stderr?.pipe(log)
        child.on('error', (err) => { lastErr = `cannot start ${argv[0]}: ${err.message}` })
        child.on('close', (code, signal) => {
          if (stopping) return
          trainerExits.push({ pod: pod.name, code, signal, lastErr, lastOut })
          if (code !== 0) console.log(`trainer of ${pod.name} failed (${signal ?? `exit code ${code}`}): ${lastErr !== '' ? lastErr : '(no stderr)'}; see ${logPath}`)
          if (trainerExits.length === trainers.length) wake()
        })
        trainerChildren.push(child)
      })
    }
  }

  const stop = async (list: ChildProcess[]): Promise<void> => {
    await Promise.all(list.map(async c => await new Promise<void>(done => {
      if (c.exitCode !== null || c.signalCode !== null) { done(); return }
      const kill = setTimeout(() => { c.kill('SIGKILL') }, 15_000)
      c.once('exit', () => { clearTimeout(kill); done() })
      c.kill('SIGTERM')
    })))
  }
  const stopAll = async (): Promise<void> => {
    stopping = true
    await stop(trainerChildren)
    await stop(children)
    dns.close()
    if (shmRoot !== undefined) rmSync(shmRoot, { recursive: true, force: true })
  }
  process.once('SIGINT', () => { console.log('\nInterrupted: stopping the agents.'); deadline = 0; wake() })

  // Builtin workload: a single agent alone on shard 0, trained for as many steps as the swarm's agents: the baseline.
  const { tf, name: backend } = await loadTensorBackend()
  const solo = sidecar ? undefined : new LocalModel(tf, 0)
  const soloShard = makeShard(0)
  const heldOut = makeHeldOut(512)
  let soloSteps = 0
  const soloPoints: SoloPoint[] = []
  const samples: SwarmSample[] = []
  const started = Date.now()
  let deadline = started + duration * 1000
  const trainersDone = (): boolean => sidecar && trainerExits.length === trainers.length
  const f = (v: number, d = 3): string => Number.isFinite(v) ? v.toFixed(d) : '-'
  console.log(`tensor backend: ${backend}; metrics on http://<agent ip>:${metricsPort}/metrics, e.g. http://${pods[0].ip}:${metricsPort}/metrics`)
  console.log(sidecar
    ? '   time  ready  rounds  failed  group  trainer-loss  trainers  divergence'
    : '   time  ready  rounds  failed  group  train-loss  held-out  divergence')
  while (Date.now() < deadline && exits.length === 0 && !trainersDone()) {
    await new Promise<void>(r => { const timer = setTimeout(r, 2000); wake = () => { clearTimeout(timer); r() } })
    const t = (Date.now() - started) / 1000
    const s = await sampleSwarm(pods, metricsPort, t)
    samples.push(s)
    if (solo !== undefined && Number.isFinite(s.meanSteps) && s.meanSteps > soloSteps) {
      const steps = Math.round(s.meanSteps - soloSteps)
      solo.train(soloShard, steps)
      soloSteps += steps
      soloPoints.push({ t, heldOutLoss: solo.evaluate(heldOut) })
    }
    const head = `${t.toFixed(0).padStart(6)}s  ${String(s.ready).padStart(2)}/${pods.length}  ${String(s.rounds).padStart(6)}  ${String(s.failures).padStart(6)}  ${f(s.meanGroupSize, 1).padStart(5)}`
    console.log(sidecar
      ? `${head}  ${f(s.meanTrainerLoss, 4).padStart(12)}  ${`${trainerChildren.length - trainerExits.length}/${trainers.length}`.padStart(8)}  ${f(s.meanDivergence, 4).padStart(10)}`
      : `${head}  ${f(s.meanLoss).padStart(10)}  ${f(s.meanHeldOutLoss).padStart(8)}  ${f(s.meanDivergence, 4).padStart(10)}`)
  }
  const ended = exits.length > 0
    ? 'an agent exited'
    : trainersDone() ? 'every trainer exited' : deadline === 0 ? 'interrupted' : `--duration ${duration} s reached`
  // The trainers' last words before they are stopped (a trainer still running is stopped with the swarm).
  await stopAll()
  if (exits.length > 0) throw new UserError(exits[0])
  const last = samples.at(-1)
  const lastSolo = soloPoints.at(-1)
  const lastLoss = [...samples].reverse().find(s => Number.isFinite(s.meanTrainerLoss))
  const failed = trainerExits.filter(e => e.code !== 0)
  const summary: Record<string, string> = {
    agents: String(pods.length),
    ...(sidecar ? { trainers: `${trainers.length} (${trainerExits.length - failed.length} finished, ${failed.length} failed, ${trainers.length - trainerExits.length} stopped at the end)` } : {}),
    'run time': `${((Date.now() - started) / 1000).toFixed(0)} s`,
    'run ended because': ended,
    'rounds completed (all agents)': String(last?.rounds ?? 0),
    'failed rounds': String(last?.failures ?? 0),
    'mean group size': last != null && Number.isFinite(last.meanGroupSize) ? last.meanGroupSize.toFixed(2) : '-',
    ...(sidecar
      ? {
          'trainer loss (last reported, mean)': lastLoss != null ? lastLoss.meanTrainerLoss.toFixed(4) : '- (no trainer reported its loss)',
          'samples reported by the trainers': String(last?.trainerSamples ?? 0)
        }
      : {
          'held-out loss, swarm (mean)': last != null && Number.isFinite(last.meanHeldOutLoss) ? last.meanHeldOutLoss.toFixed(4) : '-',
          'held-out loss, single agent': lastSolo != null ? lastSolo.heldOutLoss.toFixed(4) : '-',
          'training steps per agent': String(Math.round(soloSteps)),
          'tensor backend': backend
        })
  }
  for (const e of trainerExits) {
    summary[`trainer ${e.pod}`] = e.code === 0 ? (e.lastOut !== '' ? e.lastOut : 'finished') : `failed (${e.signal ?? `exit code ${e.code}`}): ${e.lastErr !== '' ? e.lastErr : '(no stderr)'}`
  }
  const reportPath = join(runDir, 'report.html')
  writeFileSync(reportPath, renderReport(swarm.metadata.name, pods.length, samples, soloPoints, summary, sidecar ? 'sidecar' : 'builtin'))
  writeFileSync(join(runDir, 'summary.json'), JSON.stringify({ summary, samples, solo: soloPoints, trainers: trainerExits }, null, 2))
  console.log('\nSummary')
  for (const [k, v] of Object.entries(summary)) console.log(`  ${k.padEnd(34)} ${v}`)
  console.log(`\nReport: ${reportPath}`)
  if (failed.length > 0) {
    process.stderr.write(`local-swarm: ${failed.length} trainer(s) failed; the first, ${failed[0].pod}: ${failed[0].lastErr !== '' ? failed[0].lastErr : `exit ${failed[0].signal ?? failed[0].code}`}\n`)
    process.exitCode = 1
  }
}

main().catch((err) => {
  process.stderr.write(`local-swarm: ${describeError(err)}\n`)
  process.exitCode = 1
})
