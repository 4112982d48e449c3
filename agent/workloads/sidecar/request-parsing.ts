import { elementCount, subsetOf, type TensorSchema } from '../../schema.js'
import { base64Length, decodeFloat32, firstNonFinite } from './tensor-codec.js'
import { isDtype, DTYPES } from './dtypes.js'
import type { StoredTensor } from './region-layout.js'
import { MAX_GATHER_BYTES } from '../../matchmaking/group-info.js'
import { planOuterStep, type OuterPlan, type OuterStep } from '../../outer/outer-step.js'

export { containerMemoryBytes } from '../../util/memory.js'

/**
 * A request the trainer got wrong: the HTTP status and one sentence it can act on, and a `code` for the
 * refusals a client acts on by itself (`not-registered`: this agent holds no tensors, so it restarted since
 * the trainer registered; the client registers again; `shutting-down`: the agent is stopping, and a restarted one
 * takes its place in the pod).
 */
export class RequestError extends Error {
  override name = 'RequestError'
  constructor (readonly status: number, message: string, readonly code?: string) { super(message) }
}

export const MAX_TENSORS = 4096
export const MAX_NAME_LENGTH = 256
/**
 * On the JSON path tensors travel as base64 inside one JSON document; V8 strings stop at 2^29
 * characters, so a step body must stay well below 512 MiB: 64 Mi float32 values make 341 MiB of
 * base64. The region and binary paths have no such limit, only the container's memory.
 */
export const MAX_ELEMENTS = 64 * 1024 * 1024
export const MAX_STEP_TIMEOUT = 3600
/** A register body carries names and shapes only. */
export const REGISTER_BODY_LIMIT = 4 * 1024 * 1024

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

export interface RegisterRequest {
  readonly schema: StoredTensor[]
  /** A file name in AVS_SHM_DIR, when the trainer hands tensors over through shared memory. */
  readonly region?: string
}

/**
 * `{tensors: [{name, shape, dtype?}], region?}` → the schema in the trainer's order (the order all
 * peers average in). `memoryBytes` bounds the agent's float32 copy (see containerMemoryBytes).
 */
export function parseRegister (body: unknown, memoryBytes: number): RegisterRequest {
  if (!isObject(body) || !Array.isArray(body.tensors)) throw new RequestError(400, 'the register body must be a JSON object with a "tensors" array of {name, shape, dtype?}')
  const list = body.tensors
  if (list.length === 0 || list.length > MAX_TENSORS) throw new RequestError(400, `register needs 1 to ${MAX_TENSORS} tensors, got ${list.length}`)
  if (body.region !== undefined && body.region !== null && typeof body.region !== 'string') throw new RequestError(400, 'region must be a file name in AVS_SHM_DIR')
  const seen = new Set<string>()
  let total = 0
  const schema = list.map((t: unknown, i): StoredTensor => {
    if (!isObject(t)) throw new RequestError(400, `tensors[${i}] must be an object {name, shape, dtype?}`)
    const { name, shape, dtype } = t
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_NAME_LENGTH) throw new RequestError(400, `tensors[${i}].name must be a string of 1 to ${MAX_NAME_LENGTH} characters`)
    if (seen.has(name)) throw new RequestError(400, `tensor name "${name}" appears twice`)
    seen.add(name)
    if (!Array.isArray(shape) || shape.length > 16 || !shape.every(d => Number.isInteger(d) && d >= 1 && d <= 2 ** 31)) {
      throw new RequestError(400, `tensor "${name}" needs a shape of up to 16 positive integers, got ${JSON.stringify(shape)}`)
    }
    if (dtype !== undefined && !isDtype(dtype)) throw new RequestError(400, `tensor "${name}" has dtype ${JSON.stringify(dtype)}; use one of ${DTYPES.join(', ')}`)
    // A Float32Array holds at most 2^32 - 1 values; beyond that the memory check below would not even be reached honestly.
    const count = elementCount(shape as number[])
    if (count >= 2 ** 32) throw new RequestError(413, `tensor "${name}" has ${count} values, more than one float32 array holds (2^32 - 1)`)
    total += count
    return { name, shape: [...shape as number[]], dtype: dtype ?? 'float32' }
  })
  if (total * 4 > memoryBytes) {
    throw new RequestError(413, `the tensors' float32 copy needs ${gib(total * 4)} GiB but the agent's container has ${gib(memoryBytes)} GiB of memory`)
  }
  return { schema, ...(typeof body.region === 'string' ? { region: body.region } : {}) }
}

