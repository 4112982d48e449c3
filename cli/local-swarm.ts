#!/usr/bin/env node
// The README's main command: a local swarm from an AveragingSwarm YAML, on this machine, with
// no cluster. Agents run as processes on loopback addresses, configured exactly as the
// operator configures their pods (the same builders make the same env).
import { readFileSync, mkdirSync, writeFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import type { ChildProcess } from 'node:child_process'
import { createServer } from 'node:net'
import { randomUUID } from 'node:crypto'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Command } from 'commander'
import { parse } from 'yaml'
import { validateSwarm } from '../api/v1alpha1/validate.js'
import { withDefaults, type AveragingSwarm, type AveragingSwarmSpec } from '../api/v1alpha1/index.js'
import { buildDesired } from '../operator/builders/desired.js'
import { checkpointLocation } from '../operator/builders/checkpoint-store.js'
import { ensureIdentityKeys } from '../operator/builders/identity.js'
import { DEFAULT_BUILDER_CONFIG } from '../operator/builders/config.js'
import { loadTensorBackend } from '../agent/tensors/backend.js'
import { LocalModel } from '../agent/workloads/builtin/model.js'
import { makeHeldOut, makeShard } from '../agent/workloads/builtin/synthetic-data.js'
import { describeError } from '../agent/errors.js'
import { AgentProcess, agentEnv, stopAgents } from '../agent/process/agent-process.js'
import { AGENT_ENV } from '../api/agent-env.js'
import { expandPods, writeMembersMount, type LocalPod } from './local/pods.js'
import { startStaticDns } from './local/dns.js'
import { sampleSwarm, type SwarmSample } from './local/progress.js'
import { renderReport, type SoloPoint } from './local/report.js'
import { startTrainers, stopTrainers, trainerArgv, type TrainerExit, type Trainers } from './local/trainers.js'
import { UserError } from './local/user-error.js'
import { FaultInjector, parseFaultPlan, type FaultPlan } from './local/faults.js'

interface LocalSwarmOptions { readonly file: string, readonly duration: number, readonly out: string, readonly checkpoints: string, readonly python?: string, readonly faults?: FaultPlan }

function parseOptions (): LocalSwarmOptions {
  const program = new Command()
    .name('local-swarm')
    .description('Run an AveragingSwarm on this machine: agents (and, for a sidecar swarm, their trainers) as processes on loopback, no cluster.')
    .argument('[file]', 'AveragingSwarm YAML', 'examples/local.yaml')
    .option('-d, --duration <seconds>', 'how long to run before the summary (a sidecar run ends earlier when every trainer has exited)', '60')
    .option('-o, --out <dir>', 'where logs and the report go', 'runs')
    .option('--checkpoints <dir>', 'the folder that stands in for spec.checkpoint.volume (checkpoints go to <dir>/<swarm>/; a later run of the same swarm resumes from them)', 'runs/checkpoints')
    .option('--python <path>', 'interpreter that runs a sidecar trainer whose command is python or python3 (default: the one on PATH, with <repo>/.venv/bin first when it exists)')
    .option('--faults <kinds>', 'inject faults while the swarm runs, taking turns: kill (SIGKILL an agent, start it again 1 s later as the kubelet restarts a crashed container; its trainer runs on), stop (SIGSTOP an agent for 5 s) and pod (SIGKILL agent and trainer, both started again 1 s later: a pod lost and recreated), e.g. kill,stop,pod')
    .option('--fault-every <seconds>', 'one fault every this many seconds, with --faults', '15')
    .parse()
  const opts = program.opts<{ duration: string, out: string, checkpoints: string, python?: string, faults?: string, faultEvery: string }>()
  const duration = Number(opts.duration)
  if (!(duration > 0)) throw new UserError(`--duration must be a positive number of seconds, got "${opts.duration}"`)
  const faults = opts.faults === undefined ? undefined : parseFaultPlan(opts.faults, opts.faultEvery)
  return { file: program.args[0] ?? 'examples/local.yaml', duration, out: opts.out, checkpoints: resolve(opts.checkpoints), python: opts.python, faults }
}

