#!/usr/bin/env node
// Fuzzes a LIVE agent process (hostile peers): starts honest agents as real processes
// configured by the AVS_* contract (api/agent-env.ts), connects an in-process libp2p peer to one of
// them and sends random and mutated messages over every protocol it serves, while sampling the
// target's memory and every agent's round counters. `npm run fuzz:agent -- --messages 100000`.
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { generateKeyPair, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import type { PeerId, Stream } from '@libp2p/interface'
import { createSwarmNode, type SwarmNode } from '../../agent/net/node.js'
import { RENDEZVOUS_PROTOCOL } from '../../agent/rendezvous/rendezvous.js'
import { joinProtocol } from '../../agent/matchmaking/join-protocol.js'
import { aggregateProtocol } from '../../agent/allreduce/aggregate-protocol.js'
import { stateProtocol } from '../../agent/state/state-protocol.js'
import * as pb from '../../agent/proto/averaging.js'
import { AgentProcess, agentEnv, stopAgents } from '../../agent/process/agent-process.js'
import { freePorts } from '../../agent/util/ports.js'
import { seededRandom } from '../../agent/util/random.js'

const PREFIX = 'fuzz'
const COMPRESSIONS = [pb.Compression.NONE, pb.Compression.FLOAT16, pb.Compression.UNIFORM_8BIT, pb.Compression.BLOCKWISE_8BIT]

export interface FuzzOptions {
  /** Messages (payload writes) to send over all protocols together. */
  readonly messages: number
  /** Honest agent processes; the first is the fuzz target. */
  readonly agents?: number
  /** Streams the fuzzer keeps in flight at once. */
  readonly concurrency?: number
  readonly seed?: number
  /** Seconds of honest averaging watched after the fuzzing. */
  readonly afterSeconds?: number
  /**
   * After the fuzzing: this many aggregate streams at once, each a valid header for an unknown
   * group followed by 3 MiB, to measure what the aggregate handler buffers (0: skipped).
   */
  readonly aggregateFlood?: number
  /** Stop sending after this many seconds even if fewer messages went out (the report says so). */
  readonly maxSeconds?: number
  /**
   * Chooses n ports for the agents (default freePorts). A test hands out one already taken, so the
   * restart of an agent whose port was taken is exercised on every run.
   */
  readonly choosePorts?: (n: number) => Promise<number[]>
  readonly log?: (line: string) => void
}

export interface ProtocolStats {
  streams: number
  messages: number
  /** The agent closed or reset the stream after our messages. */
  closedByAgent: number
  /** The stream could not be opened or was reset before we sent anything (limits at work). */
  refused: number
  /** Still open when we gave up waiting (idleBoundMs): an idle-timeout gap. */
  leftOpen: number
  /** Streams on which we sent nothing at all, to check the idle timeout. */
  idle: number
  idleClosed: number
  /** Slowest close by the agent after our last write, in ms. */
  maxCloseMs: number
}

export interface PhaseRounds { readonly ok: number, readonly failed: number }

export interface FuzzReport {
  readonly protocols: Record<string, ProtocolStats>
  readonly messages: number
  readonly seconds: number
  readonly rssBaselineMiB: number
  readonly rssMinMiB: number
  readonly rssMaxMiB: number
  readonly rssAfterMiB: number
  readonly hwmMiB: number
  readonly rssBoundMiB: number
  readonly rounds: { readonly before: PhaseRounds, readonly during: PhaseRounds, readonly after: PhaseRounds }
  readonly targetRoundsDuring: number
  readonly crashes: number
  readonly targetAlive: boolean
  /** Agents started again on new ports because one chosen for them was taken before they bound it. */
  readonly portRestarts: number
  readonly flood?: { readonly streams: number, readonly opened: number, readonly mibSent: number, readonly rssMaxMiB: number, readonly targetSurvived: boolean }
  readonly logDir: string
}

/** Memory bound asserted on the target: twice its warmed-up RSS plus 100 MiB. */
export function rssBound (baselineMiB: number): number {
  return 2 * baselineMiB + 100
}

/** The properties a live agent must keep under hostile input, as sentences; empty when every one holds. */
export function violations (r: FuzzReport, minMessages: number): string[] {
  const out: string[] = []
  if (r.messages < minMessages) out.push(`only ${r.messages} of ${minMessages} messages were sent`)
  if (r.crashes > 0 || !r.targetAlive) out.push(`${r.crashes} agent process(es) exited during the run`)
  if (r.rssMaxMiB > r.rssBoundMiB) out.push(`target RSS reached ${r.rssMaxMiB.toFixed(0)} MiB, above the ${r.rssBoundMiB.toFixed(0)} MiB bound`)
  if (r.rounds.during.ok === 0) out.push('no honest round succeeded while the fuzzer ran')
  if (r.rounds.after.ok === 0) out.push('no honest round succeeded after the fuzzer stopped')
  for (const [protocol, s] of Object.entries(r.protocols)) {
    if (s.leftOpen > 0) out.push(`${s.leftOpen} ${protocol} stream(s) stayed open past the idle bound`)
  }
  return out
}

// ------------------------------------------------------------------ agent processes

interface Agent {
  readonly index: number
  readonly process: AgentProcess
  readonly metricsUrl: string
  readonly sidecarUrl: string
  readonly p2pAddr: string
  exited: boolean
}

/** Starts of one agent whose chosen port another socket took before the agent bound it. */
const PORT_ATTEMPTS = 3

async function startAgents (n: number, logDir: string, choosePorts: (n: number) => Promise<number[]>, log: (line: string) => void): Promise<{ agents: Agent[], targetId: PeerId, portRestarts: number }> {
  const key = await generateKeyPair('Ed25519')
  const targetId = peerIdFromPrivateKey(key)
  const agents: Agent[] = []
  let bootstrap = ''
  let portRestarts = 0
  const launch = (i: number, [p2pPort, metricsPort, sidecarPort]: readonly number[]): Agent => {
    const p2pAddr = `/ip4/127.0.0.1/tcp/${p2pPort}/p2p/${i === 0 ? targetId.toString() : ''}`
    if (i === 0) bootstrap = p2pAddr
    const env = agentEnv({
      swarm: 'fuzz',
      podName: `fuzz-${i}`,
      podIP: '127.0.0.1',
      p2pPort,
      metricsPort,
      prefix: PREFIX,
      targetGroupSize: n,
      minGroupSize: 2,
      averagingExpiration: '3s',
      requestTimeout: '1500ms',
      allreduceTimeout: '20s',
      // The sidecar workload: the agent averages when driveRounds() asks, and trains nothing, so
      // the CPU of this small machine goes to the handlers under test, not to tfjs.
      workload: 'sidecar',
      sidecarPort,
      logLevel: 'info',
      ...(i === 0 ? { identityKey: Buffer.from(privateKeyToProtobuf(key)).toString('base64') } : { bootstrapPeers: bootstrap })
    })
    const agent: Agent = {
      index: i,
      process: new AgentProcess({ name: `fuzz-${i}`, env, logDir, onExit: () => { agent.exited = true } }),
      metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
      sidecarUrl: `http://127.0.0.1:${sidecarPort}`,
      p2pAddr,
      exited: false
    }
    agent.process.start()
    return agent
  }
  // The ports are chosen by binding port 0 and released before the agent binds them, and every
  // outbound connection on this machine (this harness's own scrapes too) takes its local port from
  // the same ephemeral range, so one can be taken meanwhile (a run under load lost fuzz-1 to "listen
  // EADDRINUSE"). An agent that exits so is started again on ports chosen anew.
  const serving = async (i: number): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      const agent = agents[i]
      await waitFor(async () => agent.exited || (await scrape(agent)) != null, 300_000, `agent fuzz-${i} did not serve /metrics within 300 s`)
      if (!agent.exited) return
      const why = lastLine(agent.process.logPath)
      if (!why.includes('is already in use') || attempt === PORT_ATTEMPTS) throw new Error(`agent fuzz-${i} exited before it served /metrics: ${why}`)
      log(`fuzz-${i}: a port chosen for it was taken before it bound it (${why}); starting it again on new ports`)
      agent.process.close()
      portRestarts++
      agents[i] = launch(i, await choosePorts(3))
    }
  }
  try {
    // Every agent's ports at once: chosen per agent, a port the agent before had been given but not
    // yet bound was free to hand out again.
    const ports = await choosePorts(3 * n)
    agents.push(launch(0, ports.slice(0, 3)))
    // The bootstrap agent must listen before the others dial it (minutes on a machine loaded to tens).
    await serving(0)
    for (let i = 1; i < n; i++) agents.push(launch(i, ports.slice(3 * i, 3 * i + 3)))
    await Promise.all(agents.map(async (_, i) => { if (i > 0) await serving(i) }))
  } catch (err) {
    await stopAgents(agents.map(a => a.process))
    throw err
  }
  return { agents, targetId, portRestarts }
}

