/**
 * Client of the agent's sidecar API for a trainer written in TypeScript/JavaScript (Node 18+).
 * Self-contained on purpose: copy this one file into a trainer. Three ways to hand tensors over
 * (docs/trainer-api.md): a shared-memory region (SharedRegion + stepRegion), a binary body
 * (stepBinary), or base64 JSON of float32 (step). float32 tensors are Float32Array; float16 and
 * bfloat16 ones are Uint16Array of their bits (this client converts nothing).
 */
import { closeSync, openSync, readSync, writeSync } from 'node:fs'
import { join } from 'node:path'

export type Dtype = 'float32' | 'float16' | 'bfloat16'

export interface TensorSpec {
  readonly name: string
  readonly shape: readonly number[]
  /** Storage dtype (default float32); the agent averages in float32 whatever it is. */
  readonly dtype?: Dtype
}

/** A tensor's values in its storage dtype: Float32Array for float32, Uint16Array of the bits otherwise. */
export type StoredValues = Float32Array | Uint16Array

export interface StepOptions {
  /** This trainer's weight in the group mean, e.g. samples seen since the last step (default 1). */
  readonly weight?: number
  /** Any JSON value (at most 16 KiB); every group member receives every member's value. */
  readonly gather?: unknown
  /** Seconds the agent may spend finding a group and averaging. */
  readonly timeout?: number
  /**
   * Average these registered tensors only (default: all), with peers averaging the same ones; the
   * others are neither read nor written (region) or come back as sent (binary, JSON).
   */
  readonly names?: readonly string[]
  /**
   * DiLoCo's outer step, taken by the agent (docs/trainer-api.md): `names` hold the pseudo-gradients,
   * `params` and `buffers` name θ and m pairwise; the answer hands back the three.
   */
  readonly outer?: { readonly params: readonly string[], readonly buffers: readonly string[], readonly lr: number, readonly momentum?: number, readonly nesterov?: boolean }
}

export interface StepResult {
  /** False when no group formed in time: `tensors` then hold the values sent, and `error` says why. */
  readonly averaged: boolean
  readonly error?: string
  readonly groupId?: string
  readonly groupSize: number
  readonly peers: readonly string[]
  /** Each member's `gather` value by peer id (this agent's included). */
  readonly gathered: Record<string, unknown>
  readonly partsKeptLocal: number
  /** ‖sent − averaged‖ / ‖sent‖. */
  readonly divergence: number
  /** The round carried changes since a base the group shared (a lossy codec). */
  readonly delta?: boolean
  /** An outer step's round: it averaged the pseudo-gradients alone, or θ' and m'. */
  readonly outer?: 'pseudo-gradients' | 'parameters'
  /** Rounds behind the agent's state (rounds restored or downloaded count). */
  readonly round?: number
  /** The swarm's run is complete (spec.completion): steps no longer average, the trainer may exit. */
  readonly complete?: boolean
  /** The agent's write-back counter (region path). */
  readonly generation?: number
  /** Time and bytes the agent spent copying tensors between the region/body and its float32 copy. */
  readonly copyMs?: number
  readonly bytesCopied?: number
  readonly tensors: Record<string, Float32Array>
}

export type StepSummary = Omit<StepResult, 'tensors'>

export interface StateResult {
  /** initial: never written; peers: downloaded from a live peer at register; checkpoint: restored from the swarm's newest checkpoint at register; trainer: the values of a step that did not average; averaged: a round's mean. */
  readonly origin: 'initial' | 'peers' | 'checkpoint' | 'trainer' | 'averaged'
  readonly tensors: Record<string, Float32Array>
}

/** The API answered with an error status; the message is the agent's one-sentence reason. */
export class SidecarError extends Error {
  override name = 'SidecarError'
  constructor (readonly status: number, message: string) { super(message) }
}

export class SidecarClient {
  private readonly baseUrl: string

  /** baseUrl such as http://127.0.0.1:9401 (the port is AVS_SIDECAR_PORT). */
  constructor (baseUrl: string) {
    this.baseUrl = baseUrl.replace(/\/+$/, '')
  }

