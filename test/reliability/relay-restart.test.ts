import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { appendFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
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
if (unsupported !== undefined) console.log(`relay-restart test skipped: ${unsupported}`)

const P2P_PORT = 31337
const METRICS_PORT = 9400
const SIDECAR_PORT = 9401
const ELEMENTS = 65536
const TIMING: SwarmTiming = { targetGroupSize: 3, minGroupSize: 2, averagingExpiration: 3, requestTimeout: 1, allreduceTimeout: 10 }
/** Averaged steps (in groups of 2 or more) each agent makes before the relay is killed. */
const AVERAGED_BEFORE = 2
/** The relay agent is down this long, as a pod that is deleted and started again. */
const DOWN_MS = 2000
/** Times the relay is killed and started again (each followed by phase 3's checks). */
const RESTARTS = 1
/**
 * From the relay's restart to both NATed agents holding a slot again and averaging together. The
 * watchdog (agent/main.ts reachSwarm) looks every 3 s (every 30 s before this test measured 21-26 s
 * without a slot); before it can reserve, the agent must be connected to the relay again: libp2p
 * redials the bootstrap peers it keeps alive 1, 2, 4, 8 and 16 s after the disconnect
 * (agent/net/bootstrap.ts), and the rendezvous retries a failed replica about every second (here
 * the relay is one of each key's 3 replicas: measured, it reconnects within a second of the relay
 * listening, ~2 s after its start). A round to average in takes a declaration (3 s) and an
 * all-reduce (seconds here, at most 10 s); the rest is slack for a loaded machine: a bound on
 * liveness, not a speed target (the diagnostics print the timeline).
 */
const BACK_WITHIN_MS = 75_000

interface Line { type: string, agent: number, groupId?: string, averaged?: boolean, groupSize?: number, peers?: string[], partsKeptLocal?: number, startedAt?: number, wallMs?: number, peerId?: string, values?: string, nonFinite?: boolean, transportError?: string, error?: string, message?: string, unreachedPeers?: string[], incarnation?: number }
/** A trainer's step, with its values before (input) and after it, and which trainer process reported it. */
type Step = Line & { decoded?: Float32Array, input?: Float32Array, trainer: number, endedAt: number }

/** An agent's pino lines (JSON) from its log file: msg and time. */
function logLines (path: string): Array<{ msg: string, time: number }> {
  if (!existsSync(path)) return []
  const out: Array<{ msg: string, time: number }> = []
  for (const l of readFileSync(path, 'utf8').split('\n')) {
    if (!l.startsWith('{')) continue
    try { const j = JSON.parse(l) as { msg?: unknown, time?: unknown }; out.push({ msg: String(j.msg), time: Number(j.time) }) } catch { /* a line cut by the kill */ }
  }
  return out
}

// A bootstrap agent that serves the swarm's circuit relay restarts (its pod deleted and started
// again: same identity key, same address). Two agents behind NAT, in two sites without port
// forwards, reach each other only through it. Their relay slots die with it; each agent's watchdog
// (agent/main.ts reachSwarm) must reserve a slot again on the restarted relay, and the two must
// average together again through it. Real agent processes, network namespaces, MASQUERADE routers.
test('relay restart: NATed agents reserve a relay slot again on the restarted relay and average together through it', { skip: unsupported, timeout: 240_000 }, async (t) => {
  const subnet = 1 + (process.pid % 200)
  const tag = `avrr${subnet}`
  const logDir = mkdtempSync(join(tmpdir(), 'avs-relay-restart-'))
  const started = Date.now()
  const at = (ms: number): string => `${((ms - started) / 1000).toFixed(1)} s`
  const elapsed = (): string => at(Date.now())
  const net: NatSites = await createNatSites(tag, subnet, [1, 1])
  const procs: AgentProcess[] = []
  const trainers: ChildProcess[] = []
  let stopping = false
  try {
    const [siteA, siteB] = net.sites
    // The operator's own env for a sidecar swarm of 3: agent 0 is the bootstrap agent (its
    // identity key from the identity Secret), 1 and 2 the NATed members.
    const { agents } = await buildSidecarSwarm({
      name: 'rr', replicas: 3, bootstrapReplicas: 1, timing: TIMING,
      ips: [net.publicIp, siteA.ips[0], siteB.ips[0]], sidecarPorts: [SIDECAR_PORT, SIDECAR_PORT, SIDECAR_PORT],
      p2pPort: P2P_PORT, metricsPort: METRICS_PORT, membersDir: join(logDir, 'members')
    })
    const [relay, a, b] = agents
    // What the builders give the bootstrap agent: it serves the relay by default (spec.network.relay
    // absent: serve Bootstrap); no private-network key and no allow list (the swarm sets no
    // privateNetworkSecret, and the operator never sets AVS_ALLOW_PEERS).
    assert.equal(relay.env[AGENT_ENV.relay.name], 'serve', `${relay.name} serves the relay (AVS_RELAY=serve)`)
    assert.equal(relay.env[AGENT_ENV.bootstrapPeers.name], undefined, `${relay.name} is the bootstrap agent: it dials nobody`)
    for (const m of [a, b]) {
      assert.equal(m.env[AGENT_ENV.relay.name], undefined, `${m.name} serves no relay`)
      assert.match(m.env[AGENT_ENV.bootstrapPeers.name] ?? '', new RegExp(`^/ip4/${net.publicIp.replace(/\./g, '\\.')}/tcp/${P2P_PORT}/p2p/`), `${m.name} dials the relay at its public address`)
    }
    const key = relay.env[AGENT_ENV.identityKey.name]
    assert.ok(key !== undefined, `${relay.name} has a known identity key`)
    const relayId = peerIdFromPrivateKey(privateKeyFromProtobuf(Buffer.from(key, 'base64'))).toString()
    const placed = [
      { name: relay.name, ns: net.publicNs, ip: net.publicIp, env: relay.env },
      // Debug on one NATed agent: its log tells why, if it never gets a slot again.
      { name: a.name, ns: siteA.ns, ip: siteA.ips[0], env: { ...a.env, ...agentEnv({ logLevel: 'debug' }) } },
      { name: b.name, ns: siteB.ns, ip: siteB.ips[0], env: b.env }
    ]
    const violations: string[] = []
    // Set while the test kills the relay: its exit, and its trainer's, are no fault then.
    let killing = false
    for (const p of placed) {
      const proc = new AgentProcess({ name: p.name, env: p.env, logDir, netns: p.ns, onExit: (code, signal) => { if (!stopping && !(p.name === relay.name && killing)) violations.push(`agent ${p.name} exited (${code ?? signal ?? '?'}); see ${join(logDir, `${p.name}.log`)}`) } })
      procs.push(proc)
      proc.start()
    }
    t.diagnostic(`${elapsed()} relay ${relay.name} (${relayId.slice(-6)}) at ${net.publicIp}; ${a.name} at ${siteA.ips[0]} behind ${siteA.natIp}; ${b.name} at ${siteB.ips[0]} behind ${siteB.natIp}; logs in ${logDir}`)

    // One trainer per namespace (the sidecar API listens on the namespace's loopback). Each step
    // record keeps the values its trainer sent (input): the values after its previous step.
    const startValues = new Map<number, Float32Array[]>()
    const peerIds = new Map<number, string>()
    const current = new Map<number, Float32Array>()
    const steps: Step[] = []
    const stepLimitMs = 3 * (2 * TIMING.averagingExpiration + 2 * TIMING.allreduceTimeout) * 1000
    let trainerCount = 0
    const startTrainer = (i: number): ChildProcess => {
      const trainer = trainerCount++
      const p = placed[i]
      const config: TrainerMainConfig = { agents: [{ agent: i, port: SIDECAR_PORT, seed: `relay-restart-${i}`, offset: 0 }], elements: ELEMENTS, periodMs: 500, stepLimitMs }
      const child = spawn('ip', ['netns', 'exec', p.ns, process.execPath, TRAINER_MAIN, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] })
      child.stderr?.on('data', (d: Buffer) => { appendFileSync(join(logDir, `trainer-${i}.err`), d) })
      createInterface({ input: child.stdout! }).on('line', (text) => {
        let line: Line
        try { line = JSON.parse(text) as Line } catch (err) { violations.push(`trainer ${i}'s output unreadable: ${text.length} chars: ${(err as Error).message}`); return }
        if (line.type === 'error' && !(i === 0 && killing)) violations.push(`agent ${line.agent}'s trainer stopped: ${line.message ?? ''}`)
        if (line.type === 'start') {
          const values = decodeFloat32(line.values!) ?? new Float32Array(0)
          startValues.set(i, [...(startValues.get(i) ?? []), values])
          current.set(i, values)
          if (line.peerId !== undefined) peerIds.set(i, line.peerId)
        }
        if (line.type === 'step') {
          const decoded = line.values !== undefined ? decodeFloat32(line.values) : undefined
          steps.push({ ...line, decoded, input: current.get(i), trainer, endedAt: Date.now() })
          if (decoded !== undefined) current.set(i, decoded)
          appendFileSync(join(logDir, 'steps.jsonl'), JSON.stringify({ ...line, values: undefined, trainer }) + '\n')
        }
      })
      return child
    }
    for (let i = 0; i < placed.length; i++) trainers[i] = startTrainer(i)

    // Failure messages stay short and point at the steps' file: node --test-force-exit ends the
    // test's process before a long message (tens of kB) and the diagnostics after it reach the
    // runner, so a failure would lose the timeline.
    const detail = (): string => `${steps.length} steps (${[0, 1, 2].map(i => `${placed[i].name}: ${steps.filter(s => s.agent === i).length}`).join(', ')}) in ${join(logDir, 'steps.jsonl')}; logs: ${logDir}`
    const waitFor = async (what: string, ms: number, done: () => boolean, state: () => string = () => ''): Promise<void> => {
      const until = Date.now() + ms
      while (!done()) {
        if (violations.length > 0) assert.fail(`${violations.join('\n')}\nlogs: ${logDir}`)
        if (Date.now() > until) assert.fail(`${what} within ${ms / 1000} s (at ${elapsed()}${state() !== '' ? `; ${state()}` : ''})\n${detail()}`)
        await new Promise(resolve => setTimeout(resolve, 200))
      }
    }
    const msgs = (i: number): Array<{ msg: string, time: number }> => logLines(procs[i].logPath)
    const reservedFirst = (i: number): number | undefined => msgs(i).find(l => l.msg.startsWith(`reachable: no, reserved relay slot on ${relayId}`))?.time
    const reservedAgain = (i: number): number[] => msgs(i).filter(l => l.msg.startsWith(`reserved a relay slot again, on ${relayId}`)).map(l => l.time)

    // Phase 1: both NATed agents hold a slot on the relay, and every agent averages.
    const averaged = (i: number, after = 0): Step[] => steps.filter(s => s.agent === i && s.averaged === true && (s.groupSize ?? 0) >= 2 && s.startedAt! >= after)
    await waitFor(`both NATed agents reserve a relay slot and each agent averages ${AVERAGED_BEFORE} times in groups of 2 or more`, 60_000,
      () => reservedFirst(1) !== undefined && reservedFirst(2) !== undefined && [0, 1, 2].every(i => averaged(i).length >= AVERAGED_BEFORE))
    for (const i of [1, 2]) assert.deepEqual(reservedAgain(i), [], `${placed[i].name} reserved no slot "again" while the relay was up`)
    t.diagnostic(`${elapsed()} phase 1: slots on the relay at ${at(reservedFirst(1)!)} (${a.name}), ${at(reservedFirst(2)!)} (${b.name}); averaged steps ${[0, 1, 2].map(i => averaged(i).length).join('/')}, group sizes ${[0, 1, 2].map(i => averaged(i).map(s => s.groupSize).join(',')).join(' / ')}`)

    // Phase 2: the relay's pod dies (SIGKILL: no goodbye to anybody) and comes back with the same
    // identity and address after DOWN_MS; its trainer (the pod's other container) with it.
    // Phase 3: each NATed agent reserves a slot again, and the two average together again: a
    // round whose group holds both, reported by both, begun after the restart.
    const both = (): string[] => [peerIds.get(1)!, peerIds.get(2)!]
    const together: Step[] = []
    for (let restart = 1; restart <= RESTARTS; restart++) {
      killing = true
      const killAt = Date.now()
      trainers[0].kill('SIGKILL')
      await procs[0].killAndWait()
      await new Promise(resolve => setTimeout(resolve, DOWN_MS))
      const restartAt = Date.now()
      procs[0].start()
      trainers[0] = startTrainer(0)
      killing = false
      t.diagnostic(`${elapsed()} phase 2${RESTARTS > 1 ? ` (restart ${restart})` : ''}: relay killed at ${at(killAt)}, started again at ${at(restartAt)}`)
      const againAfter = (i: number): number | undefined => reservedAgain(i).find(time => time > killAt)
      const togetherAfter = (): Step[] => {
        const mine = averaged(1, restartAt).filter(s => both().every(p => s.peers?.includes(p) === true))
        return mine.filter(s => averaged(2, restartAt).some(o => o.groupId === s.groupId))
      }
      await waitFor('both NATed agents reserve a relay slot again and average together again after the relay restarted', BACK_WITHIN_MS,
        () => againAfter(1) !== undefined && againAfter(2) !== undefined && togetherAfter().length > 0,
        () => `relay killed at ${at(killAt)}, started again at ${at(restartAt)}; slot reserved again: ${[1, 2].map(i => `${placed[i].name} ${againAfter(i) !== undefined ? `at ${at(againAfter(i)!)}` : 'never'}`).join(', ')}; rounds with both NATed agents since the restart: ${togetherAfter().length}; averaged steps since the restart ${[0, 1, 2].map(i => averaged(i, restartAt).length).join('/')}`)
      const again = [againAfter(1)!, againAfter(2)!]
      const first = togetherAfter()[0]
      together.push(first)
      const end = first.startedAt! + first.wallMs!
      t.diagnostic(`${elapsed()} phase 3${RESTARTS > 1 ? ` (restart ${restart})` : ''}: slot reserved again at ${at(again[0])} (${a.name}, ${((again[0] - restartAt) / 1000).toFixed(1)} s after the restart), ${at(again[1])} (${b.name}, ${((again[1] - restartAt) / 1000).toFixed(1)} s); first round with both NATed agents after the restart: group ${first.groupId?.slice(0, 8) ?? '?'} of ${first.groupSize ?? '?'}, averaged at ${at(end)} (${((end - restartAt) / 1000).toFixed(1)} s after the restart; its step began at ${at(first.startedAt!)})`)
    }

    // The restarted relay carried the NATed pair's traffic.
    const relayText = await metricsIn(net.publicNs, `http://${net.publicIp}:${METRICS_PORT}/metrics`)
    writeFileSync(join(logDir, 'metrics-relay.txt'), relayText)
    const relayedBytes = sumOf(parsePrometheusText(relayText), AGENT_METRICS.relayedBytes.name, {}) ?? 0
    const opened = await Promise.all([1, 2].map(async i => {
      const text = await metricsIn(placed[i].ns, `http://${placed[i].ip}:${METRICS_PORT}/metrics`)
      writeFileSync(join(logDir, `metrics-${i}.txt`), text)
      const samples = parsePrometheusText(text)
      return { relayed: sumOf(samples, AGENT_METRICS.connectionsOpened.name, { kind: 'relayed' }), direct: sumOf(samples, AGENT_METRICS.connectionsOpened.name, { kind: 'direct' }) }
    }))
    t.diagnostic(`${elapsed()} the restarted relay relayed ${relayedBytes} bytes; connections opened by ${a.name} ${JSON.stringify(opened[0])}, ${b.name} ${JSON.stringify(opened[1])}`)
    // Any bytes at all: its counter started at 0 with the restart, and the pair's parts cross it
    // (how many depends on the spans the round's load balancing gave each member).
    assert.ok(relayedBytes > 0, `the restarted relay carried the NATed agents' traffic (${relayedBytes} bytes)\nlogs: ${logDir}`)

    // Stop stepping; the steps under way finish.
    for (const c of trainers) c.stdin?.write('stop\n')
    let timer: NodeJS.Timeout | undefined
    await Promise.race([
      Promise.all(trainers.map(async c => await new Promise(resolve => { if (c.exitCode !== null || c.signalCode !== null) resolve(null); else c.once('exit', resolve) }))),
      new Promise(resolve => { timer = setTimeout(resolve, 20_000) })
    ])
    clearTimeout(timer)
    assert.deepEqual(violations, [], `logs: ${logDir}`)

    // Values: finite everywhere; members of one round that received every span hold identical
    // values; a round whose every member reported (and lost no part) leaves each at the exact
    // mean of what they sent.
    for (const [i, vs] of startValues) for (const v of vs) assert.ok(v.length === ELEMENTS && firstNonFinite(v) < 0, `agent ${i}'s start values are finite`)
    const nonFinite = steps.filter(s => s.nonFinite === true || (s.decoded !== undefined && firstNonFinite(s.decoded) >= 0))
    assert.equal(nonFinite.length, 0, `no step returned non-finite values\n${detail()}`)
    const groups = new Map<string, Step[]>()
    for (const s of steps) if (s.averaged === true && s.groupId !== undefined) groups.set(s.groupId, [...(groups.get(s.groupId) ?? []), s])
    let identical = 0
    let exact = 0
    let worst = 0
    for (const [id, members] of groups) {
      const whole = members.filter(s => (s.partsKeptLocal ?? 0) === 0 && s.decoded !== undefined)
      for (const s of whole.slice(1)) assert.equal(maxAbsDiff(s.decoded!, whole[0].decoded!), 0, `the members of round ${id} hold identical values\n${detail()}`)
      if (whole.length >= 2) identical++
      const complete = whole.length === members[0].groupSize && whole.every(s => s.input !== undefined && (s.unreachedPeers ?? []).length === 0)
      if (!complete) continue
      const mean = weightedMean(whole.map(s => s.input!), whole.map(() => 1))
      for (const s of whole) {
        const err = maxAbsDiff(s.decoded!, mean)
        worst = Math.max(worst, err)
        assert.ok(err < 1e-6, `agent ${s.agent} holds the exact mean of round ${id}'s inputs (max abs diff ${err})\n${detail()}`)
      }
      exact++
    }
    assert.ok(exact >= 1, `at least one round reported by all its members was checked for the exact mean\n${detail()}`)
    for (const first of together) {
      const members = groups.get(first.groupId!)!
      assert.ok(members.filter(s => s.agent === 1 || s.agent === 2).every(s => (s.partsKeptLocal ?? 0) === 0), `both NATed agents received every span of round ${first.groupId ?? ''}, their first together after a restart\n${detail()}`)
    }
    const firstOf3 = [...groups.values()].find(m => m.length === 3 && m[0].groupSize === 3)
    t.diagnostic(`${elapsed()} ${groups.size} rounds; ${identical} with identical values across members, ${exact} checked against the exact mean of their inputs (max abs diff ${worst.toExponential(2)}); first round of 3 ${firstOf3 !== undefined ? `${firstOf3[0].groupId ?? ''} at ${at(firstOf3[0].startedAt!)}` : 'none'}; ${[0, 1, 2].map(i => `${placed[i].name}: ${averaged(i).length} of ${steps.filter(s => s.agent === i).length} steps averaged`).join(', ')}`)
  } finally {
    stopping = true
    for (const c of trainers) { c.stdin?.end(); if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL') }
    await stopAgents(procs, 5000)
    await net.destroy()
    const left = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }).split('\n').map(l => l.split(' ')[0]).filter(n => new RegExp(`^${tag}(pub|[sr]\\d+)$`).test(n))
    assert.deepEqual(left, [], 'the test\'s network namespaces are gone')
    t.diagnostic(`${elapsed()} torn down; logs in ${logDir}`)
  }
})
