/**
 * What the checkpoint stores share, whatever holds the bytes (a folder: checkpoint.ts; a bucket:
 * s3-store.ts): names, the manifest and its validation, the checks of a data file against its
 * manifest (size, header, every tensor's sha256), and which rounds pruning removes. Pure, apart from
 * reading through a SafetensorsReader.
 */
import { isDtype, type StorageDtype } from '../workloads/sidecar/dtypes.js'
import { toStorageDtype } from './format.js'
import { randomBytes } from 'node:crypto'
import type { SafetensorsReader, TensorSource, WriteResult } from './safetensors.js'

export const MANIFEST_FORMAT = 'averaging-swarm-checkpoint/1'
/** A manifest larger than this is not read (a 100k-tensor model's manifest is ~20 MB). */
export const MAX_MANIFEST_BYTES = 64 << 20
export const DEFAULT_KEEP = 3

export class CheckpointError extends Error {
  override readonly name = 'CheckpointError'
}

/** Another writer has (or is writing) this round: not a failure, the round is or will be durable. */
export class CheckpointTakenError extends CheckpointError {}

export interface ManifestTensor {
  readonly name: string
  readonly dtype: StorageDtype
  readonly shape: readonly number[]
  readonly sha256: string
}

export interface Manifest {
  readonly format: typeof MANIFEST_FORMAT
  readonly swarm: string
  readonly round: number
  /** Samples averaged into this state (the swarm's running count), as the writer reported it. */
  readonly samples: number
  /** ISO 8601 time the checkpoint was written. */
  readonly time: string
  readonly file: { readonly name: string, readonly bytes: number, readonly headerBytes: number }
  readonly tensors: readonly ManifestTensor[]
  /** Free-form, JSON-serializable trainer state description (e.g. DiLoCo's outer momentum tensor names). */
  readonly trainerState: Readonly<Record<string, unknown>>
}

/** What restore expects: the tensors in order, with their shapes and, when given, dtypes. */
export type CheckpointSchema = ReadonlyArray<{ readonly name: string, readonly shape: readonly number[], readonly dtype?: StorageDtype }>

export interface Skipped { readonly file: string, readonly reason: string }

export interface LoadedCheckpoint {
  readonly manifest: Manifest
  /** Where the data is: a file's path, or `s3://<bucket>/<key>`. */
  readonly path: string
  /** Float32 values (16-bit dtypes widened exactly), in manifest order. */
  readonly tensors: Map<string, Float32Array>
}

export type VerifyResult = { ok: true, manifest: Manifest, tensors?: Map<string, Float32Array> } | { ok: false, file: string, reason: string }

const SWARM_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/
/** A round's manifest or data file name; group 1 the round, group 2 `json` or `safetensors`. */
export const ROUND_FILE = /^round-(0|[1-9][0-9]{0,15})(?:-[0-9a-f]{12})?\.(json|safetensors)$/

export function checkSwarmName (swarm: string): void {
  if (!SWARM_NAME.test(swarm)) throw new CheckpointError(`Swarm name ${JSON.stringify(swarm)} is not a valid folder name.`)
}
/** A data file's name: `round-<n>-<tag>.safetensors`, so that concurrent writers of one round never share a file. */
export const dataName = (round: number, tag?: string): string => tag === undefined ? `round-${round}.safetensors` : `round-${round}-${tag}.safetensors`
export const manifestName = (round: number): string => `round-${round}.json`
export const isDataOf = (name: string, round: number): boolean => name === dataName(round) || new RegExp(`^round-${round}-[0-9a-f]{12}\\.safetensors$`).test(name)

export interface RoundEntry { round: number, manifest: boolean, data: boolean }

/** The rounds among a swarm folder's (or prefix's) names, newest first; other names are ignored. */
export function roundsOf (names: Iterable<string>): RoundEntry[] {
  const rounds = new Map<number, RoundEntry>()
  for (const name of names) {
    const m = ROUND_FILE.exec(name)
    if (m === null) continue
    const round = Number(m[1])
    if (!Number.isSafeInteger(round)) continue
    const r = rounds.get(round) ?? { round, manifest: false, data: false }
    if (m[2] === 'json') r.manifest = true
    else r.data = true
    rounds.set(round, r)
  }
  return [...rounds.values()].sort((a, b) => b.round - a.round)
}