function loadSwarm (file: string): AveragingSwarm {
  let text: string
  try { text = readFileSync(file, 'utf8') } catch { throw new UserError(`cannot read ${file}`) }
  let obj: unknown
  try { obj = parse(text) } catch (err) { throw new UserError(`${file} is not valid YAML: ${describeError(err).split('\n')[0]}`) }
  const problems = validateSwarm(obj)
  if (problems.length > 0) throw new UserError(`${file} is not a valid AveragingSwarm: ${problems.join('; ')}`)
  const swarm = obj as AveragingSwarm
  // A local uid stands in for the one the API server assigns, so owner references build as in a cluster.
  // The run starts now, as the API server's creationTimestamp says in a cluster (spec.completion.duration counts from it).
  return { ...swarm, metadata: { namespace: 'default', uid: randomUUID(), creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z'), ...swarm.metadata }, spec: withDefaults(swarm.spec as never) }
}

async function checkPortFree (ip: string, port: number): Promise<void> {
  await new Promise<void>((resolvePort, reject) => {
    const server = createServer()
    server.once('error', () => { reject(new UserError(`port ${port} on ${ip} is already in use; stop what holds it or change spec.network.port / spec.metrics.port`)) })
    server.listen(port, ip, () => { server.close(() => { resolvePort() }) })
  })
}

/** The per-pod folder agent and trainer share as AVS_SHM_DIR: memory-backed where /dev/shm exists, as the pod's emptyDir. */
function makeShmRoot (swarmName: string): string {
  const base = existsSync('/dev/shm') ? '/dev/shm' : tmpdir()
  return mkdtempSync(join(base, `avs-${swarmName}-`))
}

function makeDir (dir: string): string {
  mkdirSync(dir, { recursive: true })
  return dir
}

/** The swarm as the operator would build it, placed on loopback, with its DNS running and its ports checked. */
interface SwarmPlan {
  readonly swarm: AveragingSwarm
  readonly spec: AveragingSwarmSpec
  readonly sidecar: boolean
  readonly pods: readonly LocalPod[]
  readonly trainers: readonly LocalPod[]
  /** Every pod has its own loopback in a cluster; here they share 127.0.0.1, so pod i's agent API (and its trainer) use workload.sidecarPort + i. */
  readonly sidecarPorts: readonly number[]
  readonly metricsPort: number
  readonly dns: { readonly address: string, close: () => void }
}

async function planSwarm (opts: LocalSwarmOptions): Promise<SwarmPlan> {
  const swarm = loadSwarm(opts.file)
  const spec = swarm.spec
  const sidecar = spec.workload.type === 'sidecar'
  const identity = await ensureIdentityKeys(undefined, spec.bootstrap.replicas)
  const dnsRecords = new Map<string, string>()
  const dns = await startStaticDns(dnsRecords)
  const desired = buildDesired(swarm, {
    config: { ...DEFAULT_BUILDER_CONFIG, agentDnsServers: dns.address }, identityData: identity, podMonitorAvailable: false
  })
  const pods = expandPods(desired.objects, swarm.metadata.namespace ?? 'default', DEFAULT_BUILDER_CONFIG.clusterDomain)
  for (const pod of pods) dnsRecords.set(pod.hostname, pod.ip)
  const plan: SwarmPlan = {
    swarm, spec, sidecar, pods, dns,
    trainers: sidecar ? pods.filter(p => p.trainer !== undefined) : [],
    sidecarPorts: pods.map((_, i) => spec.workload.sidecarPort + i),
    metricsPort: spec.metrics.port
  }
  try {
    await checkPlan(plan, opts.python)
  } catch (err) {
    dns.close()
    throw err
  }
  return plan
}

/** Fails before anything starts: a sidecar swarm without a runnable trainer, or a port already taken. */
async function checkPlan (plan: SwarmPlan, python: string | undefined): Promise<void> {
  if (plan.sidecar) {
    if (plan.trainers.length === 0) throw new UserError('this sidecar swarm has no trainer container (workload.trainer)')
    for (const pod of plan.trainers) trainerArgv(pod, python)
    if (python !== undefined && !existsSync(python)) throw new UserError(`--python ${python} does not exist`)
  }
  for (const pod of plan.pods) { await checkPortFree(pod.ip, plan.spec.network.port); await checkPortFree(pod.ip, plan.metricsPort) }
  if (plan.sidecar) for (const port of plan.sidecarPorts) await checkPortFree('127.0.0.1', port)
}

/** The swarm's processes as they run, and what ended on its own. */
interface RunningSwarm {
  readonly runDir: string
  readonly agents: readonly AgentProcess[]
  readonly trainerChildren: readonly ChildProcess[]
  /** The sidecar swarm's trainers (undefined for a builtin swarm). */
  readonly trainerControl?: Trainers
  /** One line for each agent that exited on its own. */
  readonly exits: string[]
  readonly trainerExits: TrainerExit[]
  /** POST /v1/finish calls under way for trainers that exited 0 (spec.completion.onTrainerExit). */
  readonly finishing: Array<Promise<void>>
  interrupted: boolean
  /** --faults: what was injected. */
  faults?: FaultInjector
  /** Wakes the watch loop early (an exit or an interrupt). */
  wake: () => void
  stop: () => Promise<void>
  /** The folder standing in for the checkpoint volume, when the swarm has spec.checkpoint. */
  checkpointDir?: string
}

function startSwarm (plan: SwarmPlan, opts: LocalSwarmOptions): RunningSwarm {
  const { swarm, pods, sidecar, trainers } = plan
  const runDir = resolve(opts.out, `${swarm.metadata.name}-${new Date().toISOString().replace(/[:.]/g, '-')}`)
  mkdirSync(runDir, { recursive: true })
  const shmRoot = sidecar ? makeShmRoot(swarm.metadata.name) : undefined
  console.log(`Starting ${pods.length} agents${sidecar ? ` and ${trainers.length} trainers` : ''} of swarm "${swarm.metadata.name}" from ${opts.file} (logs in ${runDir})`)
  let stopping = false
  const agentEnvOf = new Map<string, Record<string, string>>()
  const run: RunningSwarm = {
    runDir, agents: [], trainerChildren: [], exits: [], trainerExits: [], finishing: [], interrupted: false, wake: () => {},
    stop: async () => {
      stopping = true
      run.faults?.stop()
      await stopTrainers(run.trainerChildren)
      // As the kubelet does: SIGTERM, then SIGKILL after the pod's grace period (Kubernetes' 30 s when the
      // spec sets none), the time the agents were told (AVS_TERMINATION_GRACE_SECONDS) to hand a round off by.
      await stopAgents(run.agents, (swarm.spec.podTemplate?.terminationGracePeriodSeconds ?? 30) * 1000)
      plan.dns.close()
      if (shmRoot !== undefined) rmSync(shmRoot, { recursive: true, force: true })
    }
  }
  // The checkpoint volume of a cluster is a folder of this machine, shared by the agents as the volume is.
  const checkpointDir = pods.some(p => p.env[AGENT_ENV.checkpointDir.name] !== undefined) ? makeDir(opts.checkpoints) : undefined
  if (checkpointDir !== undefined) console.log(`Checkpoints go to ${join(checkpointDir, swarm.metadata.name)}`)
  run.checkpointDir = checkpointDir
  // The members ConfigMap as its mount would hold it: a folder of this machine for every agent.
  const membersDir = pods.some(p => p.env[AGENT_ENV.membersDir.name] !== undefined) ? writeMembersMount(join(runDir, 'members'), swarm) : undefined
  const agents = pods.map((pod, i) => {
    const extra = {
      ...(pod.env[AGENT_ENV.membersDir.name] === undefined ? {} : agentEnv({ membersDir })),
      ...(shmRoot === undefined ? {} : agentEnv({ sidecarPort: plan.sidecarPorts[i], shmDir: makeDir(join(shmRoot, pod.name)) })),
      ...(pod.env[AGENT_ENV.checkpointDir.name] === undefined ? {} : agentEnv({ checkpointDir }))
    }
    agentEnvOf.set(pod.name, extra)
    const agent = new AgentProcess({
      name: pod.name, env: { ...pod.env, ...extra }, logDir: runDir,
      onExit: (code, signal) => {
        if (stopping || run.faults?.tookExit(agent) === true) return
        run.exits.push(`${pod.name} exited (${signal ?? code}); see ${agent.logPath}`)
        run.wake()
      }
    })
    agent.start()
    return agent
  })
  const trainerControl = !sidecar
    ? undefined
    : startTrainers({
      trainers, python: opts.python, repoRoot: fileURLToPath(new URL('../..', import.meta.url)), runDir, metricsPort: plan.metricsPort, agentEnvOf, stopping: () => stopping,
      onExit: (exit, logPath) => {
        run.trainerExits.push(exit)
        // A kubelet cannot tell the agent its trainer exited 0 (the Python client's finish() does);
        // here the runtime can, so a trainer that just returns ends its agent's run as well.
        const i = pods.findIndex(p => p.name === exit.pod)
        if (exit.code === 0 && i >= 0 && pods[i].env[AGENT_ENV.completionOnTrainerExit.name] === 'true') run.finishing.push(finishAgent(plan.sidecarPorts[i], exit.pod))
        if (exit.code !== 0) console.log(`trainer of ${exit.pod} failed (${exit.signal ?? `exit code ${exit.code}`}): ${exit.lastErr !== '' ? exit.lastErr : '(no stderr)'}; see ${logPath}`)
        if (run.trainerExits.length === trainers.length) run.wake()
      }
    })
  if (opts.faults !== undefined) {
    run.faults = new FaultInjector(agents, opts.faults, trainerControl, line => { console.log(line) })
    run.faults.start()
    console.log(`Faults: ${opts.faults.kinds.join(', ')} in turn, one every ${opts.faults.everyMs / 1000} s`)
  }
  return Object.assign(run, { agents, trainerChildren: trainerControl?.children ?? [], trainerControl })
}

/** POST /v1/finish to a pod's agent (idempotent: a trainer that called finish() itself gets the same answer). */
async function finishAgent (port: number, pod: string): Promise<void> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/v1/finish`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
    if (!res.ok) console.log(`the agent of ${pod} did not take its trainer's exit as the end of its run: ${res.status} ${await res.text()}`)
  } catch (err) {
    console.log(`the agent of ${pod} could not be told that its trainer finished: ${(err as Error).message}`)
  }
}

