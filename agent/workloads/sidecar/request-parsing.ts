import { elementCount, type TensorSchema } from '../../schema.js'
import { base64Length, decodeFloat32, firstNonFinite } from './tensor-codec.js'

/** A request the trainer got wrong: the HTTP status and one sentence it can act on. */
export class RequestError extends Error {
  override name = 'RequestError'
  constructor (readonly status: number, message: string) { super(message) }
}

export const MAX_TENSORS = 4096
export const MAX_NAME_LENGTH = 256
/**
 * Tensors travel as base64 inside one JSON document; V8 strings stop at 2^29 characters, so a
 * step body must stay well below 512 MiB: 64 Mi float32 values make 341 MiB of base64.
 */
export const MAX_ELEMENTS = 64 * 1024 * 1024
export const MAX_GATHER_BYTES = 16 * 1024
export const MAX_STEP_TIMEOUT = 3600
/** A register body carries names and shapes only. */
export const REGISTER_BODY_LIMIT = 4 * 1024 * 1024

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

/** `{tensors: [{name, shape}]}` → the schema, in the trainer's order (the order all peers average in). */
export function parseRegister (body: unknown): TensorSchema[] {
  if (!isObject(body) || !Array.isArray(body.tensors)) throw new RequestError(400, 'the register body must be a JSON object with a "tensors" array of {name, shape}')
  const list = body.tensors
  if (list.length === 0 || list.length > MAX_TENSORS) throw new RequestError(400, `register needs 1 to ${MAX_TENSORS} tensors, got ${list.length}`)
  const seen = new Set<string>()
  let total = 0
  const schema = list.map((t: unknown, i): TensorSchema => {
    if (!isObject(t)) throw new RequestError(400, `tensors[${i}] must be an object {name, shape}`)
    const { name, shape } = t
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_NAME_LENGTH) throw new RequestError(400, `tensors[${i}].name must be a string of 1 to ${MAX_NAME_LENGTH} characters`)
    if (seen.has(name)) throw new RequestError(400, `tensor name "${name}" appears twice`)
    seen.add(name)
    if (!Array.isArray(shape) || shape.length > 16 || !shape.every(d => Number.isInteger(d) && d >= 1 && d <= 2 ** 31)) {
      throw new RequestError(400, `tensor "${name}" needs a shape of up to 16 positive integers, got ${JSON.stringify(shape)}`)
    }
    total += elementCount(shape as number[])
    if (total > MAX_ELEMENTS) throw new RequestError(413, `the tensors hold more than ${MAX_ELEMENTS} values in all, the most the sidecar API carries`)
    return { name, shape: [...shape as number[]] }
  })
  return schema
}

export function sameSchema (a: readonly TensorSchema[], b: readonly TensorSchema[]): boolean {
  return a.length === b.length && a.every((t, i) => t.name === b[i].name && t.shape.length === b[i].shape.length && t.shape.every((d, j) => d === b[i].shape[j]))
}

export function describeSchema (schema: readonly TensorSchema[]): string {
  return schema.map(t => `${t.name}[${t.shape.join(',')}]`).join(', ')
}

/** The largest step body a trainer can need for this schema: every tensor's base64, names, options. */
export function stepBodyLimit (schema: readonly TensorSchema[]): number {
  return schema.reduce((sum, t) => sum + base64Length(elementCount(t.shape)) + t.name.length + 16, 0) + MAX_GATHER_BYTES * 2 + 4096
}

export interface StepRequest {
  readonly weight?: number
  readonly gather?: unknown
  readonly timeout?: number
  /** In schema order. */
  readonly tensors: Float32Array[]
}

/** `{weight?, gather?, timeout?, tensors: {name: base64}}`, checked against the registered schema. */
export function parseStep (body: unknown, schema: readonly TensorSchema[]): StepRequest {
  if (!isObject(body) || !isObject(body.tensors)) throw new RequestError(400, 'the step body must be a JSON object with a "tensors" object mapping each name to base64 float32')
  const { weight, timeout, gather } = body
  if (weight !== undefined && (typeof weight !== 'number' || !Number.isFinite(weight) || weight < 0)) throw new RequestError(400, `weight must be a finite number >= 0, got ${JSON.stringify(weight)}`)
  if (timeout !== undefined && (typeof timeout !== 'number' || !(timeout > 0) || timeout > MAX_STEP_TIMEOUT)) throw new RequestError(400, `timeout must be a number of seconds above 0 and at most ${MAX_STEP_TIMEOUT}, got ${JSON.stringify(timeout)}`)
  if (gather !== undefined && Buffer.byteLength(JSON.stringify(gather)) > MAX_GATHER_BYTES) throw new RequestError(400, `gather must serialise to at most ${MAX_GATHER_BYTES} bytes of JSON`)
  const given = body.tensors
  const known = new Set(schema.map(t => t.name))
  for (const name of Object.keys(given)) {
    if (!known.has(name)) throw new RequestError(400, `unknown tensor "${name}"; the registered tensors are ${describeSchema(schema)}`)
  }
  const tensors = schema.map(t => {
    const text = given[t.name]
    if (text === undefined) throw new RequestError(400, `tensor "${t.name}" is missing; every step must send all registered tensors`)
    if (typeof text !== 'string') throw new RequestError(400, `tensor "${t.name}" must be a base64 string of little-endian float32`)
    const data = decodeFloat32(text)
    if (data === undefined) throw new RequestError(400, `tensor "${t.name}" is not valid base64 of little-endian float32 values`)
    const expected = elementCount(t.shape)
    if (data.length !== expected) throw new RequestError(400, `tensor "${t.name}" has ${data.length} values but its shape [${t.shape.join(', ')}] needs ${expected}`)
    const bad = firstNonFinite(data)
    if (bad >= 0) throw new RequestError(400, `tensor "${t.name}" holds a non-finite value (${data[bad]}) at index ${bad}`)
    return data
  })
  return { weight, timeout, gather, tensors }
}