const TENSOR_ELEMENTS = 16_384

/**
 * The honest trainers: each registers one tensor with its agent, then asks for a round about
 * every ROUND_GAP_MS until stopped. Outcomes are read from the agents' own metrics.
 */
function driveRounds (agents: readonly Agent[], signal: AbortSignal): Promise<void> {
  const post = async (url: string, body: unknown, timeoutMs: number): Promise<Response> =>
    await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]) })
  return Promise.all(agents.map(async (agent) => {
    const values = new Float32Array(TENSOR_ELEMENTS).map((_, k) => agent.index + k / TENSOR_ELEMENTS)
    const encoded = Buffer.from(values.buffer).toString('base64')
    await waitFor(async () => await post(`${agent.sidecarUrl}/v1/register`, { tensors: [{ name: 'w', shape: [TENSOR_ELEMENTS] }] }, 30_000).then(r => r.status < 300, () => false), 60_000,
      `agent ${agent.index}'s sidecar API did not accept a register within 60 s`)
    while (!signal.aborted && !agent.exited) {
      await post(`${agent.sidecarUrl}/v1/step`, { tensors: { w: encoded }, weight: 1, timeout: 10 }, 40_000).then(async r => await r.arrayBuffer(), () => null)
      await sleep(ROUND_GAP_MS)
    }
  })).then(() => {})
}