/**
 * Before writing `round`: CheckpointTakenError when it already has a manifest or is older than the newest
 * checkpoint. After: the complete rounds newest first (the new one included) and the oldest one kept.
 */
export function refuseTaken (existing: readonly RoundEntry[], swarm: string, round: number): void {
  if (existing.some(c => c.round === round && c.manifest)) throw new CheckpointTakenError(`Round ${round} of swarm "${swarm}" is already checkpointed.`)
  const newest = existing.find(c => c.manifest)
  if (newest !== undefined && newest.round > round) throw new CheckpointTakenError(`Round ${round} of swarm "${swarm}" is older than its checkpoint of round ${newest.round}.`)
}

/** Whether the new round is the newest complete one (so `latest` names it) and the oldest round pruning keeps. */
export function pruneBound (existing: readonly RoundEntry[], round: number, keep: number): { newest: boolean, oldestKept: number } {
  const complete = [...existing.filter(c => c.manifest).map(c => c.round), round].sort((a, b) => b - a)
  return { newest: complete[0] === round, oldestKept: complete[Math.min(keep, complete.length) - 1] }
}

export function checkWriteOptions (round: number, keep: number, samples: number): void {
  if (!Number.isSafeInteger(round) || round < 0) throw new CheckpointError(`Round ${round} is not a non-negative integer.`)
  if (!Number.isSafeInteger(keep) || keep < 1) throw new CheckpointError(`keep must be a positive integer, not ${keep}.`)
  if (!Number.isFinite(samples) || samples < 0) throw new CheckpointError(`samples must be a non-negative number, not ${samples}.`)
}

/**
 * A new checkpoint's data file name (tagged with a random writer tag), its safetensors metadata, and
 * the manifest once the data is written (its size and hashes).
 */
export function describeWrite (opts: {
  readonly swarm: string, readonly round: number, readonly samples: number, readonly tensors: readonly TensorSource[]
  readonly trainerState?: Readonly<Record<string, unknown>>, readonly metadata?: Readonly<Record<string, string>>, readonly time?: Date
}): { file: string, metadata: Record<string, string>, manifest: (written: WriteResult) => Manifest } {
  const { swarm, round, samples } = opts
  const time = (opts.time ?? new Date()).toISOString()
  const file = dataName(round, randomBytes(6).toString('hex'))
  const metadata: Record<string, string> = {
    format: 'pt',
    'averaging_swarm.swarm': swarm,
    'averaging_swarm.round': String(round),
    'averaging_swarm.samples': String(samples),
    'averaging_swarm.time': time,
    ...opts.metadata
  }
  const manifest = (written: WriteResult): Manifest => ({
    format: MANIFEST_FORMAT,
    swarm,
    round,
    samples,
    time,
    file: { name: file, bytes: written.bytes, headerBytes: written.headerBytes },
    tensors: opts.tensors.map((t, i) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape], sha256: written.sha256[i] })),
    trainerState: opts.trainerState ?? {}
  })
  return { file, metadata, manifest }
}

