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
import { SafetensorsReader, writeSafetensors, type TensorSource } from './safetensors.js'
import {
  CheckpointError, CheckpointTakenError, DEFAULT_KEEP, MANIFEST_FORMAT, MAX_MANIFEST_BYTES, checkSwarmName, checkWriteOptions, dataName, describeWrite, isDataOf,
  manifestName, oneLine, parseManifest, pruneBound, refuseTaken, roundsOf, schemaMismatch, verifyData, type CheckpointSchema, type LoadedCheckpoint, type Manifest, type RoundEntry,
  type Skipped, type VerifyResult
} from './manifest.js'

export { CheckpointError, CheckpointTakenError, DEFAULT_KEEP, MANIFEST_FORMAT, MAX_MANIFEST_BYTES, dataName, manifestName }
export type { CheckpointSchema, LoadedCheckpoint, Manifest, ManifestTensor, Skipped } from './manifest.js'

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

const TMP_FILE = /^\..+\.([0-9]+)\.[0-9a-f]{12}\.tmp$/
const CLAIM_FILE = /^\.round-(0|[1-9][0-9]{0,15})\.claim$/
/** A claim older than this is a dead writer's: the round may be written again (its manifest link still decides). */
const CLAIM_STALE_MS = 10 * 60_000

export function swarmDir (dir: string, swarm: string): string {
  checkSwarmName(swarm)
  return join(dir, swarm)
}
const claimName = (round: number): string => `.round-${round}.claim`

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
export async function listCheckpoints (dir: string, swarm: string): Promise<RoundEntry[]> {
  let names: string[]
  try {
    names = await readdir(swarmDir(dir, swarm))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return []
    throw err
  }
  return roundsOf(names)
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

/**
 * Whether a claim (`<host> <pid> <incarnation>`) still belongs to a live writer. Claims are linked into
 * place whole, so one without that line is a writer's killed before claims were written that way (an
 * empty file): dead, or it would hold its round for CLAIM_STALE_MS.
 */
async function claimIsLive (path: string): Promise<boolean> {
  const [text, age] = await Promise.all([
    readFile(path, 'utf8').catch(() => ''),
    stat(path).then(s => Date.now() - s.mtimeMs, () => 0)
  ])
  const [host, pidText, incarnation] = text.trim().split(' ')
  const pid = Number(pidText)
  if (host === '' || pidText === undefined || incarnation === undefined) return false
  if (host === hostname() && Number.isSafeInteger(pid)) {
    if (incarnation === INCARNATION) return true
    return pid !== process.pid && isAlive(pid)
  }
  return age < CLAIM_STALE_MS
}

/**
 * Claims a round for this writer, so that the other groups finishing the same round skip the write
 * instead of all writing it. The claim is written under a temporary name and linked into place
 * (exclusive), so it never exists without its owner's line: a writer killed between creating and
 * filling the claim (O_EXCL then write) left an empty one that nobody could tell from a live writer's.
 * A dead writer's claim (same host and its process gone, or older than CLAIM_STALE_MS) is taken over;
 * the manifest's link still decides who wins.
 */
async function claimRound (folder: string, round: number): Promise<() => Promise<void>> {
  const path = join(folder, claimName(round))
  const taken = (): CheckpointTakenError => new CheckpointTakenError(`Round ${round} is being written by another agent.`)
  for (let attempt = 0; ; attempt++) {
    try {
      await writeAtomically(folder, claimName(round), writeText(`${hostname()} ${process.pid} ${INCARNATION}\n`), true)
      return async () => { await unlink(path).catch(() => {}) }
    } catch (err) {
      if (!(err instanceof CheckpointTakenError)) throw err
      if (attempt > 0 || await claimIsLive(path)) throw taken()
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
  checkWriteOptions(round, keep, samples)
  const folder = swarmDir(dir, swarm)
  await mkdir(folder, { recursive: true })
  const removed = await removeStaleTemporaries(folder)
  const existing = await listCheckpoints(dir, swarm)
  refuseTaken(existing, swarm, round)
  const release = await claimRound(folder, round)
  try {
    const { file, metadata, manifest: describe } = describeWrite(opts)
    const written = await writeAtomically(folder, file, async fh => await writeSafetensors(fh, opts.tensors, metadata))
    const manifest = describe(written)
    try {
      await writeAtomically(folder, manifestName(round), writeText(JSON.stringify(manifest, null, 1) + '\n'), true)
    } catch (err) {
      await unlink(join(folder, file)).catch(() => {})
      throw err
    }
    const { newest, oldestKept } = pruneBound(existing, round, keep)
    if (newest) {
      await writeAtomically(folder, 'latest', writeText(JSON.stringify({ round, manifest: manifestName(round), data: file }) + '\n'))
    }
    // Prune: everything older than the oldest of the newest `keep` complete checkpoints; manifest first,
    // so an interrupted delete leaves an orphan data file (ignored, deleted next time), never a manifest without data.
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
  return parseManifest(text, round, swarm)
}

/**
 * Checks one checkpoint: manifest, header against manifest, every tensor's sha256, and the schema when given.
 * With `load`, returns the values too (read and hashed in one pass). Never throws for a bad checkpoint.
 */
export async function verifyCheckpoint (dir: string, swarm: string, round: number, opts: { schema?: CheckpointSchema, load?: boolean } = {}):
Promise<VerifyResult> {
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
    return await verifyData(reader, manifest, file, opts.load === true)
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