const ROUND_GAP_MS = 1000
/**
 * How long the fuzzer waits for the agent to close a stream. The agent's longest read timeout is
 * Kademlia's 10 s (ours: 1.5 s requests, 5 s aggregate headers); the rest is slack for a machine
 * whose load average reaches tens.
 */
const IDLE_BOUND_MS = 30_000

interface Scrape { readonly ok: number, readonly failed: number, readonly rssBytes: number }

async function scrape (agent: Agent): Promise<Scrape | null> {
  try {
    const res = await fetch(agent.metricsUrl, { signal: AbortSignal.timeout(10_000) })
    if (!res.ok) return null
    const text = await res.text()
    const value = (re: RegExp): number => { const m = re.exec(text); return m != null ? Number(m[1]) : 0 }
    return {
      ok: value(/^averaging_rounds_total\{[^}]*outcome="success"[^}]*\} (\S+)$/m) + value(/^averaging_rounds_total\{[^}]*outcome="partial"[^}]*\} (\S+)$/m),
      failed: value(/^averaging_rounds_total\{[^}]*outcome="failure"[^}]*\} (\S+)$/m),
      rssBytes: value(/^process_resident_memory_bytes(?:\{[^}]*\})? (\S+)$/m)
    }
  } catch {
    return null
  }
}

async function roundsOf (agents: readonly Agent[]): Promise<PhaseRounds & { perAgent: number[] }> {
  const scrapes = await Promise.all(agents.map(scrape))
  return {
    ok: scrapes.reduce((s, x) => s + (x?.ok ?? 0), 0),
    failed: scrapes.reduce((s, x) => s + (x?.failed ?? 0), 0),
    perAgent: scrapes.map(x => x?.ok ?? 0)
  }
}

/** VmRSS and VmHWM of a process, in MiB, from /proc (Linux). */
function procMemory (pid: number): { rss: number, hwm: number } | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN)
    return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 }
  } catch {
    return null
  }
}

/** The last line an agent wrote to its log, for an error that names why it stopped. */
function lastLine (path: string): string {
  try {
    return readFileSync(path, 'utf8').trim().split('\n').at(-1) ?? '(empty log)'
  } catch {
    return `(no log at ${path})`
  }
}

async function waitFor (check: () => Promise<boolean>, ms: number, message: string): Promise<void> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check()) return
    await sleep(250)
  }
  throw new Error(message)
}

async function sleep (ms: number): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, ms))
}

// ------------------------------------------------------------------ message generators

/** Random choices of the run, reproducible from its seed (the one seeded PRNG, agent/util/random.ts). */
class Rng {
  private readonly random: () => number
  constructor (seed: number) { this.random = seededRandom(`fuzz-${seed}`) }
  next (): number { return Math.floor(this.random() * 4294967296) }
  int (n: number): number { return this.next() % n }
  bytes (n: number): Uint8Array { const out = new Uint8Array(n); for (let i = 0; i < n; i++) out[i] = this.next() & 0xff; return out }
  pick<T> (items: readonly T[]): T { return items[this.int(items.length)] }
}

/** How a protocol frames its messages on the wire. */
type Framing = 'u32le' | 'varint'

interface Target {
  readonly protocol: string
  readonly framing: Framing
  /** Valid messages of this protocol's request types, to mutate or send as they are. */
  readonly valid: (rng: Rng) => Uint8Array[]
  /** Share of the message budget (our own protocols get most of it). */
  readonly weight: number
}

function frameU32 (payload: Uint8Array, announced = payload.byteLength): Uint8Array {
  const out = new Uint8Array(4 + payload.byteLength)
  new DataView(out.buffer).setUint32(0, announced >>> 0, true)
  out.set(payload, 4)
  return out
}