/** What the watch loop saw, sample by sample, with the single-agent baseline of a builtin swarm. */
interface Watched {
  readonly samples: SwarmSample[]
  readonly soloPoints: SoloPoint[]
  readonly soloSteps: number
  readonly backend: string
  readonly started: number
  readonly ended: string
}

async function watchSwarm (plan: SwarmPlan, run: RunningSwarm, duration: number): Promise<Watched> {
  const { pods, sidecar, trainers, metricsPort } = plan
  // Builtin workload: a single agent alone on shard 0, trained for as many steps as the swarm's agents: the baseline.
  const { tf, name: backend } = await loadTensorBackend()
  const solo = sidecar ? undefined : new LocalModel(tf, 0)
  const soloShard = makeShard(0)
  const heldOut = makeHeldOut(512)
  let soloSteps = 0
  const soloPoints: SoloPoint[] = []
  const samples: SwarmSample[] = []
  const started = Date.now()
  const deadline = started + duration * 1000
  const trainersDone = (): boolean => sidecar && run.trainerExits.length === trainers.length
  const f = (v: number, d = 3): string => Number.isFinite(v) ? v.toFixed(d) : '-'
  console.log(`tensor backend: ${backend}; metrics on http://<agent ip>:${metricsPort}/metrics, e.g. http://${pods[0].ip}:${metricsPort}/metrics`)
  console.log(sidecar
    ? '   time  ready  rounds  failed  group  trainer-loss  trainers  divergence'
    : '   time  ready  rounds  failed  group  train-loss  held-out  divergence')
  const complete = (): boolean => samples.at(-1)?.completed === pods.length
  while (Date.now() < deadline && !run.interrupted && run.exits.length === 0 && !trainersDone() && !complete()) {
    await new Promise<void>(r => { const timer = setTimeout(r, 2000); run.wake = () => { clearTimeout(timer); r() } })
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
      ? `${head}  ${f(s.meanTrainerLoss, 4).padStart(12)}  ${`${run.trainerChildren.length - run.trainerExits.length}/${trainers.length}`.padStart(8)}  ${f(s.meanDivergence, 4).padStart(10)}`
      : `${head}  ${f(s.meanLoss).padStart(10)}  ${f(s.meanHeldOutLoss).padStart(8)}  ${f(s.meanDivergence, 4).padStart(10)}`)
  }
  if (complete() && sidecar && !trainersDone()) {
    // A complete run's trainers are on their way out (finish() answered): let them end by themselves.
    const until = Date.now() + 15_000
    while (!trainersDone() && Date.now() < until) await new Promise<void>(r => { const timer = setTimeout(r, 250); run.wake = () => { clearTimeout(timer); r() } })
  }
  if (trainersDone() && run.finishing.length > 0) {
    // Their agents answer once the final checkpoint is durable: the last sample shows them complete.
    await Promise.all(run.finishing)
    samples.push(await sampleSwarm(pods, metricsPort, (Date.now() - started) / 1000))
  }
  const ended = run.exits.length > 0
    ? 'an agent exited'
    : trainersDone() ? (complete() ? 'every trainer finished and the run is complete (spec.completion.onTrainerExit)' : 'every trainer exited') : complete() ? 'the run is complete (spec.completion)' : run.interrupted ? 'interrupted' : `--duration ${duration} s reached`
  return { samples, soloPoints, soloSteps, backend, started, ended }
}