const gib = (bytes: number): string => (bytes / 2 ** 30).toFixed(2)


/** Same names, shapes and storage dtypes in the same order. */
export function sameSchema (a: readonly StoredTensor[], b: readonly StoredTensor[]): boolean {
  return a.length === b.length && a.every((t, i) => t.name === b[i].name && t.dtype === b[i].dtype && t.shape.length === b[i].shape.length && t.shape.every((d, j) => d === b[i].shape[j]))
}

export function describeSchema (schema: ReadonlyArray<TensorSchema & { dtype?: string }>): string {
  return schema.map(t => `${t.name}[${t.shape.join(',')}]${t.dtype === undefined || t.dtype === 'float32' ? '' : ` ${t.dtype}`}`).join(', ')
}

/** The largest step body a trainer can need for this schema: every tensor's base64, names, options. */
export function stepBodyLimit (schema: readonly TensorSchema[]): number {
  return schema.reduce((sum, t) => sum + base64Length(elementCount(t.shape)) + t.name.length + 16, 0) + MAX_GATHER_BYTES * 2 + 4096
}

export interface StepControl {
  readonly weight?: number
  readonly gather?: unknown
  readonly timeout?: number
  /** The registered tensors this step averages (default: all); checked against the schema by stepSubset. */
  readonly names?: readonly string[]
  /** DiLoCo's outer step taken by the agent over `names` as the pseudo-gradients (agent/outer/outer-step.ts). */
  readonly outer?: OuterStep
}

export interface StepRequest extends StepControl {
  /** In schema order. */
  readonly tensors: Float32Array[]
}

/** `{weight?, gather?, timeout?, names?, outer?}`: the control part of every step, whichever path its tensors take. */
export function parseControl (body: unknown): StepControl {
  if (!isObject(body)) throw new RequestError(400, 'the step control must be a JSON object {weight?, gather?, timeout?, names?, outer?}')
  const { weight, timeout, gather, names, outer } = body
  if (weight !== undefined && (typeof weight !== 'number' || !Number.isFinite(weight) || weight < 0)) throw new RequestError(400, `weight must be a finite number >= 0, got ${JSON.stringify(weight)}`)
  if (timeout !== undefined && (typeof timeout !== 'number' || !(timeout > 0) || timeout > MAX_STEP_TIMEOUT)) throw new RequestError(400, `timeout must be a number of seconds above 0 and at most ${MAX_STEP_TIMEOUT}, got ${JSON.stringify(timeout)}`)
  if (gather !== undefined && Buffer.byteLength(JSON.stringify(gather)) > MAX_GATHER_BYTES) throw new RequestError(400, `gather must serialise to at most ${MAX_GATHER_BYTES} bytes of JSON`)
  if (names !== undefined && (!Array.isArray(names) || !names.every(n => typeof n === 'string'))) throw new RequestError(400, `names must be an array of registered tensor names, got ${JSON.stringify(names).slice(0, 200)}`)
  return {
    weight: weight as number | undefined,
    timeout: timeout as number | undefined,
    gather,
    ...(names !== undefined ? { names: names as string[] } : {}),
    ...(outer !== undefined ? { outer: parseOuter(outer) } : {})
  }
}

