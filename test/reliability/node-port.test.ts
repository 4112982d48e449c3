import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { appendFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { privateKeyFromProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { AGENT_ENV } from '../../api/agent-env.js'
import { AGENT_METRICS } from '../../api/metric-names.js'
import { AgentProcess, agentEnv, stopAgents } from '../../agent/process/agent-process.js'
import { decodeFloat32, firstNonFinite } from '../../agent/workloads/sidecar/tensor-codec.js'
import { parsePrometheusText, sumOf } from '../../operator/controller/prom-text.js'
import { createNatSites, natSitesUnsupported, type NatSites } from '../../tools/faults/nat-sites.js'
import { buildSidecarSwarm, type SwarmTiming } from '../../tools/faults/sidecar-swarm.js'
import type { TrainerMainConfig } from '../../tools/faults/trainer-main.js'
import { maxAbsDiff, weightedMean } from '../agent/swarm-fixture.js'
import { metricsIn } from './netns-agents.js'

const TRAINER_MAIN = fileURLToPath(new URL('../../tools/faults/trainer-main.js', import.meta.url))
const unsupported = await natSitesUnsupported()
if (unsupported !== undefined) console.log(`node-port test skipped: ${unsupported}`)

// The pod's ports, and the node ports its router forwards to them (kube-proxy's DNAT for a NodePort Service).
const P2P_PORT = 31337
const DATA_PORT = 4002
const NODE_PORT_P2P = 30001
const NODE_PORT_DATA = 30002
const METRICS_PORT = 9400
const SIDECAR_PORT = 9401
const POD_IP = '192.168.1.10'
const ELEMENTS = 65536
const AVERAGED_STEPS = 3
const TIMING: SwarmTiming = { targetGroupSize: 2, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1, allreduceTimeout: 10 }

interface Line { type: string, agent: number, groupId?: string, averaged?: boolean, groupSize?: number, startedAt?: number, wallMs?: number, matchmakingMs?: number, allreduceMs?: number, peerId?: string, values?: string, nonFinite?: boolean, transportError?: string, error?: string, message?: string, unreachedPeers?: string[] }
type Step = Line & { decoded?: Float32Array }

// A pod behind a node's NAT, exposed by a NodePort Service: outsiders reach its libp2p port and its
// data channel only at <node address>:<node port>. The pod announces both (AVS_ANNOUNCE_FILE, a
// `data=` entry for the data channel); an agent outside the site averages with it and must send
// its tensor parts on the direct data channel through the node port, not fall back to libp2p.
// Real agent processes, network namespaces, a router with iptables MASQUERADE and DNAT.
test('NodePort: an outside agent averages with a pod behind a NAT router at node ports, to the exact mean, its parts on the direct data channel through the data node port', { skip: unsupported, timeout: 120_000 }, async (t) => {
  const subnet = 1 + (process.pid % 200)
  const tag = `avnp${subnet}`
  const logDir = mkdtempSync(join(tmpdir(), 'avs-node-port-'))
  const started = Date.now()
  const elapsed = (): string => `${((Date.now() - started) / 1000).toFixed(1)} s`
  const net: NatSites = await createNatSites(tag, subnet, [1], {
    forwards: [
      { site: 0, port: NODE_PORT_P2P, to: POD_IP, toPort: P2P_PORT },
      { site: 0, port: NODE_PORT_DATA, to: POD_IP, toPort: DATA_PORT }
    ]
  })
  const procs: AgentProcess[] = []
  const trainers: ChildProcess[] = []
  let stopping = false
  try {
    const site = net.sites[0]
    const natIp = site.natIp
    assert.deepEqual(site.ips, [POD_IP])
    // The operator's own env for a sidecar swarm of 2 (its bootstrap agent's identity key from the
    // identity Secret); agent 0, the bootstrap, is the pod, agent 1 the outside agent.
    const { agents } = await buildSidecarSwarm({
      name: 'np', replicas: 2, bootstrapReplicas: 1, timing: TIMING,
      ips: [POD_IP, net.publicIp], sidecarPorts: [SIDECAR_PORT, SIDECAR_PORT],
      p2pPort: P2P_PORT, metricsPort: METRICS_PORT, membersDir: join(logDir, 'members')
    })
    const [pod, outside] = agents
    assert.equal(pod.env[AGENT_ENV.bootstrapPeers.name], undefined, `${pod.name} is the bootstrap agent: it dials nobody`)
    const key = pod.env[AGENT_ENV.identityKey.name]
    assert.ok(key !== undefined, `${pod.name} has a known identity key`)
    const podId = peerIdFromPrivateKey(privateKeyFromProtobuf(Buffer.from(key, 'base64'))).toString()
    const announceFile = join(logDir, 'announce')
    writeFileSync(announceFile, `/ip4/${natIp}/tcp/${NODE_PORT_P2P},data=/ip4/${natIp}/tcp/${NODE_PORT_DATA}\n`)
    const placed = [
      { name: pod.name, ns: site.ns, ip: POD_IP, env: { ...pod.env, ...agentEnv({ announceFile, dataPort: DATA_PORT }) } },
      // Debug: its log says where it tried the pod's data channel before falling back to libp2p.
      { name: outside.name, ns: net.publicNs, ip: net.publicIp, env: { ...outside.env, ...agentEnv({ bootstrapPeers: `/ip4/${natIp}/tcp/${NODE_PORT_P2P}/p2p/${podId}`, logLevel: 'debug' }) } }
    ]
    // An agent that exits ends the wait at once (violations is read by the wait below).
    const violations: string[] = []
    for (const p of placed) {
      const a = new AgentProcess({ name: p.name, env: p.env, logDir, netns: p.ns, onExit: (code, signal) => { if (!stopping) violations.push(`agent ${p.name} exited (${code ?? signal ?? '?'}); see ${join(logDir, `${p.name}.log`)}`) } })
      procs.push(a)
      a.start()
    }
    t.diagnostic(`${elapsed()} pod ${pod.name} (${podId.slice(-6)}) at ${POD_IP} behind ${natIp} (node ports ${NODE_PORT_P2P} -> ${P2P_PORT}, ${NODE_PORT_DATA} -> ${DATA_PORT}); outside agent ${outside.name} at ${net.publicIp}; logs in ${logDir}`)

    // One trainer per namespace: the sidecar API listens on the namespace's loopback.
    const startValues = new Map<number, Float32Array>()
    const steps: Step[] = []
    const stepLimitMs = 3 * (2 * TIMING.averagingExpiration + 2 * TIMING.allreduceTimeout) * 1000
    for (const [i, p] of placed.entries()) {
      const config: TrainerMainConfig = { agents: [{ agent: i, port: SIDECAR_PORT, seed: `node-port-${i}`, offset: 0 }], elements: ELEMENTS, periodMs: 500, stepLimitMs }
      const child = spawn('ip', ['netns', 'exec', p.ns, process.execPath, TRAINER_MAIN, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] })
      child.stderr?.on('data', (d: Buffer) => { appendFileSync(join(logDir, `trainer-${i}.err`), d) })
      createInterface({ input: child.stdout! }).on('line', (text) => {
        let line: Line
        try { line = JSON.parse(text) as Line } catch (err) { violations.push(`trainer ${i}'s output unreadable: ${text.length} chars: ${(err as Error).message}`); return }
        if (line.type === 'error') violations.push(`agent ${line.agent}'s trainer stopped: ${line.message ?? ''}`)
        if (line.type === 'start') startValues.set(line.agent, decodeFloat32(line.values!) ?? new Float32Array(0))
        if (line.type === 'step') {
          steps.push({ ...line, decoded: line.values !== undefined ? decodeFloat32(line.values) : undefined })
          appendFileSync(join(logDir, 'steps.jsonl'), JSON.stringify({ ...line, values: undefined }) + '\n')
        }
      })
      trainers.push(child)
    }
    // Failure messages stay short: node --test drops a failing test's diagnostics after a message of
    // tens of kB (under --test-force-exit); every step is in steps.jsonl.
    const stepsText = (): string => JSON.stringify(steps.map(s => ({ ...s, values: undefined, decoded: undefined }))).slice(0, 4000)
    const averagedOf = (i: number): Step[] => steps.filter(s => s.agent === i && s.averaged === true && s.groupSize === 2)
    const until = Date.now() + 80_000
    while (!(averagedOf(0).length >= AVERAGED_STEPS && averagedOf(1).length >= AVERAGED_STEPS)) {
      if (violations.length > 0) assert.fail(`${violations.join('\n')}\nlogs: ${logDir}`)
      if (Date.now() > until) {
        assert.fail(`each agent averages in a group of 2 ${AVERAGED_STEPS} times within 80 s: averaged ${averagedOf(0).length} and ${averagedOf(1).length} times in ${steps.length} steps (${stepsText()})\nlogs: ${logDir}`)
      }
      await new Promise(resolve => setTimeout(resolve, 200))
    }
    const averagedAt = elapsed()
    for (const c of trainers) c.stdin?.write('stop\n')
    let timer: NodeJS.Timeout | undefined
    await Promise.race([
      Promise.all(trainers.map(async c => await new Promise(resolve => { if (c.exitCode !== null) resolve(null); else c.once('exit', resolve) }))),
      new Promise(resolve => { timer = setTimeout(resolve, 20_000) })
    ])
    clearTimeout(timer)
    assert.deepEqual(violations, [], `logs: ${logDir}`)

    // Values: both start values finite; the first averaged step leaves both at their exact mean;
    // every step after it leaves them there, both agents holding identical values.
    const detail = (): string => `${stepsText()}\nlogs: ${logDir}`
    assert.equal(startValues.size, 2, `both trainers started\n${detail()}`)
    const [a, b] = [startValues.get(0)!, startValues.get(1)!]
    for (const v of [a, b]) assert.ok(v.length === ELEMENTS && firstNonFinite(v) < 0, 'finite start values')
    const mean = weightedMean([a, b], [1, 1])
    const nonFinite = steps.filter(s => s.nonFinite === true || (s.decoded !== undefined && firstNonFinite(s.decoded) >= 0))
    assert.equal(nonFinite.length, 0, `no step returned non-finite values\n${detail()}`)
    const first = [averagedOf(0)[0], averagedOf(1)[0]]
    assert.equal(first[0].groupId, first[1].groupId, `the first averaged step of both agents is one round\n${detail()}`)
    const firstErr = first.map(s => maxAbsDiff(s.decoded!, mean))
    for (const s of first) assert.equal(s.decoded?.length, ELEMENTS, `whole tensors came back\n${detail()}`)
    for (const [i, err] of firstErr.entries()) assert.ok(err < 1e-6, `agent ${i} holds the exact mean of both start values after the first averaged step (max abs diff ${err})\n${detail()}`)
    let laterErr = 0
    let comparedRounds = 0
    for (let i = 0; i < 2; i++) {
      for (const s of steps.filter(s => s.agent === i && s.startedAt! > first[i].startedAt! && s.transportError === undefined)) laterErr = Math.max(laterErr, maxAbsDiff(s.decoded!, mean))
    }
    assert.ok(laterErr < 1e-6, `both agents stay at the mean after the first averaged step (max abs diff ${laterErr})\n${detail()}`)
    for (const s of averagedOf(0)) {
      const other = averagedOf(1).find(o => o.groupId === s.groupId)
      if (other === undefined) continue
      comparedRounds++
      assert.equal(maxAbsDiff(s.decoded!, other.decoded!), 0, `both agents hold identical values after round ${s.groupId ?? ''}\n${detail()}`)
    }
    assert.ok(comparedRounds >= AVERAGED_STEPS, `both agents reported ${AVERAGED_STEPS} common rounds (${comparedRounds})\n${detail()}`)
    const ms = (xs: Array<number | undefined>): string => xs.map(x => x ?? '-').join('/')
    for (let i = 0; i < 2; i++) {
      const mine = steps.filter(s => s.agent === i)
      t.diagnostic(`${placed[i].name}: ${averagedOf(i).length} of ${mine.length} steps averaged in groups of 2; step ms ${ms(mine.map(s => s.wallMs))}, matchmaking ms ${ms(mine.map(s => s.matchmakingMs))}, all-reduce ms ${ms(mine.map(s => s.allreduceMs))}`)
    }
    t.diagnostic(`${averagedAt} ${AVERAGED_STEPS} averaged steps each; after the first (${first.map(s => `${((s.startedAt! + s.wallMs! - started) / 1000).toFixed(1)} s`).join(', ')}) max abs diff to the exact mean ${firstErr.map(e => e.toExponential(2)).join(', ')}, afterwards ${laterErr.toExponential(2)}; ${comparedRounds} common rounds with identical values`)

    // Data channels, from each agent's metrics inside its namespace.
    const name = AGENT_METRICS.dataChannels.name
    const channels = await Promise.all(placed.map(async (p, i) => {
      const text = await metricsIn(p.ns, `http://${p.ip}:${METRICS_PORT}/metrics`)
      writeFileSync(join(logDir, `metrics-${i}.txt`), text)
      const samples = parsePrometheusText(text)
      return { direct: sumOf(samples, name, { path: 'direct' }), libp2p: sumOf(samples, name, { path: 'libp2p' }) }
    }))
    t.diagnostic(`${elapsed()} ${name}: pod ${JSON.stringify(channels[0])}, outside agent ${JSON.stringify(channels[1])}`)
    const [, out] = channels
    assert.ok(out.direct !== undefined && out.libp2p !== undefined, `the outside agent exports ${name}\nlogs: ${logDir}`)
    const tried = [...new Set(readFileSync(procs[1].logPath, 'utf8').split('\n').filter(l => l.startsWith('{')).map(l => { try { return String(JSON.parse(l).msg) } catch { return '' } })
      .filter(m => m.startsWith('no direct channel')))].slice(0, 4)
    if (tried.length > 0) t.diagnostic(`the outside agent's failed direct dials: ${tried.join(' | ')}`)
    // On a public address of its own (no NAT), the outside agent announces it: libp2p 3 leaves a
    // public listen address out until AutoNAT confirms it, and then the pod's routing table stayed
    // empty and its wait for a first peer ran its full 10 s.
    const announced = readFileSync(procs[1].logPath, 'utf8').includes(`announcing our public listen address /ip4/${net.publicIp}/tcp/${P2P_PORT}`)
    assert.ok(announced, `the outside agent announces its public listen address\nlogs: ${logDir}`)
    assert.equal(out.libp2p, 0, `the outside agent opened no libp2p data channel (it fell back to libp2p streams ${out.libp2p} times: the pod's data channel was not reached at ${natIp}:${NODE_PORT_DATA}; ${tried.join(' | ')})\nlogs: ${logDir}`)
    assert.ok(out.direct >= 1, `the outside agent opened direct data channels to the pod through the node port (${out.direct})\nlogs: ${logDir}`)
  } finally {
    stopping = true
    for (const c of trainers) { c.stdin?.end(); if (c.exitCode === null) c.kill('SIGKILL') }
    await stopAgents(procs, 5000)
    await net.destroy()
    const left = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }).split('\n').map(l => l.split(' ')[0]).filter(n => new RegExp(`^${tag}(pub|[sr]\\d+)$`).test(n))
    assert.deepEqual(left, [], 'the test\'s network namespaces are gone')
    t.diagnostic(`${elapsed()} torn down; logs in ${logDir}`)
  }
})
