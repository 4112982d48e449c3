import type { IncomingMessage, ServerResponse } from 'node:http'
import type { DecentralizedAverager, NamedTensor, StepResult } from '../../averager.js'
import { elementCount, type TensorSchema } from '../../schema.js'
import { describeError } from '../../errors.js'
import { Mutex } from '../../util/mutex.js'
import type { WorkloadContext } from '../context.js'
import type { StateSharing } from '../../state/state-sharing.js'
import { jsonWithTensors } from './tensor-codec.js'
import { readJsonBody, sendJson, sendJsonChunks } from './http-io.js'
import { REGISTER_BODY_LIMIT, RequestError, describeSchema, parseRegister, parseStep, sameSchema, stepBodyLimit } from './request-parsing.js'

/**
 * Where the averager's tensors came from: never written, downloaded from a peer at register,
 * the trainer's last values (a step that did not average), or a round's mean.
 */
export type TensorOrigin = 'initial' | 'peers' | 'trainer' | 'averaged'

/** The part of StateSharing the sidecar uses: download once at register, then serve as a donor. */
export type SidecarStateSharing = Pick<StateSharing, 'download' | 'start' | 'setPriority' | 'stop'>

export interface StepSummary {
  readonly averaged: boolean
  readonly error?: string
  readonly groupId?: string
  readonly groupSize: number
  readonly peers: readonly string[]
  readonly gathered: Record<string, unknown>
  readonly partsKeptLocal: number
  /** Members whose data never reached us this round (failed as reducers or banned as senders): the round averaged without them. */
  readonly unreachedPeers: readonly string[]
  readonly matchmakingMs?: number
  readonly allreduceMs?: number
  readonly divergence: number
}

/**
 * The sidecar's HTTP API over one averager: the trainer registers its tensors once, then each
 * step hands in its current values and gets the group's mean back. Steps run one at a time, so
 * writing the trainer's values, the round and reading the result are one unit.
 */
export class SidecarApi {
  private schema?: readonly TensorSchema[]
  private registering?: Promise<DecentralizedAverager>
  private averager?: DecentralizedAverager
  private origin: TensorOrigin = 'initial'
  private readonly stepLock = new Mutex()
  private readonly inFlight = new Set<Promise<void>>()
  private closing = false
  private stepsOk = 0
  private stepsFailed = 0
  private lastStep?: StepSummary & { at: string }

