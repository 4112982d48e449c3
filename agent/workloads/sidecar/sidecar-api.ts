import type { IncomingMessage, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { DecentralizedAverager, NamedTensor, StepResult } from '../../averager.js'
import { elementCount } from '../../schema.js'
import { describeError } from '../../errors.js'
import { Mutex } from '../../util/mutex.js'
import type { WorkloadContext } from '../context.js'
import type { DownloadProgress, StateSharing } from '../../state/state-sharing.js'
import { firstNonFinite, jsonWithTensors } from './tensor-codec.js'
import { readJsonBody, sendJson, sendJsonChunks } from './http-io.js'
import {
  MAX_ELEMENTS, REGISTER_BODY_LIMIT, RequestError, checkJsonPath, containerMemoryBytes, describeSchema,
  outerPlan, parseControl, parseRegister, parseReport, parseStep, sameSchema, stepBodyLimit, stepSubset, type StepControl
} from './request-parsing.js'
import { stateIndices, type OuterAveraged, type OuterPlan } from '../../outer/outer-step.js'
import { packedBytes, regionLayout, type StoredTensor } from './region-layout.js'
import { Region, Scratch, bytesOf } from './region.js'
import { DistanceSum, outerDivergence, relativeDistance } from './distance.js'
import { MAX_CONTROL_BYTES, TENSORS_CONTENT_TYPE, controlHead, isTensorsBody, packTensors, readTensorsBody } from './binary-body.js'
import { Completion } from '../completion.js'
import { RestoreSourceError, stateHolders, type CompletedRound, type Snapshot } from '../../checkpoint/checkpointer.js'
import type { TensorSource } from '../../checkpoint/safetensors.js'
import { sharedCopy } from '../../checkpoint/sha256-off-thread.js'

/**
 * Where the averager's tensors came from: never written, downloaded from a peer at register,
 * restored from the swarm's newest checkpoint at register (no peer offered its state), the
 * trainer's values (a step that did not average, or POST /v1/state), or a round's mean.
 */
export type TensorOrigin = 'initial' | 'peers' | 'checkpoint' | 'trainer' | 'averaged'

/** The part of StateSharing the sidecar uses: download once at register, then serve as a donor. */
export type SidecarStateSharing = Pick<StateSharing, 'download' | 'start' | 'setPriority' | 'stop'>

export interface SidecarApiOptions {
  /** AVS_SHM_DIR: the folder trainer regions live in; unset, only the binary and JSON paths work. */
  readonly shmDir?: string
  /** Bound of the agent's float32 copy (default: the container's memory, see containerMemoryBytes). */
  readonly memoryBytes?: number
  /** An error the agent cannot go on after (spec.restoreFrom's checkpoint is missing): the workload ends with it. */
  readonly onFatal?: (err: Error) => void
}

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
  /** The round carried the members' changes since the base they shared, not their values (StepResult.delta). */
  readonly delta: boolean
  /** An outer step's round: it averaged the pseudo-gradients alone, or θ' and m' (StepResult.outer). */
  readonly outer?: OuterAveraged
  /** Rounds the swarm's state has behind it (restored or downloaded rounds count). */
  readonly round: number
  /** The run reached its completion (AVS_COMPLETION_ROUNDS): steps no longer average; the trainer may exit. */
  readonly complete: boolean
  readonly generation: number
  /** Time and bytes spent moving tensors between the trainer's region or body and the agent's float32 copy. */
  readonly copyMs: number
  readonly bytesCopied: number
}

interface Registered { readonly schema: readonly StoredTensor[], readonly averager: DecentralizedAverager }
interface Round { readonly result?: StepResult, readonly error?: string }
interface Copy { ms: number, bytes: number }

/**
 * The sidecar's HTTP API over one averager (docs/trainer-api.md): the trainer registers its
 * tensors once, then each step hands in its current values (through a shared-memory region, a
 * binary body or base64 JSON) and gets the group's mean back. Steps and state transfers run one
 * at a time, so the copy in, the round and the copy out are one unit, and the one scratch and
 * staging buffer are never shared.
 */
