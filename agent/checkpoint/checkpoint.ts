/**
 * Checkpoints as folder entries: `<dir>/<swarm>/round-<n>.safetensors` + `round-<n>.json` (the manifest,
 * with each tensor's sha256) + `latest` (a hint naming the newest complete one). Every file is written
 * under a temporary name in the same folder, fsynced, renamed into place, and the folder fsynced; the
 * data first, the manifest last, so a visible manifest means complete data, and the manifest's hashes
 * catch anything else. See README.md for the argument.
 */
import { randomBytes } from 'node:crypto'
import { link, mkdir, open, readFile, readdir, rename, stat, unlink, type FileHandle } from 'node:fs/promises'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { isDtype, type StorageDtype } from '../workloads/sidecar/dtypes.js'
import { SafetensorsReader, writeSafetensors, type TensorSource } from './safetensors.js'
import { toStorageDtype } from './format.js'

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

export interface WriteCheckpointOptions {
  readonly dir: string
  readonly swarm: string
  readonly round: number
  readonly samples: number
  readonly tensors: readonly TensorSource[]
  readonly trainerState?: Readonly<Record<string, unknown>>
  /** Extra string metadata for the safetensors header. */
  readonly metadata?: Readonly<Record<string, string>>
  /** Newest complete checkpoints kept (default 3); older ones are deleted after the new one is complete. */
  readonly keep?: number
  readonly time?: Date
}

export interface Skipped { readonly file: string, readonly reason: string }

export interface LoadedCheckpoint {
  readonly manifest: Manifest
  readonly path: string
  /** Float32 values (16-bit dtypes widened exactly), in manifest order. */
  readonly tensors: Map<string, Float32Array>
}

const SWARM_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/
const ROUND_FILE = /^round-(0|[1-9][0-9]{0,15})(?:-[0-9a-f]{12})?\.(json|safetensors)$/
const TMP_FILE = /^\..+\.([0-9]+)\.[0-9a-f]{12}\.tmp$/
const CLAIM_FILE = /^\.round-(0|[1-9][0-9]{0,15})\.claim$/
/** A claim older than this is a dead writer's: the round may be written again (its manifest link still decides). */
const CLAIM_STALE_MS = 10 * 60_000

export function swarmDir (dir: string, swarm: string): string {
  if (!SWARM_NAME.test(swarm)) throw new CheckpointError(`Swarm name ${JSON.stringify(swarm)} is not a valid folder name.`)
  return join(dir, swarm)
}
/** A data file's name: `round-<n>-<writer tag>.safetensors`, so that concurrent writers of one round never share a file. */
export const dataName = (round: number, tag?: string): string => tag === undefined ? `round-${round}.safetensors` : `round-${round}-${tag}.safetensors`
export const manifestName = (round: number): string => `round-${round}.json`
const claimName = (round: number): string => `.round-${round}.claim`
const isDataOf = (name: string, round: number): boolean => name === dataName(round) || new RegExp(`^round-${round}-[0-9a-f]{12}\\.safetensors$`).test(name)

async function fsyncDir (path: string): Promise<void> {
  const fh = await open(path, 'r')
  try { await fh.sync() } finally { await fh.close() }
}

/**
 * Writes `fill`'s output under a temporary name in `folder`, fsyncs it, puts it in place as `name`,
 * fsyncs the folder. `exclusive`: put in place with link(2), which fails when `name` exists, so of
 * several writers exactly one wins (POSIX, NFS included); otherwise rename(2), which replaces.
 */
async function writeAtomically<T> (folder: string, name: string, fill: (fh: FileHandle) => Promise<T>, exclusive = false): Promise<T> {
  const tmp = join(folder, `.${name}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`)
  let renamed = false
  try {
    const fh = await open(tmp, 'wx', 0o644)
    let result: T
    try {
      result = await fill(fh)
      await fh.sync()
    } finally {
      await fh.close()
    }
    if (exclusive) {
      try {
        await link(tmp, join(folder, name))
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new CheckpointTakenError(`${name} was written by another agent first.`)
        throw err
      }
      await unlink(tmp)
    } else {
      await rename(tmp, join(folder, name))
    }
    renamed = true
    await fsyncDir(folder)
    return result
  } finally {
    if (!renamed) await unlink(tmp).catch(() => {})
  }
}

const writeText = (text: string) => async (fh: FileHandle): Promise<void> => { await fh.writeFile(text) }