function varint (n: number): Uint8Array {
  const out: number[] = []
  let v = BigInt(n)
  do { let b = Number(v & 0x7fn); v >>= 7n; if (v > 0n) b |= 0x80; out.push(b) } while (v > 0n)
  return Uint8Array.from(out)
}

function frameVarint (payload: Uint8Array, announced = payload.byteLength): Uint8Array {
  const head = varint(announced)
  const out = new Uint8Array(head.byteLength + payload.byteLength)
  out.set(head, 0)
  out.set(payload, head.byteLength)
  return out
}

function frame (framing: Framing, payload: Uint8Array, announced?: number): Uint8Array {
  return framing === 'u32le' ? frameU32(payload, announced) : frameVarint(payload, announced)
}

/** Byte flips, overwrites, insertions, deletions and truncations of a valid message. */
function mutate (rng: Rng, input: Uint8Array): Uint8Array {
  let bytes = Array.from(input)
  const edits = 1 + rng.int(6)
  for (let e = 0; e < edits; e++) {
    const at = bytes.length === 0 ? 0 : rng.int(bytes.length)
    switch (rng.int(6)) {
      case 0: if (bytes.length > 0) bytes[at] ^= 1 << rng.int(8); break
      case 1: if (bytes.length > 0) bytes[at] = rng.next() & 0xff; break
      case 2: bytes.splice(at, 0, ...rng.bytes(1 + rng.int(16))); break
      case 3: bytes.splice(at, 1 + rng.int(8)); break
      case 4: bytes = bytes.slice(0, at); break
      // A huge varint length inside a protobuf field: decoders must not allocate for it.
      default: bytes.splice(at, 0, 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f); break
    }
  }
  return Uint8Array.from(bytes)
}

function targetsFor (self: PeerId, protocols: readonly string[]): Target[] {
  const selfBytes = new TextEncoder().encode(self.toString())
  const now = (): number => Date.now() / 1000
  const ours: Record<string, Omit<Target, 'protocol'>> = {
    [RENDEZVOUS_PROTOCOL]: {
      framing: 'u32le',
      weight: 4,
      valid: (rng) => [rng.int(2) === 0
        ? pb.RendezvousRequest.encode({ key: `${PREFIX}.0b${rng.int(4).toString(2)}` })
        : pb.RendezvousRequest.encode({
          key: `${PREFIX}.fuzz${rng.int(100_000)}`,
          store: { peerId: selfBytes, expiration: now() + 1 + rng.int(60), looking: true, priority: rng.int(10), addrs: [rng.bytes(rng.int(300))], dataAddrs: [rng.bytes(rng.int(300))] }
        })]
    },
    [joinProtocol(PREFIX)]: {
      framing: 'u32le',
      weight: 4,
      valid: (rng) => {
        const confirms = rng.int(2) === 0
        const request = pb.JoinRequest.encode({
          schemaHash: rng.bytes(32),
          expiration: now() + rng.int(5),
          groupKey: `${PREFIX}.0b`,
          // Cast: the data-port field is newer than some trees this runs against.
          info: { mode: pb.PeerMode.NODE, weight: 1, bandwidth: rng.int(2) === 0 ? undefined : 100, userData: rng.bytes(rng.int(64)), dataAddrs: rng.int(2) === 0 ? [] : [rng.bytes(rng.int(300))] } as pb.PeerInfo,
          confirms
        })
        // An asker that confirms follows its request with a JoinConfirm (join-handler.ts), or not.
        return confirms && rng.int(2) === 0 ? [request, pb.JoinConfirm.encode({ following: rng.int(2) === 0 })] : [request]
      }
    },
    [aggregateProtocol(PREFIX)]: {
      framing: 'u32le',
      weight: 4,
      valid: (rng) => [
        pb.AggregateHeader.encode({ groupId: rng.bytes(20) }),
        ...Array.from({ length: 1 + rng.int(3) }, (_, k) => pb.TensorPart.encode({ partIndex: k, compression: rng.pick(COMPRESSIONS), data: rng.bytes(rng.int(4096)) }))
      ]
    },
    [stateProtocol(PREFIX)]: {
      framing: 'u32le',
      weight: 3,
      valid: () => [pb.StateRequest.encode({})]
    }
  }
  return protocols.map(protocol => {
    const known = ours[protocol]
    // libp2p's own protocols (Kademlia, identify, ping) frame with varints; we send them noise.
    return known != null ? { protocol, ...known } : { protocol, framing: 'varint' as const, weight: 1, valid: (rng: Rng) => [rng.bytes(rng.int(256))] }
  })
}