/** `{params, buffers, lr, momentum?, nesterov?}` (torch's SGD defaults: momentum 0, nesterov false); the tensors are checked by outerPlan. */
function parseOuter (outer: unknown): OuterStep {
  if (!isObject(outer)) throw new RequestError(400, `outer must be a JSON object {params, buffers, lr, momentum?, nesterov?}, got ${JSON.stringify(outer)?.slice(0, 200)}`)
  const { params, buffers, lr, momentum = 0, nesterov = false } = outer
  for (const [what, list] of [['params', params], ['buffers', buffers]] as const) {
    if (!Array.isArray(list) || !list.every(n => typeof n === 'string')) throw new RequestError(400, `outer.${what} must be an array of registered tensor names, got ${JSON.stringify(list)?.slice(0, 200)}`)
  }
  return { params: params as string[], buffers: buffers as string[], lr: lr as number, momentum: momentum as number, nesterov: nesterov as boolean }
}

/** An outer step's tensors checked against the schema (undefined without one); what is wrong is a 400. */
export function outerPlan (control: StepControl, schema: readonly TensorSchema[]): OuterPlan | undefined {
  if (control.outer === undefined) return undefined
  try {
    return planOuterStep(schema, control.names, control.outer)
  } catch (err) {
    throw new RequestError(400, (err as Error).message)
  }
}

/**
 * The indices (registered order) of the tensors a step averages: those its control names, or
 * undefined for all of them (no names, or names covering every tensor). Empty, unknown or
 * repeated names are a 400.
 */
export function stepSubset (control: StepControl, schema: readonly TensorSchema[]): number[] | undefined {
  if (control.names === undefined) return undefined
  try {
    return subsetOf(schema, control.names)
  } catch (err) {
    throw new RequestError(400, (err as Error).message)
  }
}

/** The JSON path: float32 only, and at most MAX_ELEMENTS values (the 413 names the other paths). */
export function checkJsonPath (schema: readonly StoredTensor[]): void {
  const other = schema.find(t => t.dtype !== 'float32')
  if (other !== undefined) throw new RequestError(400, `tensor "${other.name}" is stored as ${other.dtype}, which only the region and binary paths carry; base64 JSON is float32 only`)
  const total = schema.reduce((n, t) => n + elementCount(t.shape), 0)
  if (total > MAX_ELEMENTS) throw new RequestError(413, `the tensors hold ${total} values, more than the ${MAX_ELEMENTS} the base64 JSON path carries; use a region or a binary body`)
}

/** `{weight?, gather?, timeout?, tensors: {name: base64}}`, checked against the registered schema. */
export function parseStep (body: unknown, schema: readonly TensorSchema[]): StepRequest {
  if (!isObject(body) || !isObject(body.tensors)) throw new RequestError(400, 'the step body must be a JSON object with a "tensors" object mapping each name to base64 float32')
  const { weight, timeout, gather } = parseControl(body)
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

export interface TrainerReport {
  readonly loss?: number
  readonly samples?: number
  /** The low 48 bits of the trainer's 16-hex-digit parameter hash: exact as a float64 gauge. */
  readonly paramsHash?: number
}

/** `{loss?, samples? (since the last report), paramsHash? (16 hex digits)}` from POST /v1/report. */
export function parseReport (body: unknown): TrainerReport {
  if (!isObject(body)) throw new RequestError(400, 'the report body must be a JSON object {loss?, samples?, paramsHash?}')
  const { loss, samples, paramsHash } = body
  if (loss !== undefined && (typeof loss !== 'number' || !Number.isFinite(loss))) throw new RequestError(400, `loss must be a finite number, got ${JSON.stringify(loss)}`)
  if (samples !== undefined && (typeof samples !== 'number' || !Number.isFinite(samples) || samples < 0)) throw new RequestError(400, `samples must be a finite number >= 0 (samples since the last report), got ${JSON.stringify(samples)}`)
  if (paramsHash !== undefined && (typeof paramsHash !== 'string' || !/^[0-9a-fA-F]{16}$/.test(paramsHash))) throw new RequestError(400, `paramsHash must be 16 hex digits, got ${JSON.stringify(paramsHash)}`)
  return { loss, samples, paramsHash: paramsHash === undefined ? undefined : parseInt(paramsHash.slice(4), 16) }
}