/** The run's summary as labelled lines: what the console, the report and summary.json show. */
function summarize (plan: SwarmPlan, run: RunningSwarm, w: Watched): Record<string, string> {
  const { pods, sidecar, trainers } = plan
  const last = w.samples.at(-1)
  const lastSolo = w.soloPoints.at(-1)
  const lastLoss = [...w.samples].reverse().find(s => Number.isFinite(s.meanTrainerLoss))
  const failed = run.trainerExits.filter(e => e.code !== 0)
  const summary: Record<string, string> = {
    agents: String(pods.length),
    ...(sidecar ? { trainers: `${trainers.length} (${run.trainerExits.length - failed.length} finished, ${failed.length} failed, ${trainers.length - run.trainerExits.length} stopped at the end)` } : {}),
    'run time': `${((Date.now() - w.started) / 1000).toFixed(0)} s`,
    'run ended because': w.ended,
    'rounds completed (all agents)': String(last?.rounds ?? 0),
    'failed rounds': String(last?.failures ?? 0),
    'rounds carrying changes (delta)': String(last?.deltaRounds ?? 0),
    ...(sidecar ? { 'rounds averaging pseudo-gradients (DiLoCo)': String(last?.pseudoGradientRounds ?? 0) } : {}),
    'all-reduce bytes sent (all agents)': last != null ? `${(last.bytesSent / 2 ** 20).toFixed(1)} MiB` : '-',
    'mean group size': last != null && Number.isFinite(last.meanGroupSize) ? last.meanGroupSize.toFixed(2) : '-',
    ...(sidecar
      ? {
          'trainer loss (last reported, mean)': lastLoss != null ? lastLoss.meanTrainerLoss.toFixed(4) : '- (no trainer reported its loss)',
          'samples reported by the trainers': String(last?.trainerSamples ?? 0)
        }
      : {
          'held-out loss, swarm (mean)': last != null && Number.isFinite(last.meanHeldOutLoss) ? last.meanHeldOutLoss.toFixed(4) : '-',
          'held-out loss, single agent': lastSolo != null ? lastSolo.heldOutLoss.toFixed(4) : '-',
          'training steps per agent': String(Math.round(w.soloSteps)),
          'tensor backend': w.backend
        })
  }
  const checkpointed = [...w.samples].reverse().find(s => Number.isFinite(s.checkpointRound))
  if (checkpointed !== undefined) {
    const where = checkpointLocation(plan.swarm, checkpointed.checkpointRound) ?? ''
    // A claim is a folder here (--checkpoints); a bucket is the bucket.
    summary['newest checkpoint'] = `round ${checkpointed.checkpointRound}: ${where.startsWith('s3://') ? where : join(run.checkpointDir ?? '', plan.swarm.metadata.name, `round-${checkpointed.checkpointRound}.json`)} (load it: safetensors.torch.load_file on the round-*.safetensors it names, README "Checkpoints")`
  }
  if (run.faults !== undefined) {
    const count = (kind: string): number => run.faults!.injected.filter(f => f.kind === kind).length
    summary['faults injected'] = `${run.faults.injected.length}: ${count('kill')} agents killed and started again, ${count('stop')} frozen${count('pod') > 0 ? `, ${count('pod')} pods killed and started again (agent and trainer)` : ''}`
    if (sidecar) summary['trainers that waited out their agent'] = `${trainerReconnects(run.runDir, trainers)} times (the trainer's client registered again with the new agent)`
  }
  for (const e of run.trainerExits) {
    summary[`trainer ${e.pod}`] = e.code === 0 ? (e.lastOut !== '' ? e.lastOut : 'finished') : `failed (${e.signal ?? `exit code ${e.code}`}): ${e.lastErr !== '' ? e.lastErr : '(no stderr)'}`
  }
  return summary
}