  constructor (private readonly ctx: WorkloadContext, private readonly sharing?: SidecarStateSharing) {}

  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const done = this.route(req, res).catch(err => {
      const status = err instanceof RequestError ? err.status : 500
      if (status >= 500) this.ctx.log.warn({ err: describeError(err) }, 'sidecar request failed')
      if (!res.headersSent) sendJson(res, status, { error: describeError(err) }, status === 413)
      else res.destroy()
    }).finally(() => { this.inFlight.delete(done) })
    this.inFlight.add(done)
  }

  private async route (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://sidecar').pathname
    const routes: Record<string, [string, () => Promise<void>]> = {
      '/v1/register': ['POST', async () => { await this.register(req, res) }],
      '/v1/step': ['POST', async () => { await this.step(req, res) }],
      '/v1/state': ['GET', async () => { await this.state(res) }],
      '/v1/status': ['GET', async () => { this.status(res) }]
    }
    const route = routes[path]
    if (route === undefined) throw new RequestError(404, `no endpoint ${path}; the API serves POST /v1/register, POST /v1/step, GET /v1/state and GET /v1/status`)
    if (req.method !== route[0]) {
      res.setHeader('allow', route[0])
      throw new RequestError(405, `${path} takes ${route[0]}, not ${req.method ?? 'an empty method'}`)
    }
    if (this.closing) throw new RequestError(503, 'the agent is shutting down')
    await route[1]()
  }

  private async register (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const schema = parseRegister(await readJsonBody(req, REGISTER_BODY_LIMIT))
    if (this.schema === undefined) {
      this.schema = schema
      this.registering = this.startAverager(schema)
      try {
        this.averager = await this.registering
      } catch (err) {
        this.schema = undefined
        this.registering = undefined
        throw new Error(`the averager could not start: ${describeError(err)}`)
      }
      this.ctx.log.info({ tensors: describeSchema(schema) }, 'sidecar trainer registered its tensors')
      sendJson(res, 201, { created: true, tensors: schema })
      return
    }
    if (!sameSchema(this.schema, schema)) {
      throw new RequestError(409, `this agent already averages ${describeSchema(this.schema)}; restart the agent to register different tensors`)
    }
    await this.registering
    sendJson(res, 200, { created: false, tensors: this.schema })
  }

  /** Zeros, or a live peer's tensors when state sharing is on. */
  private async startAverager (schema: readonly TensorSchema[]): Promise<DecentralizedAverager> {
    const tensors: NamedTensor[] = schema.map(t => ({ ...t, data: new Float32Array(elementCount(t.shape)) }))
    const averager = await this.ctx.createAverager(tensors, { log: msg => { this.ctx.log.debug(msg) } })
    try {
      if (this.sharing !== undefined) await this.loadAndShareState(averager, schema, this.sharing)
    } catch (err) {
      await averager.shutdown()
      throw err
    }
    return averager
  }

  /** A newcomer starts from a live peer's tensors when one offers them, then offers its own. */
  private async loadAndShareState (averager: DecentralizedAverager, schema: readonly TensorSchema[], sharing: SidecarStateSharing): Promise<void> {
    const downloaded = await sharing.download(schema).catch((err: unknown) => {
      this.ctx.log.warn({ err: describeError(err) }, 'state download failed; starting from zeros')
      return null
    })
    if (downloaded !== null) {
      const byName = new Map(downloaded.tensors.map(t => [t.name, t.data]))
      await averager.withTensors(ts => { ts.forEach(t => { const d = byName.get(t.name); if (d !== undefined && d.length === t.data.length) t.data.set(d) }) })
      this.origin = 'peers'
      this.ctx.log.info({ donor: downloaded.donor }, 'sidecar loaded the swarm state from a peer')
    }
    await sharing.start(async () => await averager.withTensors(ts => ({
      tensors: ts.map(t => ({ name: t.name, shape: t.shape, data: t.data.slice() })),
      metadata: { steps: this.stepsOk, origin: this.origin }
    })))
  }

  private registered (): { schema: readonly TensorSchema[], averager: DecentralizedAverager } {
    if (this.schema === undefined || this.averager === undefined) throw new RequestError(409, 'no tensors are registered yet; call POST /v1/register first')
    return { schema: this.schema, averager: this.averager }
  }

  private async step (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { schema, averager } = this.registered()
    const request = parseStep(await readJsonBody(req, stepBodyLimit(schema)), schema)
    const response = await this.stepLock.run(async () => {
      await averager.withTensors(ts => { ts.forEach((t, i) => { t.data.set(request.tensors[i]) }) })
      this.origin = 'trainer'
      let result: StepResult | undefined
      let error: string | undefined
      try {
        result = await averager.step({ weight: request.weight, gather: request.gather, timeout: request.timeout, signal: this.ctx.signal })
        this.origin = 'averaged'
        this.stepsOk++
        this.sharing?.setPriority(this.stepsOk).catch(() => {})
      } catch (err) {
        error = describeError(err)
        this.stepsFailed++
        this.ctx.log.info({ error }, 'sidecar step did not average')
      }
      return await averager.withTensors(ts => {
        const divergence = relativeDistance(request.tensors, ts.map(t => t.data))
        if (result !== undefined) this.ctx.metrics.divergence.set(divergence)
        const summary: StepSummary = {
          averaged: result !== undefined,
          ...(error !== undefined ? { error } : {}),
          groupId: result?.groupId,
          groupSize: result?.peers.length ?? 1,
          peers: result?.peers ?? [],
          gathered: result !== undefined ? Object.fromEntries(result.gathered) : {},
          partsKeptLocal: result?.allreduce.partsKeptLocal ?? 0,
          unreachedPeers: result !== undefined ? [...new Set([...result.allreduce.failedReducers, ...result.allreduce.bannedSenders])] : [],
          matchmakingMs: result?.matchmakingMs,
          allreduceMs: result?.allreduce.durationMs,
          divergence
        }
        this.lastStep = { ...summary, at: new Date().toISOString() }
        return jsonWithTensors({ ...summary }, ts.map(t => [t.name, t.data] as const))
      })
    })
    sendJsonChunks(res, 200, response)
  }

  private async state (res: ServerResponse): Promise<void> {
    const { averager } = this.registered()
    const chunks = await averager.withTensors(ts => jsonWithTensors({ origin: this.origin }, ts.map(t => [t.name, t.data] as const)))
    sendJsonChunks(res, 200, chunks)
  }

  private status (res: ServerResponse): void {
    sendJson(res, 200, {
      peerId: this.ctx.node.peerId.toString(),
      registered: this.averager !== undefined,
      tensors: this.schema ?? [],
      origin: this.origin,
      groupBits: this.averager?.groupBits ?? null,
      steps: { averaged: this.stepsOk, failed: this.stepsFailed },
      lastStep: this.lastStep ?? null
    })
  }

  /** Refuses new requests, lets running ones finish (steps end early once ctx.signal aborts), shuts the averager down. */
  async close (): Promise<void> {
    this.closing = true
    await Promise.allSettled([...this.inFlight])
    await this.registering?.catch(() => {})
    await this.sharing?.stop()
    await this.averager?.shutdown()
  }
}

/** ‖sent − now‖ / ‖sent‖ over all tensors (0 for all-zero input): how far the round moved the trainer. */
export function relativeDistance (sent: readonly Float32Array[], now: readonly Float32Array[]): number {
  let diff = 0
  let norm = 0
  for (let t = 0; t < sent.length; t++) {
    const a = sent[t]
    const b = now[t]
    for (let i = 0; i < a.length; i++) {
      const d = a[i] - b[i]
      diff += d * d
      norm += a[i] * a[i]
    }
  }
  return norm === 0 ? Math.sqrt(diff) : Math.sqrt(diff / norm)
}