function isAlive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** Rounds present in the folder: whether each has a manifest and a data file. Temporary files are ignored. */
export async function listCheckpoints (dir: string, swarm: string): Promise<Array<{ round: number, manifest: boolean, data: boolean }>> {
  let names: string[]
  try {
    names = await readdir(swarmDir(dir, swarm))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return []
    throw err
  }
  const rounds = new Map<number, { round: number, manifest: boolean, data: boolean }>()
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

/** Deletes temporary files left by writers that no longer run (a killed writer's half-written file). */
async function removeStaleTemporaries (folder: string): Promise<string[]> {
  const removed: string[] = []
  for (const name of await readdir(folder)) {
    if (CLAIM_FILE.test(name)) {
      if (!await claimIsLive(join(folder, name))) await unlink(join(folder, name)).then(() => removed.push(name), () => {})
      continue
    }
    const m = TMP_FILE.exec(name)
    if (m === null) continue
    const pid = Number(m[1])
    if (pid === process.pid || isAlive(pid)) continue
    await unlink(join(folder, name)).then(() => removed.push(name), () => {})
  }
  return removed
}

/** Tells this process's claims from a previous incarnation's (a restarted container is often pid 1 again). */
const INCARNATION = randomBytes(8).toString('hex')

/** Whether a claim (`<host> <pid> <incarnation>`) still belongs to a live writer. */
async function claimIsLive (path: string): Promise<boolean> {
  const [text, age] = await Promise.all([
    readFile(path, 'utf8').catch(() => ''),
    stat(path).then(s => Date.now() - s.mtimeMs, () => 0)
  ])
  const [host, pidText, incarnation] = text.trim().split(' ')
  const pid = Number(pidText)
  if (host === hostname() && Number.isSafeInteger(pid)) {
    if (incarnation === INCARNATION) return true
    return pid !== process.pid && isAlive(pid)
  }
  return age < CLAIM_STALE_MS
}

/**
 * Claims a round for this writer (O_EXCL), so that the other groups finishing the same round skip
 * the write instead of all writing it. A dead writer's claim (same host and its process gone, or
 * older than CLAIM_STALE_MS) is taken over; the manifest's link still decides who wins.
 */
async function claimRound (folder: string, round: number): Promise<() => Promise<void>> {
  const path = join(folder, claimName(round))
  for (let attempt = 0; ; attempt++) {
    try {
      const fh = await open(path, 'wx', 0o644)
      try { await fh.writeFile(`${hostname()} ${process.pid} ${INCARNATION}\n`) } finally { await fh.close() }
      return async () => { await unlink(path).catch(() => {}) }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err
      if (await claimIsLive(path)) throw new CheckpointTakenError(`Round ${round} is being written by another agent.`)
      await unlink(path).catch(() => {})
    }
  }
}

/**
 * Writes checkpoint `round` atomically (data, then manifest, then `latest`), then deletes checkpoints
 * older than the newest `keep` complete ones. Several agents may call it for one folder at once
 * (every group that completes a checkpoint round has a writer): each writes its own data file, and
 * the manifest is put in place with link(2), so exactly one wins. The others get CheckpointTakenError,
 * as does a round already checkpointed, being written, or older than the newest checkpoint.
 */
export async function writeCheckpoint (opts: WriteCheckpointOptions): Promise<{ manifest: Manifest, path: string, removed: string[] }> {
  const { dir, swarm, round, samples } = opts
  const keep = opts.keep ?? DEFAULT_KEEP
  if (!Number.isSafeInteger(round) || round < 0) throw new CheckpointError(`Round ${round} is not a non-negative integer.`)
  if (!Number.isSafeInteger(keep) || keep < 1) throw new CheckpointError(`keep must be a positive integer, not ${keep}.`)
  if (!Number.isFinite(samples) || samples < 0) throw new CheckpointError(`samples must be a non-negative number, not ${samples}.`)
  const folder = swarmDir(dir, swarm)
  await mkdir(folder, { recursive: true })
  const removed = await removeStaleTemporaries(folder)
  const existing = await listCheckpoints(dir, swarm)
  if (existing.some(c => c.round === round && c.manifest)) throw new CheckpointTakenError(`Round ${round} of swarm "${swarm}" is already checkpointed.`)
  const newest = existing.find(c => c.manifest)
  if (newest !== undefined && newest.round > round) throw new CheckpointTakenError(`Round ${round} of swarm "${swarm}" is older than its checkpoint of round ${newest.round}.`)
  const release = await claimRound(folder, round)
  try {
    const time = (opts.time ?? new Date()).toISOString()
    const metadata: Record<string, string> = {
      format: 'pt',
      'averaging_swarm.swarm': swarm,
      'averaging_swarm.round': String(round),
      'averaging_swarm.samples': String(samples),
      'averaging_swarm.time': time,
      ...opts.metadata
    }
    const file = dataName(round, randomBytes(6).toString('hex'))
    const written = await writeAtomically(folder, file, async fh => await writeSafetensors(fh, opts.tensors, metadata))
    const manifest: Manifest = {
      format: MANIFEST_FORMAT,
      swarm,
      round,
      samples,
      time,
      file: { name: file, bytes: written.bytes, headerBytes: written.headerBytes },
      tensors: opts.tensors.map((t, i) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape], sha256: written.sha256[i] })),
      trainerState: opts.trainerState ?? {}
    }
    try {
      await writeAtomically(folder, manifestName(round), writeText(JSON.stringify(manifest, null, 1) + '\n'), true)
    } catch (err) {
      await unlink(join(folder, file)).catch(() => {})
      throw err
    }
    const complete = [...existing.filter(c => c.manifest).map(c => c.round), round].sort((a, b) => b - a)
    if (complete[0] === round) {
      await writeAtomically(folder, 'latest', writeText(JSON.stringify({ round, manifest: manifestName(round), data: file }) + '\n'))
    }
    // Prune: everything older than the oldest of the newest `keep` complete checkpoints; manifest first,
    // so an interrupted delete leaves an orphan data file (ignored, deleted next time), never a manifest without data.
    const oldestKept = complete[Math.min(keep, complete.length) - 1]
    const names = await readdir(folder)
    for (const c of existing) {
      if (c.round >= oldestKept) continue
      for (const name of [manifestName(c.round), ...names.filter(n => isDataOf(n, c.round))]) {
        await unlink(join(folder, name)).then(() => removed.push(name), (err: NodeJS.ErrnoException) => {
          if (err.code !== 'ENOENT') throw err
        })
      }
    }
    if (removed.length > 0) await fsyncDir(folder)
    return { manifest, path: join(folder, file), removed }
  } finally {
    await release()
  }
}