  /** Declares the tensors once; calling again with the same specs is harmless. `region`: a SharedRegion's file name in AVS_SHM_DIR. */
  async register (tensors: readonly TensorSpec[], options: { region?: string } = {}): Promise<{ created: boolean }> {
    const body = await this.call('POST', '/v1/register', { tensors, ...options }) as { created: boolean }
    return { created: body.created }
  }

  /** The region path: the agent reads the registered region, averages and writes the result back into it. */
  async stepRegion (options: StepOptions = {}): Promise<StepSummary> {
    return await this.call('POST', '/v1/step', options) as StepSummary
  }

  /** The binary path: values in registered order and dtype; the answer carries the result the same way. */
  async stepBinary (specs: readonly TensorSpec[], tensors: Record<string, StoredValues>, options: StepOptions = {}): Promise<StepSummary & { tensors: Record<string, StoredValues> }> {
    const { control, bytes } = await this.callBinary('POST', '/v1/step', frame(options, specs.map(t => tensors[t.name])))
    return { ...control as StepSummary, tensors: unpack(specs, bytes) }
  }

  /** Sets the agent's tensors without a round (from the region when `tensors` is omitted): a fresh trainer publishes its initial parameters. */
  async publishState (specs?: readonly TensorSpec[], tensors?: Record<string, StoredValues>): Promise<void> {
    if (specs === undefined || tensors === undefined) await this.call('POST', '/v1/state', {})
    else {
      // A binary body; the answer is JSON ({origin, generation, ...}), as for the region.
      const res = await this.request('/v1/state', { method: 'POST', headers: { 'content-type': TENSORS_CONTENT_TYPE }, body: new Blob([frame({}, specs.map(t => tensors[t.name]))]) })
      const answer = await res.json() as { error?: string }
      if (!res.ok) throw new SidecarError(res.status, answer.error ?? `the agent answered ${res.status}`)
    }
  }

  /** Progress for the agent's metrics: loss, samples since the last report, a 16-hex-digit parameter hash. */
  async report (report: { loss?: number, samples?: number, paramsHash?: string }): Promise<void> {
    const res = await this.request('/v1/report', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(report) })
    if (!res.ok) throw new SidecarError(res.status, ((await res.json()) as { error?: string }).error ?? `the agent answered ${res.status}`)
  }

  /** Hands in the current values; resolves with the group's mean once a round completed. */
  async step (tensors: Record<string, Float32Array>, options: StepOptions = {}): Promise<StepResult> {
    // Spliced rather than JSON.stringify'd: stringify scans every base64 character (~0.5 s per 16 MiB).
    const head = JSON.stringify(options).slice(0, -1)
    const parts = [head, head.length > 1 ? ',"tensors":{' : '"tensors":{']
    Object.entries(tensors).forEach(([name, data], i) => { parts.push(`${i > 0 ? ',' : ''}${JSON.stringify(name)}:"`, encodeFloat32(data), '"') })
    parts.push('}}')
    const body = await this.call('POST', '/v1/step', new Blob(parts)) as Omit<StepResult, 'tensors'> & { tensors: Record<string, string> }
    return { ...body, tensors: decodeAll(body.tensors) }
  }

  /** The agent's current tensors: what a (re)started trainer should start from when origin is not initial. */
  async state (): Promise<StateResult> {
    const body = await this.call('GET', '/v1/state') as { origin: StateResult['origin'], tensors: Record<string, string> }
    return { origin: body.origin, tensors: decodeAll(body.tensors) }
  }

  /** With a region registered: the agent writes its tensors into the region and answers origin and generation only. */
  async stateToRegion (): Promise<{ origin: StateResult['origin'], generation: number }> {
    return await this.call('GET', '/v1/state') as { origin: StateResult['origin'], generation: number }
  }

  async stateBinary (specs: readonly TensorSpec[]): Promise<{ origin: StateResult['origin'], tensors: Record<string, StoredValues> }> {
    const { control, bytes } = await this.callBinary('GET', '/v1/state')
    return { origin: (control as { origin: StateResult['origin'] }).origin, tensors: unpack(specs, bytes) }
  }

  /**
   * This trainer is done (POST /v1/finish). With spec.completion.onTrainerExit the agent's run ends at
   * its newest averaged round; the answer comes once the final checkpoint is durable.
   */
  async finish (): Promise<{ complete: boolean, round: number, checkpointRound?: number, message?: string }> {
    return await this.call('POST', '/v1/finish', {}) as { complete: boolean, round: number, checkpointRound?: number, message?: string }
  }

  async status (): Promise<Record<string, unknown>> {
    return await this.call('GET', '/v1/status') as Record<string, unknown>
  }

  /** fetch, whose own failure ("fetch failed") is said with its cause and the request it ended. */
  private async request (path: string, init: RequestInit): Promise<Response> {
    try {
      return await fetch(this.baseUrl + path, init)
    } catch (err) {
      const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : err instanceof Error ? err.message : String(err)
      throw new Error(`${init.method ?? 'GET'} ${this.baseUrl}${path} got no answer: ${cause}`)
    }
  }

  private async call (method: string, path: string, body?: unknown): Promise<unknown> {
    const res = await this.request(path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : body instanceof Blob ? body : JSON.stringify(body)
    })
    const text = await res.text()
    let parsed: unknown
    try { parsed = JSON.parse(text) } catch { throw new SidecarError(res.status, `the agent answered ${res.status} with a body that is not JSON`) }
    if (!res.ok) throw new SidecarError(res.status, (parsed as { error?: string }).error ?? `the agent answered ${res.status}`)
    return parsed
  }

  private async callBinary (method: string, path: string, body?: Uint8Array): Promise<{ control: unknown, bytes: Uint8Array }> {
    const res = await this.request(path, {
      method,
      headers: body === undefined ? { accept: TENSORS_CONTENT_TYPE } : { 'content-type': TENSORS_CONTENT_TYPE, accept: TENSORS_CONTENT_TYPE },
      body: body === undefined ? undefined : new Blob([body])
    })
    const bytes = new Uint8Array(await res.arrayBuffer())
    if (res.headers.get('content-type') !== TENSORS_CONTENT_TYPE) {
      let error: string | undefined
      try { error = (JSON.parse(Buffer.from(bytes).toString('utf8')) as { error?: string }).error } catch {}
      throw new SidecarError(res.status, error ?? `the agent answered ${res.status} without a binary body`)
    }
    const n = new DataView(bytes.buffer, bytes.byteOffset).getUint32(0, true)
    return { control: JSON.parse(Buffer.from(bytes.subarray(4, 4 + n)).toString('utf8')), bytes: bytes.subarray(4 + n) }
  }
}

