/**
 * Client of the agent's sidecar API for a trainer written in TypeScript/JavaScript (Node 18+).
 * Self-contained on purpose: copy this one file into a trainer. Tensors are Float32Array; on the
 * wire they are base64 of little-endian float32 (see agent/workloads/sidecar/README.md).
 */

export interface TensorSpec {
  readonly name: string
  readonly shape: readonly number[]
}

export interface StepOptions {
  /** This trainer's weight in the group mean, e.g. samples seen since the last step (default 1). */
  readonly weight?: number
  /** Any JSON value (at most 16 KiB); every group member receives every member's value. */
  readonly gather?: unknown
  /** Seconds the agent may spend finding a group and averaging. */
  readonly timeout?: number
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
  readonly tensors: Record<string, Float32Array>
}

export interface StateResult {
  /** initial: never written; peers: downloaded from a live peer at register; trainer: the values of a step that did not average; averaged: a round's mean. */
  readonly origin: 'initial' | 'peers' | 'trainer' | 'averaged'
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

  /** Declares the tensors once; calling again with the same specs is harmless. */
  async register (tensors: readonly TensorSpec[]): Promise<{ created: boolean }> {
    const body = await this.call('POST', '/v1/register', { tensors }) as { created: boolean }
    return { created: body.created }
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

  async status (): Promise<Record<string, unknown>> {
    return await this.call('GET', '/v1/status') as Record<string, unknown>
  }

  private async call (method: string, path: string, body?: unknown): Promise<unknown> {
    const res = await fetch(this.baseUrl + path, {
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
