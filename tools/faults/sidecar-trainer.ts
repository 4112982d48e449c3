import { request } from 'node:http'
import { decodeFloat32, encodeFloat32, firstNonFinite } from '../../agent/workloads/sidecar/tensor-codec.js'
import { seededRandom } from '../../agent/util/random.js'

/** How one step of one agent went, as its trainer saw it. */
export interface StepRecord {
  readonly agent: number
  readonly incarnation: number
  /** Attempt number of this agent across its incarnations, from 1. */
  readonly attempt: number
  readonly startedAt: number
  readonly wallMs: number
  readonly averaged: boolean
  readonly error?: string
  readonly groupSize: number
  /** The group's id (hex), when the step averaged. */
  readonly groupId?: string
  readonly peers: readonly string[]
  readonly matchmakingMs?: number
  readonly allreduceMs?: number
  readonly partsKeptLocal: number
  /** Members whose data never reached this agent in the round (it averaged without them). */
  readonly unreachedPeers: readonly string[]
  /** The reply held a NaN or infinity (the values are then not adopted). */
  readonly nonFinite: boolean
  /** The HTTP request itself failed (agent gone or frozen past the client's limit). */
  readonly transportError?: string
  readonly values: Float32Array
}

/** A trainer (re)started: where its first values came from. */
export interface StartRecord {
  readonly agent: number
  readonly incarnation: number
  readonly at: number
  /** Time from the trainer's start to a registered averager. */
  readonly registerMs: number
  /** The sidecar API's origin after register: "peers" when the agent loaded the swarm's state. */
  readonly origin: string
  readonly peerId: string
  readonly values: Float32Array
}

export interface TrainerOptions {
  readonly agent: number
  readonly incarnation: number
  readonly baseUrl: string
  readonly elements: number
  /** Seed of this agent's initial values (used unless the agent loaded the swarm's state). */
  readonly seed: string
  /** Mean of the initial values: lets a run start two halves far apart. */
  readonly offset?: number
  /**
   * Start from the state the agent downloaded (origin "peers"), as a restarted trainer must. A
   * trainer starting a fresh run keeps its own initial values: at a swarm's start the donors
   * serve tensors no trainer has written yet (zeros).
   */
  readonly adoptPeerState: boolean
  /** Milliseconds of "training" between steps (the trainer only waits: it averages, never trains). */
  readonly periodMs: number
  /**
   * Train while the step runs, as ParameterAverager.step(wait=False) lets a PyTorch trainer: an
   * iteration lasts the longer of the training and the step instead of their sum, so a slow round
   * (a member killed or frozen) costs the trainer only what it outlasts the training.
   */
  readonly overlap?: boolean
  /** Client-side limit of one step request; a step past it is a failure the run reports. */
  readonly stepLimitMs: number
  /** Shared across incarnations: attempts made so far and the total to make. */
  readonly budget: { attempts: number, rounds: number }
  readonly onStart: (r: StartRecord) => void
  readonly onStep: (r: StepRecord) => void
  /** Past its own budget the trainer goes on stepping while this says so (others still need peers). */
  readonly keepGoing?: () => boolean
  /** Changes the values before each step (the partition run's "training" drift); returns new values. */
  readonly beforeStep?: (values: Float32Array) => Float32Array
  /** Called as a step request leaves, so a run can aim faults at agents mid-round. */
  readonly onAttempt?: (agent: number, attempt: number) => void
  readonly signal: AbortSignal
}

/** The initial values of agent `seed`: normal noise around `offset`, deterministic. */
export function initialValues (seed: string, elements: number, offset = 0): Float32Array {
  const random = seededRandom(seed)
  const out = new Float32Array(elements)
  for (let i = 0; i < elements; i++) out[i] = offset + Math.sqrt(-2 * Math.log(random() + 1e-12)) * Math.cos(2 * Math.PI * random())
  return out
}

/**
 * A sidecar trainer that only averages: it registers one tensor, starts from the swarm's state
 * when asked to and the agent downloaded one (origin "peers"), else from its own initial values, then steps
 * until the shared budget is spent. With pure averaging every value stays inside the range of
 * the swarm's values, so the spread between agents can only fall; anything else is a fault.
 */