type Scenario = 'random-bytes' | 'random-frames' | 'mutated' | 'valid' | 'absurd-length' | 'truncated' | 'flood' | 'burst'
/** Weighted: mutated frames most often; a burst opens BURST_STREAMS streams, so it comes rarely. */
const SCENARIOS: readonly Scenario[] = [
  ...Array<Scenario>(4).fill('random-bytes'), ...Array<Scenario>(4).fill('random-frames'), ...Array<Scenario>(22).fill('mutated'),
  ...Array<Scenario>(3).fill('valid'), ...Array<Scenario>(3).fill('absurd-length'), ...Array<Scenario>(3).fill('truncated'), 'flood', 'burst'
]
/** Above every per-connection stream bound of our protocols except the aggregate one (1024). */
const BURST_STREAMS = 40

/** The writes of one stream: what goes out, and whether we half-close after it. */
function messagesFor (rng: Rng, target: Target, scenario: Scenario): { writes: Uint8Array[], closeWrite: boolean } {
  // Several messages per stream: all are on the wire before the agent can answer the first.
  const count = 1 + rng.int(16)
  switch (scenario) {
    case 'random-bytes':
      return { writes: Array.from({ length: count }, () => rng.bytes(1 + rng.int(4096))), closeWrite: rng.int(2) === 0 }
    case 'random-frames':
      return { writes: Array.from({ length: count }, () => frame(target.framing, rng.bytes(rng.int(2048)))), closeWrite: rng.int(2) === 0 }
    case 'mutated': {
      // Sometimes the first message intact, so the mutation reaches the later ones (aggregate parts).
      const writes: Uint8Array[] = []
      while (writes.length < count) {
        const valid = target.valid(rng)
        const keepFirst = valid.length > 1 && rng.int(2) === 0
        writes.push(...valid.map((m, i) => frame(target.framing, keepFirst && i === 0 ? m : mutate(rng, m))))
      }
      return { writes, closeWrite: rng.int(2) === 0 }
    }
    case 'flood': {
      // A valid first message, then up to 1 MiB of large frames the handler never asked for.
      const first = target.valid(rng)[0]
      const writes = [frame(target.framing, first)]
      for (let k = 0; k < count * 2; k++) writes.push(frame(target.framing, rng.bytes(64 * 1024)))
      return { writes, closeWrite: false }
    }
    case 'valid':
    case 'burst':
      return { writes: target.valid(rng).map(m => frame(target.framing, m)), closeWrite: true }
    case 'absurd-length': {
      const announced = rng.pick([0xffffffff, 0x80000000, 0x7fffffff, 64 * 1024 * 1024 + 1, 1 + rng.int(0x7fffffff)])
      return { writes: [frame(target.framing, rng.bytes(rng.int(64)), announced)], closeWrite: false }
    }
    case 'truncated': {
      const payload = rng.bytes(16 + rng.int(2048))
      const whole = frame(target.framing, payload, payload.byteLength + 1 + rng.int(4096))
      return { writes: [whole.subarray(0, Math.max(1, rng.int(whole.byteLength)))], closeWrite: true }
    }
  }
}

// ------------------------------------------------------------------ the fuzzer peer

/** Resolves true once the remote closed its side or reset the stream, false after ms. */
async function closedByRemote (stream: Stream, ms: number): Promise<boolean> {
  // Not `status !== 'open'`: our own half-close moves it to 'closing'.
  const remoteDone = (): boolean => ['closed', 'aborted', 'reset'].includes(stream.status) || stream.remoteWriteStatus !== 'writable'
  if (remoteDone()) return true
  return await new Promise<boolean>(resolve => {
    const finish = (value: boolean): void => {
      clearTimeout(timer)
      stream.removeEventListener('close', onEvent)
      stream.removeEventListener('remoteCloseWrite', onEvent)
      resolve(value)
    }
    const onEvent = (): void => { finish(true) }
    const timer = setTimeout(() => { finish(remoteDone()) }, ms)
    stream.addEventListener('close', onEvent)
    stream.addEventListener('remoteCloseWrite', onEvent)
  })
}

function emptyStats (): ProtocolStats {
  return { streams: 0, messages: 0, closedByAgent: 0, refused: 0, leftOpen: 0, idle: 0, idleClosed: 0, maxCloseMs: 0 }
}

class Fuzzer {
  readonly stats: Record<string, ProtocolStats> = {}
  private sent = 0
  /** Streams tried: ends the run even if the agent refuses every stream (then it fails on the message count). */
  private attempts = 0
  private readonly rng: Rng

  constructor (private readonly node: SwarmNode, private readonly target: PeerId, private readonly targets: readonly Target[], seed: number,
    /** Longest any handler may leave a stream idle: the agent's longest read timeout plus slack. */
    private readonly idleBoundMs: number) {
    this.rng = new Rng(seed)
    for (const t of targets) this.stats[t.protocol] = emptyStats()
  }