/** How often the trainers' clients found their agent restarted and registered again (their logs say so). */
function trainerReconnects (runDir: string, trainers: readonly LocalPod[]): number {
  let n = 0
  for (const pod of trainers) {
    const path = join(runDir, `${pod.name}.trainer.log`)
    if (existsSync(path)) n += readFileSync(path, 'utf8').split('\n').filter(l => l.includes('the agent is back after')).length
  }
  return n
}

/** Writes report.html and summary.json, prints the summary, and fails the command when a trainer failed. */
function report (plan: SwarmPlan, run: RunningSwarm, w: Watched): void {
  const summary = summarize(plan, run, w)
  const reportPath = join(run.runDir, 'report.html')
  writeFileSync(reportPath, renderReport(plan.swarm.metadata.name, plan.pods.length, w.samples, w.soloPoints, summary, plan.sidecar ? 'sidecar' : 'builtin'))
  writeFileSync(join(run.runDir, 'summary.json'), JSON.stringify({ summary, samples: w.samples, solo: w.soloPoints, trainers: run.trainerExits }, null, 2))
  console.log('\nSummary')
  for (const [k, v] of Object.entries(summary)) console.log(`  ${k.padEnd(34)} ${v}`)
  console.log(`\nReport: ${reportPath}`)
  const failed = run.trainerExits.filter(e => e.code !== 0)
  if (failed.length > 0) {
    process.stderr.write(`local-swarm: ${failed.length} trainer(s) failed; the first, ${failed[0].pod}: ${failed[0].lastErr !== '' ? failed[0].lastErr : `exit ${failed[0].signal ?? failed[0].code}`}\n`)
    process.exitCode = 1
  }
}

async function main (): Promise<void> {
  const opts = parseOptions()
  const plan = await planSwarm(opts)
  const run = startSwarm(plan, opts)
  // SIGTERM as Ctrl-C (a process manager, `timeout`, `kill`): otherwise node dies at once and the agents and
  // trainers it started run on, holding their ports.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => { console.log(`\n${signal === 'SIGINT' ? 'Interrupted' : 'Stopped (SIGTERM)'}: stopping the agents.`); run.interrupted = true; run.wake() })
  }
  const watched = await watchSwarm(plan, run, opts.duration)
  // A trainer still running is stopped with the swarm.
  await run.stop()
  if (run.exits.length > 0) throw new UserError(run.exits[0])
  report(plan, run, watched)
}

main().catch((err) => {
  process.stderr.write(`local-swarm: ${describeError(err)}\n`)
  process.exitCode = 1
})
