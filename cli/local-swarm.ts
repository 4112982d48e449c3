#!/usr/bin/env node
// The README's main command: a local swarm from an AveragingSwarm YAML, on this machine, with
// no cluster. Agents run as processes on loopback addresses, configured exactly as the
// operator configures their pods (the same builders make the same env).
import { readFileSync, mkdirSync, writeFileSync, createWriteStream } from 'node:fs'
import { spawn, type ChildProcess } from 'node:child_process'
import { createServer } from 'node:net'
import { randomUUID } from 'node:crypto'
import { join, resolve } from 'node:path'
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

async function main (): Promise<void> {
  const program = new Command()
    .name('local-swarm')
    .description('Run an AveragingSwarm on this machine: agents as processes on loopback, no cluster.')
    .argument('[file]', 'AveragingSwarm YAML', 'examples/local.yaml')
    .option('-d, --duration <seconds>', 'how long to run before the summary', '60')
    .option('-o, --out <dir>', 'where logs and the report go', 'runs')
    .parse()
  const file = program.args[0] ?? 'examples/local.yaml'
  const opts = program.opts<{ duration: string, out: string }>()
  const duration = Number(opts.duration)
  if (!(duration > 0)) throw new UserError(`--duration must be a positive number of seconds, got "${opts.duration}"`)

  const swarm = loadSwarm(file)
  const spec = swarm.spec
  if (spec.workload.type !== 'builtin') throw new UserError('the local runtime runs the builtin workload; a sidecar swarm needs its trainer containers (see examples/sidecar-trainer)')
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
  try {
    for (const pod of pods) { await checkPortFree(pod.ip, spec.network.port); await checkPortFree(pod.ip, metricsPort) }
  } catch (err) {
    dns.close()
    throw err
  }

  const runDir = resolve(opts.out, `${swarm.metadata.name}-${new Date().toISOString().replace(/[:.]/g, '-')}`)
  mkdirSync(runDir, { recursive: true })
  const agentMain = fileURLToPath(new URL('../agent/main.js', import.meta.url))
  console.log(`Starting ${pods.length} agents of swarm "${swarm.metadata.name}" from ${file} (logs in ${runDir})`)
  const children: ChildProcess[] = []
  const exits: string[] = []
  for (const pod of pods) {
    const child = spawn(process.execPath, [agentMain], { env: { ...process.env, ...pod.env }, stdio: ['ignore', 'pipe', 'pipe'] })
    const log = createWriteStream(join(runDir, `${pod.name}.log`))
    child.stdout?.pipe(log); child.stderr?.pipe(log)
    child.on('exit', (code, signal) => { if (!stopping) exits.push(`${pod.name} exited (${signal ?? code}); see ${join(runDir, `${pod.name}.log`)}`) })
    children.push(child)
  }
  let stopping = false
  const stopAll = async (): Promise<void> => {
    stopping = true
    await Promise.all(children.map(async c => await new Promise<void>(done => {
      if (c.exitCode !== null || c.signalCode !== null) { done(); return }
      const kill = setTimeout(() => { c.kill('SIGKILL') }, 15_000)
      c.once('exit', () => { clearTimeout(kill); done() })
      c.kill('SIGTERM')
    })))
    dns.close()
  }
  process.once('SIGINT', () => { console.log('\nInterrupted: stopping the agents.'); deadline = 0 })

  // A single agent alone on shard 0, trained for as many steps as the swarm's agents: the baseline.
  const { tf, name: backend } = await loadTensorBackend()
  const solo = new LocalModel(tf, 0)
  const soloShard = makeShard(0)
  const heldOut = makeHeldOut(512)
  let soloSteps = 0
  const soloPoints: SoloPoint[] = []
  const samples: SwarmSample[] = []
  const started = Date.now()
  let deadline = started + duration * 1000
  console.log(`tensor backend: ${backend}; metrics on http://<agent ip>:${metricsPort}/metrics, e.g. http://${pods[0].ip}:${metricsPort}/metrics`)
  console.log('   time  ready  rounds  failed  group  train-loss  held-out  divergence')
  while (Date.now() < deadline && exits.length === 0) {
    await new Promise(r => setTimeout(r, 2000))
    const t = (Date.now() - started) / 1000
    const s = await sampleSwarm(pods, metricsPort, t)
    samples.push(s)
    if (Number.isFinite(s.meanSteps) && s.meanSteps > soloSteps) {
      const steps = Math.round(s.meanSteps - soloSteps)
      solo.train(soloShard, steps)
      soloSteps += steps
      soloPoints.push({ t, heldOutLoss: solo.evaluate(heldOut) })
    }
    const f = (v: number, d = 3): string => Number.isFinite(v) ? v.toFixed(d) : '-'
    console.log(`${t.toFixed(0).padStart(6)}s  ${String(s.ready).padStart(2)}/${pods.length}  ${String(s.rounds).padStart(6)}  ${String(s.failures).padStart(6)}  ${f(s.meanGroupSize, 1).padStart(5)}  ${f(s.meanLoss).padStart(10)}  ${f(s.meanHeldOutLoss).padStart(8)}  ${f(s.meanDivergence, 4).padStart(10)}`)
  }
  await stopAll()
  if (exits.length > 0) throw new UserError(exits[0])
  const last = samples.at(-1)
  const lastSolo = soloPoints.at(-1)
  const summary: Record<string, string> = {
    agents: String(pods.length),
    'run time': `${((Date.now() - started) / 1000).toFixed(0)} s`,
    'rounds completed (all agents)': String(last?.rounds ?? 0),
    'failed rounds': String(last?.failures ?? 0),
    'mean group size': last != null && Number.isFinite(last.meanGroupSize) ? last.meanGroupSize.toFixed(2) : '-',
    'held-out loss, swarm (mean)': last != null && Number.isFinite(last.meanHeldOutLoss) ? last.meanHeldOutLoss.toFixed(4) : '-',
    'held-out loss, single agent': lastSolo != null ? lastSolo.heldOutLoss.toFixed(4) : '-',
    'training steps per agent': String(Math.round(soloSteps)),
    'tensor backend': backend
  }
  const reportPath = join(runDir, 'report.html')
  writeFileSync(reportPath, renderReport(swarm.metadata.name, pods.length, samples, soloPoints, summary))
  writeFileSync(join(runDir, 'summary.json'), JSON.stringify({ summary, samples, solo: soloPoints }, null, 2))
  console.log('\nSummary')
  for (const [k, v] of Object.entries(summary)) console.log(`  ${k.padEnd(30)} ${v}`)
  console.log(`\nReport: ${reportPath}`)
}

main().catch((err) => {
  process.stderr.write(`local-swarm: ${describeError(err)}\n`)
  process.exitCode = 1
})