  get messages (): number { return this.sent }

  async run (budget: number, concurrency: number, maxSeconds = Infinity): Promise<void> {
    const stopAt = Date.now() + maxSeconds * 1000
    const idle = this.idleStreams()
    const totalWeight = this.targets.reduce((s, t) => s + t.weight, 0)
    const pickTarget = (): Target => {
      let r = this.rng.int(totalWeight)
      for (const t of this.targets) { if (r < t.weight) return t; r -= t.weight }
      return this.targets[0]
    }
    const worker = async (): Promise<void> => {
      while (this.sent < budget && this.attempts < 2 * budget && Date.now() < stopAt) {
        const target = pickTarget()
        const scenario = this.rng.pick(SCENARIOS)
        if (scenario === 'burst') await this.burst(target, BURST_STREAMS)
        else await this.oneStream(target, messagesFor(this.rng, target, scenario))
      }
    }
    await Promise.all([idle, ...Array.from({ length: concurrency }, worker)])
  }

  /**
   * Holds `n` aggregate streams open at once, each a valid header of one of a few unknown groups
   * (the router waits for such a group to register) followed by 3 MiB of part-sized frames.
   */
  async aggregateFlood (protocol: string, n: number): Promise<{ opened: number, mibSent: number }> {
    const groups = Array.from({ length: 16 }, () => this.rng.bytes(20))
    let opened = 0
    let bytes = 0
    const streams = await Promise.all(Array.from({ length: n }, async (_, i) => {
      const stream = await this.open(protocol)
      if (stream == null) return null
      opened++
      stream.send(frameU32(pb.AggregateHeader.encode({ groupId: groups[i % groups.length] })))
      for (let k = 0; k < 48 && stream.status === 'open'; k++) {
        const part = frameU32(pb.TensorPart.encode({ partIndex: k, compression: pb.Compression.NONE, data: this.rng.bytes(64 * 1024) }))
        stream.send(part)
        bytes += part.byteLength
      }
      return stream
    }))
    await sleep(3000)
    for (const s of streams) s?.abort(new Error('flood done'))
    return { opened, mibSent: bytes / 1048576 }
  }

  /** Opens a stream per protocol and sends nothing: the agent must close it on its own. */
  private async idleStreams (): Promise<void> {
    await Promise.all(this.targets.flatMap(t => [0, 1].map(async () => {
      const stats = this.stats[t.protocol]
      const stream = await this.open(t.protocol)
      if (stream == null) return
      stats.idle++
      if (await closedByRemote(stream, this.idleBoundMs)) stats.idleClosed++
      stream.abort(new Error('fuzz stream done'))
    })))
  }

  /** Many streams at once on one protocol, beyond any per-connection bound the agent sets. */
  private async burst (target: Target, n: number): Promise<void> {
    await Promise.all(Array.from({ length: n }, async () => { await this.oneStream(target, messagesFor(this.rng, target, 'burst')) }))
  }

  private async open (protocol: string): Promise<Stream | null> {
    const stats = this.stats[protocol]
    stats.streams++
    this.attempts++
    try {
      return await this.node.dialProtocol(this.target, protocol, { signal: AbortSignal.timeout(this.idleBoundMs), maxOutboundStreams: 100_000 })
    } catch {
      stats.refused++
      return null
    }
  }

  private async oneStream (target: Target, plan: { writes: Uint8Array[], closeWrite: boolean }): Promise<void> {
    const stats = this.stats[target.protocol]
    const stream = await this.open(target.protocol)
    if (stream == null) return
    try {
      for (const bytes of plan.writes) {
        if (stream.status !== 'open' || stream.writeStatus !== 'writable') break
        stream.send(bytes)
        this.sent++
        stats.messages++
      }
      const lastWrite = Date.now()
      if (plan.closeWrite && stream.status === 'open') await stream.close({ signal: AbortSignal.timeout(this.idleBoundMs) }).catch(() => {})
      if (await closedByRemote(stream, this.idleBoundMs)) {
        stats.closedByAgent++
        stats.maxCloseMs = Math.max(stats.maxCloseMs, Date.now() - lastWrite)
      } else {
        stats.leftOpen++
      }
    } finally {
      stream.abort(new Error('fuzz stream done'))
    }
  }
}

// ------------------------------------------------------------------ the run