export class SidecarApi {
  private schema?: readonly StoredTensor[]
  private registering?: Promise<DecentralizedAverager>
  private averager?: DecentralizedAverager
  private region?: Region
  private origin: TensorOrigin = 'initial'
  /** The state download register waits for, while it runs (GET /v1/status shows it to a trainer waiting on register). */
  private loading: DownloadProgress | undefined
  private generation = 0
  private scratch?: Scratch
  /** The binary path's float32 staging buffer: allocated at the first binary transfer, then reused. */
  private staging?: Float32Array
  private sharingStarted = false
  private readonly stepLock = new Mutex()
  private readonly inFlight = new Set<Promise<void>>()
  private closing = false
  private stepsOk = 0
  private stepsFailed = 0
  /** Rounds behind the averager's state: downloaded or restored, then one more per averaged step. */
  private rounds = 0
  /** The newest round this agent averaged, and its group: the final round when the trainer finishes. */
  private lastCompleted?: CompletedRound
  /** A step after lastCompleted did not average: the tensors may hold the trainer's copy-in or a step alone. */
  private movedSinceRound = false
  private readonly completion: Completion
  private lastStep?: StepSummary & { at: string }
  private readonly memoryBytes: number

  constructor (private readonly ctx: WorkloadContext, private readonly sharing?: SidecarStateSharing, private readonly options: SidecarApiOptions = {}) {
    this.memoryBytes = options.memoryBytes ?? containerMemoryBytes()
    this.completion = new Completion(ctx)
  }

  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const done = this.route(req, res).catch(err => {
      const status = err instanceof RequestError ? err.status : 500
      if (status >= 500) this.ctx.log.warn({ err: describeError(err) }, 'sidecar request failed')
      const code = err instanceof RequestError ? err.code : undefined
      if (!res.headersSent) sendJson(res, status, { error: describeError(err), ...(code === undefined ? {} : { code }) }, status === 413)
      else res.destroy()
    }).finally(() => { this.inFlight.delete(done) })
    this.inFlight.add(done)
  }

  private async route (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://sidecar').pathname
    const routes: Record<string, Record<string, () => Promise<void>>> = {
      '/v1/register': { POST: async () => { await this.register(req, res) } },
      '/v1/step': { POST: async () => { await this.step(req, res) } },
      '/v1/state': { GET: async () => { await this.getState(req, res) }, POST: async () => { await this.setState(req, res) } },
      '/v1/report': { POST: async () => { await this.report(req, res) } },
      '/v1/finish': { POST: async () => { await this.finish(res) } },
      '/v1/status': { GET: async () => { this.status(res) } }
    }
    const route = routes[path]
    if (route === undefined) throw new RequestError(404, `no endpoint ${path}; the API serves /v1/register, /v1/step, /v1/state, /v1/report, /v1/finish and /v1/status`)
    const handler = route[req.method ?? '']
    if (handler === undefined) {
      res.setHeader('allow', Object.keys(route).join(', '))
      throw new RequestError(405, `${path} takes ${Object.keys(route).join(' or ')}, not ${req.method ?? 'an empty method'}`)
    }
    if (this.closing) throw new RequestError(503, 'the agent is shutting down', 'shutting-down')
    await handler()
  }

  private async register (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { schema, region: regionName } = parseRegister(await readJsonBody(req, REGISTER_BODY_LIMIT), this.memoryBytes)
    if (this.schema === undefined) {
      // The region is checked before the averager starts: a bad one fails register with nothing to undo.
      const region = regionName !== undefined ? Region.open(this.options.shmDir, regionName, regionLayout(schema)) : undefined
      this.schema = schema
      this.registering = this.startAverager(schema)
      try {
        this.averager = await this.registering
      } catch (err) {
        region?.close()
        this.schema = undefined
        this.registering = undefined
        throw err instanceof RequestError ? err : new Error(`the averager could not start: ${describeError(err)}`)
      }
      this.region = region
      this.ctx.log.info({ tensors: describeSchema(schema), region: regionName }, 'sidecar trainer registered its tensors')
      // `complete`: the run already ended (a trainer restarted after it finished): nothing is left to train for.
      sendJson(res, 201, { created: true, tensors: schema, region: this.describeRegion(), complete: this.completion.done })
      return
    }
    if (!sameSchema(this.schema, schema)) {
      throw new RequestError(409, `this agent already averages ${describeSchema(this.schema)}; restart the agent to register different tensors`)
    }
    await this.registering
    // A restarted trainer brings a new file (or none): reopen even under the same name, which may be a new file.
    await this.stepLock.run(async () => {
      const region = regionName !== undefined ? Region.open(this.options.shmDir, regionName, regionLayout(schema)) : undefined
      this.region?.close()
      this.region = region
    })
    sendJson(res, 200, { created: false, tensors: this.schema, region: this.describeRegion(), complete: this.completion.done })
  }

  private describeRegion (): { name: string, bytes: number, offsets: unknown } | null {
    return this.region === undefined ? null : { name: this.region.name, ...this.region.layout }
  }

  /** Zeros, or a live peer's tensors when state sharing is on. */
  private async startAverager (schema: readonly StoredTensor[]): Promise<DecentralizedAverager> {
    // The averager sees float32 names and shapes only: the storage dtype is this trainer's business.
    const tensors: NamedTensor[] = schema.map(t => ({ name: t.name, shape: t.shape, data: new Float32Array(elementCount(t.shape)) }))
    const averager = await this.ctx.createAverager(tensors)
    try {
      await this.loadState(averager, schema)
    } catch (err) {
      await averager.shutdown()
      throw err
    }
    return averager
  }

  /** A newcomer starts from a live peer's tensors when one offers them, else from the newest checkpoint. */
  private async loadState (averager: DecentralizedAverager, schema: readonly StoredTensor[]): Promise<void> {
    // Straight into the averager's tensors (zeros until now, and zeros again if no donor serves them):
    // a state of gigabytes is not held twice.
    const expected = schema.map(t => ({ name: t.name, shape: t.shape }))
    // A failed download is logged and the agent goes on without it; a failure of the averager itself fails the register.
    const downloaded = await averager.withTensors(async ts => await this.sharing?.download(expected, (p) => { this.loading = p }, ts).catch((err: unknown) => {
      this.ctx.log.warn({ err: describeError(err) }, 'state download failed')
      return null
    })).finally(() => { this.loading = undefined })
    if (downloaded != null) {
      this.ctx.log.info({ donor: downloaded.donor }, 'sidecar loaded the swarm state from a peer')
      const round = Number(downloaded.metadata.round)
      this.rounds = Number.isSafeInteger(round) && round > 0 ? round : 0
      // The donor's θ and m came with the states its outer steps shared (absent from an older donor: none).
      averager.adoptOuterStates(downloaded.metadata.outer)
      await this.setOrigin('peers', averager)
      return
    }
    if (await this.restoreCheckpoint(averager, schema)) await this.setOrigin('checkpoint', averager)
    // A restarted agent that finds no donor is the one case where the trainer's own values enter the swarm: say so.
    else if (this.sharing !== undefined) this.ctx.log.info('no live peer served the swarm\'s state (the debug log says why) and no checkpoint was restored: the trainer\'s values stand')
  }

  /** Loads the newest checkpoint that fits the schema into the averager; false when there is none. */
  private async restoreCheckpoint (averager: DecentralizedAverager, schema: readonly StoredTensor[]): Promise<boolean> {
    const checkpoint = await this.ctx.checkpointer?.restore(schema.map(t => ({ name: t.name, shape: t.shape, dtype: t.dtype }))).catch((err: unknown) => {
      if (err instanceof RestoreSourceError) {
        this.options.onFatal?.(err)
        throw new RequestError(503, err.message)
      }
      this.ctx.log.warn({ err: describeError(err) }, `restoring a checkpoint failed: ${describeError(err)}`)
      return null
    })
    if (checkpoint == null) return false
    await averager.withTensors(ts => { ts.forEach(t => { t.data.set(checkpoint.tensors.get(t.name)!) }) })
    averager.tensorsReplaced()
    this.rounds = checkpoint.manifest.round
    return true
  }

  /** The averaged tensors for a checkpoint: a copy, or held in place while written. */
  private snapshotOf (averager: DecentralizedAverager, schema: readonly StoredTensor[]): Snapshot {
    return {
      bytes: this.floatBytes(schema),
      copy: async () => await this.snapshot(averager, schema),
      hold: async (write) => { await averager.withTensors(async ts => { await write(ts.map((t, i) => ({ name: t.name, dtype: schema[i].dtype, shape: t.shape, data: t.data }))) }) }
    }
  }

  /**
   * POST /v1/finish: the trainer is done. With AVS_COMPLETION_ON_TRAINER_EXIT the agent's run ends
   * at its newest averaged round (final checkpoint, then averaging_completed 1); otherwise the agent
   * goes on serving its state and says so. Answers once the final checkpoint is durable.
   */
  private async finish (res: ServerResponse): Promise<void> {
    if (this.ctx.completionOnTrainerExit !== true) {
      sendJson(res, 200, { complete: this.completion.done, round: this.rounds, message: 'this swarm does not end when its trainers finish (spec.completion.onTrainerExit is not set): the agent goes on serving its state' })
      return
    }
    await this.stepLock.run(async () => {
      const self = this.ctx.node.peerId.toString()
      const last: CompletedRound = this.lastCompleted !== undefined
        ? { ...this.lastCompleted, movedSince: this.movedSinceRound }
        : { round: this.rounds, peers: [self], self, samples: this.stepsOk }
      const snapshot = this.schema !== undefined && this.averager !== undefined ? this.snapshotOf(this.averager, this.schema) : undefined
      await this.completion.trainerFinished(last, snapshot)
    })
    const durable = this.ctx.checkpointer?.durableRound
    sendJson(res, 200, { complete: this.completion.done, round: this.rounds, ...(durable === undefined || durable < 0 ? {} : { checkpointRound: durable }) })
  }

  /** A stable float32 copy of the averaged tensors, stored in the trainer's dtypes. */
  private async snapshot (averager: DecentralizedAverager, schema: readonly StoredTensor[]): Promise<TensorSource[]> {
    // Shared memory: the writer hashes float32 snapshots on another thread (sha256-off-thread.ts).
    return await averager.withTensors(ts => ts.map((t, i) => ({ name: t.name, dtype: schema[i].dtype, shape: t.shape, data: schema[i].dtype === 'float32' ? sharedCopy(t.data) : t.data.slice() })))
  }

  /**
   * An agent offers its tensors to newcomers only once they are no longer `initial`: zeros served
   * as "the swarm's state" would overwrite a newcomer's fresh initialisation with nothing.
   */
  private async setOrigin (origin: TensorOrigin, averager: DecentralizedAverager): Promise<void> {
    this.origin = origin
    if (origin === 'initial' || this.sharing === undefined || this.sharingStarted || this.closing) return
    this.sharingStarted = true
    await this.sharing.start(async () => await averager.withTensors(ts => ({
      tensors: ts.map(t => ({ name: t.name, shape: t.shape, data: t.data.slice() })),
      metadata: { steps: this.stepsOk, origin: this.origin, round: this.rounds, outer: averager.outerStatesSnapshot() }
    })), averager.directEndpoint()).catch((err: unknown) => { this.ctx.log.warn({ err: describeError(err) }, 'sidecar could not start serving its state') })
  }

  private registered (): Registered {
    if (this.schema === undefined || this.averager === undefined) throw new RequestError(409, 'no tensors are registered yet; call POST /v1/register first', 'not-registered')
    return { schema: this.schema, averager: this.averager }
  }

  private scratchBuffer (): Scratch {
    this.scratch ??= new Scratch()
    return this.scratch
  }

  private stagingBuffer (schema: readonly StoredTensor[]): Float32Array {
    this.staging ??= new Float32Array(schema.reduce((n, t) => n + elementCount(t.shape), 0))
    return this.staging
  }

  private registeredRegion (): Region {
    if (this.region === undefined) throw new RequestError(400, 'no region is registered; register with "region", send "tensors" as base64 JSON, or send a binary body')
    return this.region
  }

  /** A step body with no "tensors" is control for the region path; large or 16-bit schemas take only that from JSON. */
  private async readJsonStep (req: IncomingMessage, schema: readonly StoredTensor[]): Promise<{ control: StepControl, body: Record<string, unknown> }> {
    const jsonCarries = schema.every(t => t.dtype === 'float32') && schema.reduce((n, t) => n + elementCount(t.shape), 0) <= MAX_ELEMENTS
    const body = await readJsonBody(req, jsonCarries ? stepBodyLimit(schema) : MAX_CONTROL_BYTES)
    return { control: parseControl(body), body: body as Record<string, unknown> }
  }

  private async step (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { schema, averager } = this.registered()
    if (isTensorsBody(req.headers['content-type'])) {
      await this.stepLock.run(async () => { await this.binaryStep(req, res, schema, averager) })
      return
    }
    const { control, body } = await this.readJsonStep(req, schema)
    // A step over some tensors (control.names) copies in, averages and hands back those alone.
    const subset = stepSubset(control, schema)
    const plan = outerPlan(control, schema)
    if (body.tensors === undefined) {
      const region = this.registeredRegion()
      sendJson(res, 200, await this.stepLock.run(async () => await this.regionStep(region, control, averager, subset, plan)))
      return
    }
    checkJsonPath(schema)
    const request = parseStep(body, schema)
    const picked = subset ?? schema.map((_t, i) => i)
    const response = await this.stepLock.run(async () => {
      const copy = await this.timed(async () => await averager.withTensors(ts => { for (const i of picked) ts[i].data.set(request.tensors[i]) }), this.floatBytes(picked.map(i => schema[i])))
      const moved = new DistanceSum()
      const round = await this.round(averager, control, undefined, moved)
      return await averager.withTensors(ts => {
        const divergence = this.landedDivergence(round, moved, ts, plan, subset) ?? relativeDistance(picked.map(i => request.tensors[i]), picked.map(i => ts[i].data))
        const summary = this.summarize(round, divergence, copy)
        // Tensors outside the subset go back as sent (an outer step's θ and m as the agent stepped them).
        const averaged = new Set(handedBack(plan, subset) ?? picked)
        const answer = request.tensors.map((sent, i) => averaged.has(i) ? ts[i].data : sent)
        return jsonWithTensors({ ...summary }, ts.map((t, i) => [t.name, answer[i]] as const))
      })
    })
    sendJsonChunks(res, 200, response)
  }

  /**
   * The region's values in, a round, the mean back out. The copy-in runs beside the search for a
   * group (the all-reduce waits for it: StepOptions.ready), so a trainer waits for the longer of the
   * two, not their sum. A region the copy refuses (NaN, written during the read) ends the search and
   * answers the trainer with that error, the agent's tensors as they were.
   */
  private async regionStep (region: Region, control: StepControl, averager: DecentralizedAverager, subset?: readonly number[], plan?: OuterPlan): Promise<StepSummary> {
    const refused = new AbortController()
    const copying = this.readRegion(region, averager, subset)
    copying.catch(() => { refused.abort() })
    const moved = new DistanceSum()
    const round = await this.round(averager, control, { ready: copying, signal: refused.signal }, moved)
    const copy = await copying
    const start = performance.now()
    return await averager.withTensors(ts => {
      const now = ts.map(t => t.data)
      let divergence = this.landedDivergence(round, moved, ts, plan, subset)
      // An outer step copied Δ in and hands back θ and m too.
      const back = handedBack(plan, subset)
      if (divergence !== undefined) {
        // The divergence was summed as the parts landed: the write-back only writes (no second read of the region).
        copy.bytes += region.writeFrom(now, ++this.generation, this.scratchBuffer(), back)
      } else {
        const distance = new DistanceSum()
        copy.bytes += region.writeBack(now, ++this.generation, this.scratchBuffer(), distance, back)
        divergence = distance.value
      }
      copy.ms += performance.now() - start
      return this.summarize(round, divergence ?? 0, copy)
    })
  }

  /**
   * The step's divergence from what its landing summed (`moved`), or undefined when that does not
   * cover the step (landedWhole). An outer step whose group averaged the pseudo-gradients reports how
   * far that moved θ (outerDivergence), as one that averaged θ' does.
   */
  private landedDivergence (round: Round, moved: DistanceSum, tensors: readonly NamedTensor[], plan: OuterPlan | undefined, subset: readonly number[] | undefined): number | undefined {
    if (!this.landedWhole(round, moved, averagedBy(round, plan, subset))) return undefined
    if (plan === undefined || round.result?.outer !== 'pseudo-gradients') return moved.value
    return outerDivergence(moved, plan.params.map(i => tensors[i].data), plan.lr, plan.momentum, plan.nesterov)
  }

  /**
   * Whether the round's landing summed what it moved for every value of the step (`picked`: its
   * tensors, all by default), each once: then `moved` is the step's divergence. A round that kept
   * parts local, failed, or found no group leaves values the landing never saw.
   */
  private landedWhole ({ result }: Round, moved: DistanceSum, picked?: readonly number[]): boolean {
    const schema = this.schema!
    const elements = (picked ?? schema.map((_t, i) => i)).reduce((n, i) => n + elementCount(schema[i].shape), 0)
    return result !== undefined && moved.elements === elements
  }

  private async binaryStep (req: IncomingMessage, res: ServerResponse, schema: readonly StoredTensor[], averager: DecentralizedAverager): Promise<void> {
    const { control, staged, copy, subset } = await this.readBinary(req, schema, averager)
    const plan = outerPlan(control, schema)
    const moved = new DistanceSum()
    const round = await this.round(averager, control, undefined, moved)
    const { summary, packed } = await averager.withTensors(ts => {
      const picked = subset ?? schema.map((_t, i) => i)
      const divergence = this.landedDivergence(round, moved, ts, plan, subset) ?? relativeDistance(picked.map(i => staged[i]), picked.map(i => ts[i].data))
      // Tensors outside the subset go back as sent (an outer step's θ and m as the agent stepped them):
      // packed from the staging buffer in place, which never overwrites a value before reading it (a
      // packed tensor starts at or before its float32 copy).
      const averaged = new Set(handedBack(plan, subset) ?? picked)
      const now = staged.map((sent, i) => averaged.has(i) ? ts[i].data : sent)
      const start = performance.now()
      // The staging buffer holds what was sent until the divergence is known; then it carries the answer.
      const packed = packTensors(schema, now, bytesOf(this.stagingBuffer(schema)), this.scratchBuffer())
      copy.ms += performance.now() - start
      copy.bytes += packed.byteLength
      return { summary: this.summarize(round, divergence, copy), packed }
    })
    await sendFramed(res, summary, packed)
  }

  /** Streams a binary body into the staging buffer, checks it, then copies it into the tensors; the agent's state is untouched on any refusal. */
  private async readBinary (req: IncomingMessage, schema: readonly StoredTensor[], averager: DecentralizedAverager): Promise<{ control: StepControl, staged: Float32Array[], copy: Copy, subset?: number[] }> {
    const staging = this.stagingBuffer(schema)
    const start = performance.now()
    const control = parseControl(await readTensorsBody(req, schema, staging, this.scratchBuffer()))
    // The body carries every tensor; a step over a subset (control.names) checks and takes those alone.
    const subset = stepSubset(control, schema)
    outerPlan(control, schema)
    const picked = subset ?? schema.map((_t, i) => i)
    let at = 0
    const staged = schema.map(t => { const n = elementCount(t.shape); at += n; return staging.subarray(at - n, at) })
    for (const i of picked) {
      const values = staged[i]
      const bad = firstNonFinite(values)
      if (bad >= 0) throw new RequestError(400, `tensor "${schema[i].name}" holds a non-finite value (${values[bad]}) at index ${bad}`)
    }
    await averager.withTensors(ts => { for (const i of picked) ts[i].data.set(staged[i]) })
    return { control, staged, copy: { ms: performance.now() - start, bytes: packedBytes(schema) }, ...(subset !== undefined ? { subset } : {}) }
  }

  private async readRegion (region: Region, averager: DecentralizedAverager, subset?: readonly number[]): Promise<Copy> {
    const start = performance.now()
    const bytes = await region.readInto(this.scratchBuffer(), async copy => await averager.withTensors(ts => copy(ts.map(t => t.data))), subset)
    return { ms: performance.now() - start, bytes }
  }

  /**
   * One averaging round over the tensors as they are; a round that found no group is not an error for
   * the trainer. `moved` sums what the round's landing moved (StepOptions.landed).
   */
  private async round (averager: DecentralizedAverager, control: StepControl, overlap?: { ready: Promise<unknown>, signal: AbortSignal }, moved?: DistanceSum): Promise<Round> {
    const schema = this.schema!
    // The copy-in beside the round (regionStep) lands first: the final state below must not be overwritten by it.
    const copied = async (): Promise<void> => { await overlap?.ready.catch(() => {}) }
    // A finished run averages no more: the trainer gets the final state back and `complete`.
    if (await this.completion.swarmFinished(async () => { await copied(); await this.restoreCheckpoint(averager, schema) })) {
      await copied()
      return { error: 'the run is complete' }
    }
    await this.setOrigin('trainer', averager)
    try {
      const signal = overlap !== undefined ? AbortSignal.any([this.ctx.signal, overlap.signal]) : this.ctx.signal
      const result = await averager.step({
        weight: control.weight, gather: control.gather, timeout: control.timeout, signal, round: this.rounds,
        ...(control.names !== undefined ? { names: control.names } : {}),
        ...(control.outer !== undefined ? { outer: control.outer } : {}),
        ...(overlap !== undefined ? { ready: overlap.ready } : {}),
        ...(moved !== undefined ? { landed: (before: Float32Array, after: Float32Array) => { moved.add(before, after) } } : {})
      })
      this.stepsOk++
      // The group agrees on its round, so members that joined from a stale donor catch up.
      this.rounds = result.groupRound + 1
      await this.setOrigin('averaged', averager)
      this.sharing?.setPriority(this.stepsOk).catch(() => {})
      const completed: CompletedRound = { round: this.rounds, peers: stateHolders(result), self: this.ctx.node.peerId.toString(), samples: this.stepsOk }
      this.lastCompleted = completed
      this.movedSinceRound = false
      const snapshot = this.snapshotOf(averager, schema)
      await this.ctx.checkpointer?.afterRound(completed, snapshot)
      await this.completion.reached(completed, snapshot)
      return { result }
    } catch (err) {
      const error = describeError(err)
      // A copy-in the region refused ended the round: the trainer's error (regionStep answers it), no failed round.
      if (overlap?.signal.aborted === true) return { error }
      this.stepsFailed++
      this.movedSinceRound = true
      this.ctx.log.info({ error }, 'sidecar step did not average')
      return { error }
    }
  }

  private summarize ({ result, error }: Round, divergence: number, copy: Copy): StepSummary {
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
      divergence,
      delta: result?.delta ?? false,
      ...(result?.outer !== undefined ? { outer: result.outer } : {}),
      round: this.rounds,
      complete: this.completion.done,
      generation: this.generation,
      copyMs: copy.ms,
      bytesCopied: copy.bytes
    }
    this.lastStep = { ...summary, at: new Date().toISOString() }
    return summary
  }

  private async timed (fn: () => Promise<void>, bytes: number): Promise<Copy> {
    const start = performance.now()
    await fn()
    return { ms: performance.now() - start, bytes }
  }

  private floatBytes (schema: readonly StoredTensor[]): number {
    return 4 * schema.reduce((n, t) => n + elementCount(t.shape), 0)
  }

  /** The agent's tensors: into the region, as a binary answer, or as base64 JSON (docs/trainer-api.md). */
  private async getState (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { schema, averager } = this.registered()
    if (req.headers.accept?.includes(TENSORS_CONTENT_TYPE) === true) {
      await this.stepLock.run(async () => {
        const packed = await averager.withTensors(ts => packTensors(schema, ts.map(t => t.data), bytesOf(this.stagingBuffer(schema)), this.scratchBuffer()))
        await sendFramed(res, { origin: this.origin, generation: this.generation }, packed)
      })
      return
    }
    if (this.region !== undefined) {
      const region = this.region
      const answer = await this.stepLock.run(async () => await averager.withTensors(ts => {
        const start = performance.now()
        const bytes = region.writeFrom(ts.map(t => t.data), ++this.generation, this.scratchBuffer())
        return { origin: this.origin, generation: this.generation, copyMs: performance.now() - start, bytesCopied: bytes }
      }))
      sendJson(res, 200, answer)
      return
    }
    if (schema.reduce((n, t) => n + elementCount(t.shape), 0) > MAX_ELEMENTS) throw new RequestError(413, `the tensors hold more than the ${MAX_ELEMENTS} values the base64 JSON path carries; ask with accept: ${TENSORS_CONTENT_TYPE}`)
    const chunks = await averager.withTensors(ts => jsonWithTensors({ origin: this.origin, generation: this.generation }, ts.map(t => [t.name, t.data] as const)))
    sendJsonChunks(res, 200, chunks)
  }

  /**
   * Sets the agent's tensors from the trainer (region, binary body or base64 JSON) without a round:
   * a trainer that starts fresh publishes its initial parameters, so newcomers download those, not zeros.
   */
  private async setState (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { schema, averager } = this.registered()
    let copy: Copy
    if (isTensorsBody(req.headers['content-type'])) {
      copy = await this.stepLock.run(async () => (await this.readBinary(req, schema, averager)).copy)
    } else {
      const { control, body } = await this.readJsonStep(req, schema)
      const subset = stepSubset(control, schema)
      if (body.tensors === undefined) {
        const region = this.registeredRegion()
        copy = await this.stepLock.run(async () => await this.readRegion(region, averager, subset))
      } else {
        checkJsonPath(schema)
        const request = parseStep(body, schema)
        const picked = subset ?? schema.map((_t, i) => i)
        copy = await this.stepLock.run(async () => await this.timed(async () => await averager.withTensors(ts => { for (const i of picked) ts[i].data.set(request.tensors[i]) }), this.floatBytes(picked.map(i => schema[i]))))
      }
    }
    averager.tensorsReplaced()
    await this.setOrigin('trainer', averager)
    sendJson(res, 200, { origin: this.origin, generation: this.generation, copyMs: copy.ms, bytesCopied: copy.bytes })
  }

  private async report (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const report = parseReport(await readJsonBody(req, MAX_CONTROL_BYTES))
    const { metrics } = this.ctx
    if (report.loss !== undefined) metrics.trainerLoss.set(report.loss)
    if (report.samples !== undefined) metrics.trainerSamples.inc(report.samples)
    if (report.paramsHash !== undefined) metrics.paramsHash.set(report.paramsHash)
    res.writeHead(204).end()
  }

  private status (res: ServerResponse): void {
    sendJson(res, 200, {
      peerId: this.ctx.node.peerId.toString(),
      registered: this.averager !== undefined,
      tensors: this.schema ?? [],
      region: this.describeRegion(),
      shmDir: this.options.shmDir ?? null,
      origin: this.origin,
      groupBits: this.averager?.groupBits ?? null,
      steps: { averaged: this.stepsOk, failed: this.stepsFailed },
      round: this.rounds,
      complete: this.completion.done,
      lastStep: this.lastStep ?? null,
      generation: this.generation,
      loading: this.loading === undefined ? null : { donor: this.loading.donor, receivedBytes: this.loading.receivedBytes, totalBytes: this.loading.totalBytes, message: this.loading.line() }
    })
  }

  /** Refuses new requests, lets running ones finish (steps end early once ctx.signal aborts), shuts the averager down. */
  async close (): Promise<void> {
    this.closing = true
    await Promise.allSettled([...this.inFlight])
    await this.registering?.catch(() => {})
    await this.ctx.checkpointer?.drain()
    await this.sharing?.stop()
    await this.averager?.shutdown()
    this.region?.close()
  }
}

/** The tensors a step hands back: its subset, with an outer step's θ and m (undefined: all of them). */
function handedBack (plan: OuterPlan | undefined, subset: readonly number[] | undefined): number[] | undefined {
  if (subset === undefined) return undefined
  return plan === undefined ? [...subset] : [...new Set([...subset, ...stateIndices(plan)])].sort((a, b) => a - b)
}

/** The tensors the round averaged: the step's subset, or an outer step's θ and m when its group averaged those. */
function averagedBy ({ result }: Round, plan: OuterPlan | undefined, subset: readonly number[] | undefined): readonly number[] | undefined {
  return plan !== undefined && result?.outer === 'parameters' ? stateIndices(plan) : subset
}

/** A binary answer: u32le length + JSON + the packed tensors; resolves once sent, as the bytes live in the reused staging buffer. */
async function sendFramed (res: ServerResponse, body: unknown, packed: Uint8Array): Promise<void> {
  const head = controlHead(body)
  res.writeHead(200, { 'content-type': TENSORS_CONTENT_TYPE, 'content-length': head.byteLength + packed.byteLength })
  const done = new Promise<void>(resolve => { res.once('finish', resolve); res.once('close', resolve) })
  res.write(head)
  res.end(packed)
  await done
}
