/**
 * Where a swarm's checkpoints live, behind one interface: a folder shared by the agents (a
 * PersistentVolumeClaim in a cluster, a local folder in `npm start`) or an S3-compatible bucket.
 * Both keep the same layout (`<swarm>/round-<n>.json` naming `round-<n>-<tag>.safetensors`) and the
 * same guarantees: exactly one writer of a round wins (link(2) / If-None-Match), a manifest is
 * visible only once its data is complete, restore verifies every tensor's sha256.
 */
import { join } from 'node:path'
import { listCheckpoints, loadNewestCheckpoint, readManifest, swarmDir, verifyCheckpoint, writeCheckpoint, type WriteCheckpointOptions } from './checkpoint.js'
import type { S3CheckpointStore, S3StoreOptions, TransferReport } from './s3-store.js'
import { bucketPrefix, checkBucketOptions, folderKey, s3Url } from './s3-keys.js'
import type { CheckpointSchema, LoadedCheckpoint, Manifest, RoundEntry, Skipped } from './manifest.js'

export type StoreWriteOptions = Omit<WriteCheckpointOptions, 'dir'>

export interface CheckpointStore {
  /** A person's name for a swarm's checkpoints: a folder path or an s3:// URL. */
  where (swarm: string): string
  /** Writes one round; CheckpointTakenError when another writer has it (not a failure). */
  write (opts: StoreWriteOptions): Promise<{ manifest: Manifest, location: string }>
  /** Rounds present, newest first. */
  list (swarm: string): Promise<RoundEntry[]>
  /** The newest checkpoint that verifies and fits `schema`; the newer ones that do not are skipped with a reason. */
  loadNewest (swarm: string, schema: CheckpointSchema, log: (line: string) => void): Promise<{ checkpoint: LoadedCheckpoint | null, skipped: Skipped[] }>
  /** A round's manifest (its time, samples, tensors), read and checked but not its data; undefined when there is none. */
  manifest (swarm: string, round: number): Promise<Manifest | undefined>
  /** One round, verified and loaded; the reason when it is missing, torn, corrupt or another schema. */
  load (swarm: string, round: number, schema: CheckpointSchema): Promise<{ checkpoint: LoadedCheckpoint } | { reason: string }>
  close (): void
}

export type CheckpointStoreConfig =
  | { readonly kind: 'folder', readonly dir: string }
  | ({ readonly kind: 's3' } & S3StoreOptions)

export class FolderStore implements CheckpointStore {
  constructor (readonly dir: string) {}

  where (swarm: string): string { return swarmDir(this.dir, swarm) }

  async write (opts: StoreWriteOptions): Promise<{ manifest: Manifest, location: string }> {
    const { manifest, path } = await writeCheckpoint({ ...opts, dir: this.dir })
    return { manifest, location: path }
  }

  async list (swarm: string): Promise<RoundEntry[]> { return await listCheckpoints(this.dir, swarm) }

  async manifest (swarm: string, round: number): Promise<Manifest | undefined> {
    try {
      return await readManifest(swarmDir(this.dir, swarm), round, swarm)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
      throw err
    }
  }

  async loadNewest (swarm: string, schema: CheckpointSchema, log: (line: string) => void): Promise<{ checkpoint: LoadedCheckpoint | null, skipped: Skipped[] }> {
    return await loadNewestCheckpoint(this.dir, swarm, schema, { log })
  }

  async load (swarm: string, round: number, schema: CheckpointSchema): Promise<{ checkpoint: LoadedCheckpoint } | { reason: string }> {
    const r = await verifyCheckpoint(this.dir, swarm, round, { schema, load: true })
    if (!r.ok) return { reason: `${r.file}: ${r.reason}` }
    return { checkpoint: { manifest: r.manifest, path: join(swarmDir(this.dir, swarm), r.manifest.file.name), tensors: r.tensors! } }
  }

  close (): void {}
}

/** The S3 store under the same interface; the SDK is loaded at the first request (s3-keys.ts says why). */
export class BucketStore implements CheckpointStore {
  private store?: Promise<S3CheckpointStore>
  private readonly prefix: string

  constructor (private readonly options: S3StoreOptions, private readonly report?: TransferReport) {
    checkBucketOptions(options)
    this.prefix = bucketPrefix(options.prefix)
  }

  private async s3 (): Promise<S3CheckpointStore> {
    this.store ??= import('./s3-store.js').then(m => new m.S3CheckpointStore(this.options, this.report))
    return await this.store
  }

  where (swarm: string): string { return s3Url(this.options.bucket, folderKey(this.prefix, swarm)) }

  async write (opts: StoreWriteOptions): Promise<{ manifest: Manifest, location: string }> {
    const { manifest, key } = await (await this.s3()).write(opts)
    return { manifest, location: s3Url(this.options.bucket, key) }
  }

  async list (swarm: string): Promise<RoundEntry[]> { return await (await this.s3()).list(swarm) }

  async manifest (swarm: string, round: number): Promise<Manifest | undefined> { return await (await this.s3()).readManifest(swarm, round) }

  async loadNewest (swarm: string, schema: CheckpointSchema, log: (line: string) => void): Promise<{ checkpoint: LoadedCheckpoint | null, skipped: Skipped[] }> {
    return await (await this.s3()).loadNewest(swarm, schema, { log })
  }

  async load (swarm: string, round: number, schema: CheckpointSchema): Promise<{ checkpoint: LoadedCheckpoint } | { reason: string }> {
    const r = await (await this.s3()).verify(swarm, round, { schema, load: true })
    if (!r.ok) return { reason: `${r.file}: ${r.reason}` }
    return { checkpoint: { manifest: r.manifest, path: this.where(swarm) + r.manifest.file.name, tensors: r.tensors! } }
  }

  close (): void { void this.store?.then(s => { s.destroy() }, () => {}) }
}

/** `report`: progress of a bucket's long uploads and downloads (a folder's are local copies). */
export function openCheckpointStore (config: CheckpointStoreConfig, report?: TransferReport): CheckpointStore {
  if (config.kind === 'folder') return new FolderStore(config.dir)
  const { kind: _, ...options } = config
  return new BucketStore(options, report)
}