/** Reads and validates a manifest file; bounded by MAX_MANIFEST_BYTES. */
export async function readManifest (folder: string, round: number, swarm: string): Promise<Manifest> {
  const path = join(folder, manifestName(round))
  const { size } = await stat(path)
  if (size > MAX_MANIFEST_BYTES) throw new CheckpointError(`The manifest is ${size} bytes, more than the ${MAX_MANIFEST_BYTES} allowed.`)
  const fh = await open(path, 'r')
  let text: string
  try { text = await fh.readFile('utf8') } finally { await fh.close() }
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

function schemaMismatch (manifest: Manifest, schema: CheckpointSchema): string | undefined {
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
 * Checks one checkpoint: manifest, header against manifest, every tensor's sha256, and the schema when given.
 * With `load`, returns the values too (read and hashed in one pass). Never throws for a bad checkpoint.
 */
export async function verifyCheckpoint (dir: string, swarm: string, round: number, opts: { schema?: CheckpointSchema, load?: boolean } = {}):
Promise<{ ok: true, manifest: Manifest, tensors?: Map<string, Float32Array> } | { ok: false, file: string, reason: string }> {
  const folder = swarmDir(dir, swarm)
  let manifest: Manifest
  try {
    manifest = await readManifest(folder, round, swarm)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    return { ok: false, file: manifestName(round), reason: code === 'ENOENT' ? 'no manifest: the write did not complete' : oneLine(err) }
  }
  if (opts.schema !== undefined) {
    const why = schemaMismatch(manifest, opts.schema)
    if (why !== undefined) return { ok: false, file: manifestName(round), reason: `does not match the schema: ${why}` }
  }
  const file = manifest.file.name
  let reader: SafetensorsReader
  try {
    reader = await SafetensorsReader.open(join(folder, file))
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    return { ok: false, file, reason: code === 'ENOENT' ? 'the data file named by the manifest is missing' : oneLine(err) }
  }
  try {
    const why = headerMismatch(reader, manifest)
    if (why !== undefined) return { ok: false, file, reason: why }
    const tensors = opts.load === true ? new Map<string, Float32Array>() : undefined
    const scratch = opts.load === true ? undefined : new Uint8Array(4 << 20)
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
  } finally {
    await reader.close()
  }
}

/**
 * The newest checkpoint of `swarm` whose manifest and hashes verify and whose tensors match `schema`
 * (when given), with its values; each newer one that does not is skipped, logged and listed with its reason.
 */
export async function loadNewestCheckpoint (dir: string, swarm: string, schema?: CheckpointSchema, opts: { log?: (line: string) => void } = {}):
Promise<{ checkpoint: LoadedCheckpoint | null, skipped: Skipped[] }> {
  const log = opts.log ?? ((line: string) => { console.warn(line) })
  const skipped: Skipped[] = []
  for (const c of await listCheckpoints(dir, swarm)) {
    if (!c.manifest) {
      const s = { file: dataName(c.round), reason: 'no manifest: the write did not complete' }
      skipped.push(s)
      log(`checkpoint: skipping ${swarm}/${s.file}: ${s.reason}`)
      continue
    }
    const result = await verifyCheckpoint(dir, swarm, c.round, { schema, load: true })
    if (result.ok) {
      return { checkpoint: { manifest: result.manifest, path: join(swarmDir(dir, swarm), result.manifest.file.name), tensors: result.tensors! }, skipped }
    }
    skipped.push({ file: result.file, reason: result.reason })
    log(`checkpoint: skipping ${swarm}/${result.file}: ${result.reason}`)
  }
  return { checkpoint: null, skipped }
}

function oneLine (err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0]
}