/** Parses and validates a manifest's text (the caller bounds its size by MAX_MANIFEST_BYTES). */
export function parseManifest (text: string, round: number, swarm: string): Manifest {
  let m: any
  try { m = JSON.parse(text) } catch { throw new CheckpointError('The manifest is not valid JSON.') }
  const bad = (what: string): never => { throw new CheckpointError(`The manifest's ${what} is missing or invalid.`) }
  if (typeof m !== 'object' || m === null || Array.isArray(m)) bad('top-level object')
  if (m.format !== MANIFEST_FORMAT) bad('format')
  if (m.swarm !== swarm) bad('swarm')
  if (m.round !== round) bad('round')
  if (typeof m.samples !== 'number' || !Number.isFinite(m.samples)) bad('samples')
  if (typeof m.time !== 'string') bad('time')
  if (typeof m.file !== 'object' || m.file === null || typeof m.file.name !== 'string' || !isDataOf(m.file.name, round) ||
    !Number.isSafeInteger(m.file.bytes) || !Number.isSafeInteger(m.file.headerBytes)) bad('file')
  if (!Array.isArray(m.tensors)) bad('tensors')
  for (const t of m.tensors) {
    if (typeof t !== 'object' || t === null || typeof t.name !== 'string' || !isDtype(t.dtype) || !Array.isArray(t.shape) ||
      !t.shape.every((d: unknown) => Number.isSafeInteger(d) && (d as number) >= 0) || typeof t.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(t.sha256)) {
      bad('tensor entry')
    }
  }
  if (typeof m.trainerState !== 'object' || m.trainerState === null || Array.isArray(m.trainerState)) bad('trainerState')
  return m as Manifest
}

export function schemaMismatch (manifest: Manifest, schema: CheckpointSchema): string | undefined {
  if (manifest.tensors.length !== schema.length) return `it has ${manifest.tensors.length} tensors where the schema has ${schema.length}`
  for (let i = 0; i < schema.length; i++) {
    const want = schema[i]
    const got = manifest.tensors[i]
    if (got.name !== want.name) return `tensor ${i} is "${got.name}" where the schema has "${want.name}"`
    if (got.shape.length !== want.shape.length || got.shape.some((d, j) => d !== want.shape[j])) {
      return `tensor "${got.name}" has shape [${got.shape.join(', ')}] where the schema has [${want.shape.join(', ')}]`
    }
    if (want.dtype !== undefined && got.dtype !== want.dtype) return `tensor "${got.name}" is ${got.dtype} where the schema has ${want.dtype}`
  }
  return undefined
}

/** The file's size and header must agree with the manifest; returns why not, or undefined. */
function headerMismatch (reader: SafetensorsReader, manifest: Manifest): string | undefined {
  if (reader.fileBytes !== manifest.file.bytes) return `the data file is ${reader.fileBytes} bytes where the manifest says ${manifest.file.bytes}`
  const entries = reader.tensors
  if (entries.length !== manifest.tensors.length) return `the data file has ${entries.length} tensors where the manifest has ${manifest.tensors.length}`
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]
    const t = manifest.tensors[i]
    if (e.name !== t.name || toStorageDtype(e.dtype) !== t.dtype || e.shape.length !== t.shape.length || e.shape.some((d, j) => d !== t.shape[j])) {
      return `the data file's tensor ${i} ("${e.name}") differs from the manifest's ("${t.name}")`
    }
  }
  return undefined
}

/**
 * Checks an open data file against its manifest: size and header, then every tensor's sha256 (with
 * `load`, reading the values in the same pass). Never throws for a bad file; the caller closes the reader.
 */
export async function verifyData (reader: SafetensorsReader, manifest: Manifest, file: string, load: boolean): Promise<VerifyResult> {
  try {
    const why = headerMismatch(reader, manifest)
    if (why !== undefined) return { ok: false, file, reason: why }
    const tensors = load ? new Map<string, Float32Array>() : undefined
    const scratch = load ? undefined : new Uint8Array(4 << 20)
    for (const t of manifest.tensors) {
      let sha: string
      if (tensors !== undefined) {
        const { values, sha256 } = await reader.readFloat32(t.name)
        tensors.set(t.name, values)
        sha = sha256
      } else {
        sha = await reader.sha256(t.name, scratch)
      }
      if (sha !== t.sha256) return { ok: false, file, reason: `tensor "${t.name}" has sha256 ${sha.slice(0, 12)}… where the manifest has ${t.sha256.slice(0, 12)}…` }
    }
    return { ok: true, manifest, tensors }
  } catch (err) {
    return { ok: false, file, reason: oneLine(err) }
  }
}

export function oneLine (err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0]
}