export async function runTrainer (o: TrainerOptions): Promise<void> {
  const started = Date.now()
  await register(o)
  const state = await getJson(`${o.baseUrl}/v1/state`, o.signal, 30_000) as { origin: string, tensors: { w: string } }
  const status = await getJson(`${o.baseUrl}/v1/status`, o.signal, 30_000) as { peerId: string }
  let values = o.adoptPeerState && state.origin === 'peers' ? decodeFloat32(state.tensors.w) ?? new Float32Array(o.elements) : initialValues(o.seed, o.elements, o.offset)
  o.onStart({ agent: o.agent, incarnation: o.incarnation, at: Date.now(), registerMs: Date.now() - started, origin: state.origin, peerId: status.peerId, values })
  while ((o.budget.attempts < o.budget.rounds || o.keepGoing?.() === true) && !o.signal.aborted) {
    const training = sleep(o.periodMs * (0.75 + Math.random() * 0.5), o.signal)
    if (o.overlap !== true) await training
    if (o.signal.aborted) return
    o.budget.attempts++
    const attempt = o.budget.attempts
    const t0 = Date.now()
    o.onAttempt?.(o.agent, attempt)
    if (o.beforeStep !== undefined) values = o.beforeStep(values)
    try {
      const reply = await postJson(`${o.baseUrl}/v1/step`, { tensors: { w: encodeFloat32(values) }, weight: 1 }, o.signal, o.stepLimitMs) as {
        averaged: boolean, error?: string, groupId?: string, groupSize: number, peers: string[], matchmakingMs?: number, allreduceMs?: number, partsKeptLocal: number, unreachedPeers?: string[], tensors: { w: string }
      }
      const got = decodeFloat32(reply.tensors.w)
      const nonFinite = got === undefined || got.length !== o.elements || firstNonFinite(got) >= 0
      if (!nonFinite) values = got
      o.onStep({
        agent: o.agent, incarnation: o.incarnation, attempt, startedAt: t0, wallMs: Date.now() - t0,
        averaged: reply.averaged, error: reply.error, groupId: reply.groupId, groupSize: reply.groupSize, peers: reply.peers,
        matchmakingMs: reply.matchmakingMs, allreduceMs: reply.allreduceMs, partsKeptLocal: reply.partsKeptLocal, unreachedPeers: reply.unreachedPeers ?? [], nonFinite, values
      })
    } catch (err) {
      if (o.signal.aborted) { o.budget.attempts--; return }
      o.onStep({
        agent: o.agent, incarnation: o.incarnation, attempt, startedAt: t0, wallMs: Date.now() - t0, averaged: false,
        groupSize: 0, peers: [], partsKeptLocal: 0, unreachedPeers: [], nonFinite: false, transportError: (err as Error).message, values
      })
    }
    await training
  }
}

/** Registers the tensor, retrying while the agent process starts (connection refused, 503). */
async function register (o: TrainerOptions): Promise<void> {
  // Agents join the DHT before their API listens; on a loaded machine that takes minutes.
  const deadline = Date.now() + 300_000
  for (;;) {
    if (o.signal.aborted) throw new Error('the trainer was stopped before the agent came up')
    const res = await httpJson('POST', `${o.baseUrl}/v1/register`, { tensors: [{ name: 'w', shape: [o.elements] }] }, o.signal, 60_000).catch(() => undefined)
    if (res !== undefined && (res.status === 200 || res.status === 201)) return
    if (res !== undefined && res.status < 500) throw new Error(`register answered ${res.status}: ${JSON.stringify(res.body)}`)
    if (Date.now() > deadline) throw new Error(`agent ${o.agent}'s sidecar API did not accept a register within 300 s`)
    // As the Python client does (AGENT_POLL_SECONDS): part of a restarted agent's way back into rounds.
    await sleep(50, o.signal)
  }
}

async function getJson (url: string, signal: AbortSignal, limitMs: number): Promise<unknown> {
  const res = await httpJson('GET', url, undefined, signal, limitMs)
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body
}

async function postJson (url: string, body: unknown, signal: AbortSignal, limitMs: number): Promise<unknown> {
  const res = await httpJson('POST', url, body, signal, limitMs)
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}: ${JSON.stringify(res.body)}`)
  return res.body
}

/**
 * One request on its own connection (no keep-alive pool): an idle pooled connection that the
 * server closes just as a slow trainer reuses it would show up as a failed step that never was.
 */
async function httpJson (method: string, url: string, body: unknown, signal: AbortSignal, limitMs: number): Promise<{ status: number, body: unknown }> {
  return await new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    const req = request(url, {
      method, agent: false, signal: AbortSignal.any([signal, AbortSignal.timeout(limitMs)]),
      headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': payload.byteLength }
    }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        try { resolve({ status: res.statusCode ?? 0, body: text.length > 0 ? JSON.parse(text) : null }) } catch { resolve({ status: res.statusCode ?? 0, body: text }) }
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(payload)
  })
}

async function sleep (ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return
  await new Promise<void>(resolve => {
    const timer = setTimeout(done, ms)
    function done (): void { clearTimeout(timer); signal.removeEventListener('abort', done); resolve() }
    signal.addEventListener('abort', done, { once: true })
  })
}