export async function runFuzz (options: FuzzOptions): Promise<FuzzReport> {
  const log = options.log ?? (() => {})
  const n = options.agents ?? 4
  const logDir = mkdtempSync(join(tmpdir(), 'avs-fuzz-'))
  log(`agent logs in ${logDir}`)
  const { agents, targetId, portRestarts } = await startAgents(n, logDir, options.choosePorts ?? (async (k) => await freePorts(k)), log)
  const target = agents[0]
  const stopDriving = new AbortController()
  const driving = driveRounds(agents, stopDriving.signal).catch((err: unknown) => { log(`honest trainers stopped: ${err instanceof Error ? err.message : String(err)}`) })
  let fuzzNode: SwarmNode | null = null
  let sampler: NodeJS.Timeout | undefined
  const rss: number[] = []
  try {
    // Honest averaging first: every agent has finished a round before the fuzzer connects.
    await waitFor(async () => {
      // An agent that exited before its first round (it could not start) will not average: say which, and why, now.
      const gone = agents.find(a => a.exited)
      if (gone != null) throw new Error(`agent fuzz-${gone.index} exited before the honest rounds: ${lastLine(gone.process.logPath)}`)
      return (await roundsOf(agents)).perAgent.every(r => r >= 1)
    }, 300_000, 'the honest agents did not each finish a round within 300 s')
    const baselineSamples: number[] = []
    for (let i = 0; i < 8; i++) { const m = procMemory(target.process.pid!); if (m != null) baselineSamples.push(m.rss); await sleep(250) }
    baselineSamples.sort((a, b) => a - b)
    const baseline = baselineSamples[baselineSamples.length >> 1]
    const before = await roundsOf(agents)
    log(`honest rounds before fuzzing: ${before.ok} (per agent ${before.perAgent.join(', ')}), target RSS ${baseline.toFixed(0)} MiB`)

    fuzzNode = await createSwarmNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
    // A client-mode DHT: the honest agents never pick the fuzzer as a rendezvous replica, so
    // what is measured is the handlers' robustness, not a missing replica.
    await fuzzNode.services.dht.setMode('client')
    await fuzzNode.dial(multiaddr(target.p2pAddr))
    let protocols: string[] = []
    await waitFor(async () => {
      protocols = (await fuzzNode!.peerStore.get(targetId)).protocols
      return protocols.includes(RENDEZVOUS_PROTOCOL) && protocols.includes(stateProtocol(PREFIX))
    }, 20_000, 'the fuzzer did not learn the target\'s protocols within 20 s')
    const fuzzer = new Fuzzer(fuzzNode, targetId, targetsFor(fuzzNode.peerId, protocols), options.seed ?? 1, IDLE_BOUND_MS)
    sampler = setInterval(() => { const m = procMemory(target.process.pid!); if (m != null) rss.push(m.rss) }, 200)
    const started = Date.now()
    const targetBefore = (await scrape(target))?.ok ?? 0
    const progress = setInterval(() => { log(`${fuzzer.messages} messages sent, target RSS ${rss.at(-1)?.toFixed(0) ?? '?'} MiB`) }, 10_000)
    try {
      await fuzzer.run(options.messages, options.concurrency ?? 64, options.maxSeconds)
    } finally {
      clearInterval(progress)
    }
    const seconds = (Date.now() - started) / 1000
    const during = await roundsOf(agents)
    const targetDuring = ((await scrape(target))?.ok ?? 0) - targetBefore
    log(`fuzzing done: ${fuzzer.messages} messages in ${seconds.toFixed(1)} s; watching honest rounds for ${options.afterSeconds ?? 15} s`)
    // After: every agent must average again, within the watch window.
    const afterDeadline = Date.now() + (options.afterSeconds ?? 15) * 1000
    let after = await roundsOf(agents)
    while (Date.now() < afterDeadline && !after.perAgent.every((r, i) => r > during.perAgent[i])) {
      await sleep(500)
      after = await roundsOf(agents)
    }
    const afterMem = procMemory(target.process.pid!)
    const crashes = agents.filter(a => a.exited).length
    const asserted = rss.slice()
    const healthy = !target.exited && (await fetch(target.metricsUrl.replace('/metrics', '/healthz')).then(r => r.ok, () => false))
    let flood: FuzzReport['flood']
    if ((options.aggregateFlood ?? 0) > 0) {
      // Last, once every asserted figure is taken: what the flood leaves behind is not measured.
      const fromSample = rss.length
      const sent = await fuzzer.aggregateFlood(aggregateProtocol(PREFIX), options.aggregateFlood!)
      await sleep(1000)
      flood = { streams: options.aggregateFlood!, ...sent, rssMaxMiB: Math.max(...rss.slice(fromSample)), targetSurvived: !target.exited }
      log(`aggregate flood: ${sent.opened} streams held, ${sent.mibSent.toFixed(0)} MiB sent, target RSS max ${flood.rssMaxMiB.toFixed(0)} MiB`)
    }
    return {
      protocols: fuzzer.stats,
      messages: fuzzer.messages,
      seconds,
      rssBaselineMiB: baseline,
      rssMinMiB: Math.min(...asserted),
      rssMaxMiB: Math.max(...asserted, afterMem?.rss ?? 0),
      rssAfterMiB: afterMem?.rss ?? NaN,
      hwmMiB: afterMem?.hwm ?? NaN,
      rssBoundMiB: rssBound(baseline),
      rounds: {
        before: { ok: before.ok, failed: before.failed },
        during: { ok: during.ok - before.ok, failed: during.failed - before.failed },
        after: { ok: after.ok - during.ok, failed: after.failed - during.failed }
      },
      targetRoundsDuring: targetDuring,
      crashes,
      targetAlive: healthy,
      portRestarts,
      flood,
      logDir
    }
  } finally {
    clearInterval(sampler)
    stopDriving.abort()
    await driving
    try { await (fuzzNode as SwarmNode | null)?.stop() } catch { /* already stopping */ }
    await stopAgents(agents.map(a => a.process))
  }
}