export const TENSORS_CONTENT_TYPE = 'application/vnd.avs.tensors'

/** u32le length + control JSON + each tensor's bytes back to back. */
export function frame (control: unknown, tensors: readonly StoredValues[]): Uint8Array {
  const json = Buffer.from(JSON.stringify(control))
  const out = new Uint8Array(4 + json.byteLength + tensors.reduce((n, t) => n + t.byteLength, 0))
  new DataView(out.buffer).setUint32(0, json.byteLength, true)
  out.set(json, 4)
  let at = 4 + json.byteLength
  for (const t of tensors) { out.set(new Uint8Array(t.buffer, t.byteOffset, t.byteLength), at); at += t.byteLength }
  return out
}

function unpack (specs: readonly TensorSpec[], bytes: Uint8Array): Record<string, StoredValues> {
  let at = 0
  return Object.fromEntries(specs.map(t => {
    const n = t.shape.reduce((a, b) => a * b, 1)
    const size = itemSize(t.dtype)
    // Copied into a fresh buffer: the body's offset need not be aligned for a typed-array view.
    const own = bytes.slice(at, at + n * size)
    at += n * size
    return [t.name, size === 4 ? new Float32Array(own.buffer) : new Uint16Array(own.buffer)]
  }))
}

const itemSize = (dtype: Dtype | undefined): number => dtype === undefined || dtype === 'float32' ? 4 : 2
const MAGIC = 'AVSREGN1'

/** docs/trainer-api.md's layout: a 64-byte header, then each tensor at the next multiple of 64. */
export function regionLayout (specs: readonly TensorSpec[]): { bytes: number, offsets: Array<{ name: string, offset: number, bytes: number }> } {
  const up = (n: number): number => Math.ceil(n / 64) * 64
  let at = 64
  const offsets = specs.map(t => {
    const offset = up(at)
    const bytes = t.shape.reduce((a, b) => a * b, 1) * itemSize(t.dtype)
    at = offset + bytes
    return { name: t.name, offset, bytes }
  })
  return { bytes: up(at), offsets }
}