export function formatReport (r: FuzzReport): string {
  const rows = [['protocol', 'streams', 'messages', 'closed by agent', 'slowest close ms', 'refused', 'left open', 'idle closed']]
  for (const [protocol, s] of Object.entries(r.protocols)) {
    rows.push([protocol, String(s.streams), String(s.messages), String(s.closedByAgent), String(s.maxCloseMs), String(s.refused), String(s.leftOpen), `${s.idleClosed}/${s.idle}`])
  }
  const widths = rows[0].map((_, c) => Math.max(...rows.map(row => row[c].length)))
  const table = rows.map(row => row.map((cell, c) => c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c])).join('  ')).join('\n')
  const phase = (p: PhaseRounds): string => `${p.ok} ok / ${p.failed} failed`
  return [
    table,
    '',
    `messages sent        ${r.messages} in ${r.seconds.toFixed(1)} s (${(r.messages / r.seconds).toFixed(0)}/s)`,
    `target RSS           baseline ${r.rssBaselineMiB.toFixed(0)} MiB, min ${r.rssMinMiB.toFixed(0)}, max ${r.rssMaxMiB.toFixed(0)}, after ${r.rssAfterMiB.toFixed(0)}, VmHWM ${r.hwmMiB.toFixed(0)} (bound ${r.rssBoundMiB.toFixed(0)} = 2 x baseline + 100)`,
    `honest rounds        before ${phase(r.rounds.before)}; during ${phase(r.rounds.during)} (target ${r.targetRoundsDuring}); after ${phase(r.rounds.after)}`,
    `crashes              ${r.crashes}${r.targetAlive ? '' : ' (target not healthy at the end)'}`,
    `port restarts        ${r.portRestarts} (agents started again because a port chosen for them was taken before they bound it)`,
    ...(r.flood != null ? [`aggregate flood      ${r.flood.opened}/${r.flood.streams} streams held with a valid header for an unknown group, ${r.flood.mibSent.toFixed(0)} MiB sent: target RSS max ${r.flood.rssMaxMiB.toFixed(0)} MiB, ${r.flood.targetSurvived ? 'target alive' : 'TARGET EXITED'} (not asserted: agent/allreduce is the lead's)`] : []),
    `agent logs           ${r.logDir}`
  ].join('\n')
}

function flag (name: string, fallback: number, zeroAllowed = false): number {
  const i = process.argv.indexOf(`--${name}`)
  if (i < 0) return fallback
  const value = Number(process.argv[i + 1])
  if (!(value > 0 || (zeroAllowed && value === 0))) throw new Error(`--${name} needs a positive number, got "${process.argv[i + 1]}"`)
  return value
}

async function main (): Promise<void> {
  const messages = flag('messages', 100_000)
  const report = await runFuzz({
    messages,
    agents: flag('agents', 4),
    concurrency: flag('concurrency', 64),
    seed: flag('seed', 1),
    afterSeconds: flag('after', 20),
    aggregateFlood: flag('aggregate-flood', 0, true),
    maxSeconds: flag('max-seconds', Infinity),
    log: (line) => { process.stderr.write(`${line}\n`) }
  })
  process.stdout.write(`${formatReport(report)}\n`)
  const problems = violations(report, messages)
  if (problems.length > 0) {
    process.stdout.write(`FAILED:\n${problems.map(p => `  - ${p}`).join('\n')}\n`)
    process.exitCode = 1
  } else {
    process.stdout.write('every property held: no crash, memory within the bound, honest rounds during and after, no stream left open\n')
  }
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    process.stderr.write(`fuzz-agent failed: ${err instanceof Error ? err.message : String(err)}\n`)
    process.exitCode = 1
  })
}