/**
 * The trainer's side of a shared-memory region. Node cannot map memory, so values move with
 * pwrite/pread; a Python trainer maps the same file instead. Write only between steps: the agent
 * reads and writes the region while it answers a step or a state request.
 */
export class SharedRegion {
  private constructor (readonly name: string, readonly path: string, private readonly fd: number, readonly specs: readonly TensorSpec[]) {}

  /** Creates (or truncates) `name` in `dir` (AVS_SHM_DIR), zero-filled, with the magic; register it next. */
  static create (dir: string, name: string, specs: readonly TensorSpec[]): SharedRegion {
    const path = join(dir, name)
    const fd = openSync(path, 'w+', 0o600)
    const header = new Uint8Array(regionLayout(specs).bytes)
    header.set(Buffer.from(MAGIC, 'latin1'))
    writeSync(fd, header, 0, header.byteLength, 0)
    return new SharedRegion(name, path, fd, specs)
  }

  get seq (): number { return this.readU64(8) }
  get generation (): number { return this.readU64(16) }

  /** Writes the given tensors (storage dtype) under the seqlock: seq odd, data, seq even. */
  write (tensors: Record<string, StoredValues>): void {
    const seq = this.seq
    const odd = seq % 2 === 0 ? seq + 1 : seq + 2
    this.writeU64(8, odd)
    for (const place of regionLayout(this.specs).offsets) {
      const t = tensors[place.name]
      if (t === undefined) continue
      if (t.byteLength !== place.bytes) throw new Error(`tensor "${place.name}" has ${t.byteLength} bytes but the region holds ${place.bytes}`)
      writeFully(this.fd, new Uint8Array(t.buffer, t.byteOffset, t.byteLength), place.offset)
    }
    this.writeU64(8, odd + 1)
  }

  /** Reads every tensor (storage dtype) as the agent left it. */
  read (): Record<string, StoredValues> {
    const layout = regionLayout(this.specs).offsets
    return Object.fromEntries(this.specs.map((t, i) => {
      const bytes = new Uint8Array(layout[i].bytes)
      readFully(this.fd, bytes, layout[i].offset)
      return [t.name, itemSize(t.dtype) === 4 ? new Float32Array(bytes.buffer) : new Uint16Array(bytes.buffer)]
    }))
  }

  close (): void { closeSync(this.fd) }

  private readU64 (at: number): number {
    const b = Buffer.alloc(8)
    readSync(this.fd, b, 0, 8, at)
    return Number(b.readBigUInt64LE(0))
  }

  private writeU64 (at: number, value: number): void {
    const b = Buffer.alloc(8)
    b.writeBigUInt64LE(BigInt(value))
    writeSync(this.fd, b, 0, 8, at)
  }
}

export function encodeFloat32 (data: Float32Array): string {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64')
}

export function decodeFloat32 (text: string): Float32Array {
  const bytes = Buffer.from(text, 'base64')
  const out = new Float32Array(bytes.byteLength / 4)
  new Uint8Array(out.buffer).set(bytes)
  return out
}

function decodeAll (tensors: Record<string, string>): Record<string, Float32Array> {
  return Object.fromEntries(Object.entries(tensors).map(([name, text]) => [name, decodeFloat32(text)]))
}

/** Node's readSync/writeSync coerce the length to an int32 and may move fewer bytes than asked: loop in calls of at most 1 GiB. */
const MAX_IO_BYTES = 1 << 30

function writeFully (fd: number, from: Uint8Array, position: number): void {
  let done = 0
  while (done < from.byteLength) done += writeSync(fd, from, done, Math.min(from.byteLength - done, MAX_IO_BYTES), position + done)
}

function readFully (fd: number, into: Uint8Array, position: number): void {
  let done = 0
  while (done < into.byteLength) {
    const n = readSync(fd, into, done, Math.min(into.byteLength - done, MAX_IO_BYTES), position + done)
    if (n === 0) throw new Error(`the region ended at byte ${position + done}`)
    done += n
  }
}
