/**
 * Checkpoints in an S3-compatible bucket: the folder store's layout under a prefix,
 * `<prefix>/<swarm>/round-<n>-<tag>.safetensors` + `round-<n>.json` (the manifest) + `latest`.
 * The data object is uploaded first, then the manifest with `If-None-Match: *`, which the server
 * refuses (412) when the key exists, so of several writers of one round exactly one wins (the
 * link(2) of object storage); the losers delete their data objects. Restore verifies each manifest's
 * data object (size, header, every tensor's sha256) with the folder store's code. See README.md.
 *
 * Bytes go through a temporary file in os.tmpdir(): writeSafetensors streams into it (hashing on the
 * way) and the upload streams from it; a restore streams the object into one and reads it with
 * SafetensorsReader. Memory stays bounded by the SDK's stream buffers (plus, on restore, the float32
 * values returned); disk use is one data object's size while a write or a restore runs.
 */
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdtemp, open, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Transform, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CreateMultipartUploadCommand, DeleteObjectCommand, GetObjectCommand,
  ListObjectsV2Command, PutObjectCommand, S3Client, UploadPartCommand, type GetObjectCommandOutput
} from '@aws-sdk/client-s3'
import { SafetensorsReader, writeSafetensors } from './safetensors.js'
import { TransferProgress } from '../util/transfer-progress.js'
import { bucketPrefix, checkBucketOptions, folderKey, s3Url } from './s3-keys.js'
import {
  CheckpointError, CheckpointTakenError, DEFAULT_KEEP, MAX_MANIFEST_BYTES, checkWriteOptions, dataName, describeWrite, isDataOf,
  manifestName, oneLine, parseManifest, pruneBound, refuseTaken, roundsOf, schemaMismatch, verifyData, type CheckpointSchema,
  type LoadedCheckpoint, type Manifest, type RoundEntry, type Skipped, type VerifyResult
} from './manifest.js'

/** Where and how to reach the bucket; the credentials come from a Secret (the agent's AVS_S3_* env). */
export interface S3StoreOptions {
  /** `http(s)://host:port` of an S3-compatible server; absent: AWS S3 of `region`. */
  readonly endpoint?: string
  readonly region: string
  readonly bucket: string
  /** Key prefix the swarms' folders live under (no leading or trailing `/` needed); default none. */
  readonly prefix?: string
  /** `<endpoint>/<bucket>/<key>` instead of `<bucket>.<endpoint>/<key>` (most self-hosted servers). */
  readonly forcePathStyle?: boolean
  readonly credentials: { readonly accessKeyId: string, readonly secretAccessKey: string, readonly sessionToken?: string }
  /** Data objects larger than this are uploaded in parts of this size (default 64 MiB; S3 requires ≥ 5 MiB). */
  readonly partBytes?: number
}

/** Where a long upload or download of a data object reports its progress (agent/util/transfer-progress.ts). */
export interface TransferReport {
  readonly line: (line: string) => void
  /** Least time between two lines (default 5 s; none for a transfer done sooner). */
  readonly intervalMs?: number
}

export type S3WriteOptions = Omit<import('./checkpoint.js').WriteCheckpointOptions, 'dir'>

/** S3's limit on parts per upload; the part size grows past partBytes when a file needs more. */
const MAX_PARTS = 10_000
/** 409 ConditionalRequestConflict (a concurrent conditional write in flight, AWS): retried this many times. */
const CONFLICT_RETRIES = 5

/** The bucket cannot be used at all (missing, or access refused): restore stops instead of skipping rounds. */
export class S3StoreError extends CheckpointError {}

/** The error's S3 code name and HTTP status (SDK exceptions carry both). */
function s3Code (err: unknown): { name: string, status: number | undefined } {
  const e = err as { name?: string, Code?: string, $metadata?: { httpStatusCode?: number } }
  return { name: e?.Code ?? e?.name ?? '', status: e?.$metadata?.httpStatusCode }
}

/** Counts bytes through, failing once more than `limit` arrive (the object's declared size is not trusted). */
function limiter (limit: number, what: string, progress?: TransferProgress): Transform {
  let seen = 0
  return new Transform({
    transform (chunk: Buffer, _enc, done) {
      seen += chunk.length
      progress?.update(seen)
      if (seen > limit) done(new CheckpointError(`The ${what} is longer than the ${limit} bytes expected.`))
      else done(null, chunk)
    }
  })
}

export class S3CheckpointStore {
  readonly client: S3Client
  readonly bucket: string
  readonly prefix: string
  private readonly where: string
  private readonly partBytes: number

  constructor (readonly options: S3StoreOptions, private readonly report?: TransferReport) {
    this.partBytes = checkBucketOptions(options)
    this.bucket = options.bucket
    this.prefix = bucketPrefix(options.prefix)
    this.where = options.endpoint ?? `AWS S3 (${options.region})`
    this.client = new S3Client({
      endpoint: options.endpoint,
      region: options.region,
      forcePathStyle: options.forcePathStyle,
      credentials: { ...options.credentials }
    })
  }

  /** `<prefix>/<swarm>/` */
  folderKey (swarm: string): string { return folderKey(this.prefix, swarm) }

  url (key: string): string { return s3Url(this.bucket, key) }

  /** A missing bucket as one sentence; anything else unchanged. */
  private storeError (err: unknown): unknown {
    const { name, status } = s3Code(err)
    if (name === 'NoSuchBucket') return new S3StoreError(`The bucket "${this.bucket}" does not exist at ${this.where}.`)
    if (status === 403 || name === 'AccessDenied' || name === 'InvalidAccessKeyId' || name === 'SignatureDoesNotMatch') {
      return new S3StoreError(`Access to the bucket "${this.bucket}" at ${this.where} was refused (${name || status}): check the credentials.`)
    }
    return err
  }

  /** Names of the objects directly in the swarm's folder. */
  private async names (swarm: string): Promise<string[]> {
    const folder = this.folderKey(swarm)
    const names: string[] = []
    let token: string | undefined
    do {
      let page
      try {
        page = await this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: folder, ContinuationToken: token }))
      } catch (err) { throw this.storeError(err) }
      for (const o of page.Contents ?? []) {
        const name = o.Key?.slice(folder.length)
        if (name !== undefined && name !== '' && !name.includes('/')) names.push(name)
      }
      token = page.IsTruncated === true ? page.NextContinuationToken : undefined
    } while (token !== undefined)
    return names
  }

  /** Rounds in the bucket, newest first: whether each has a manifest and a data object. */
  async list (swarm: string): Promise<RoundEntry[]> {
    return roundsOf(await this.names(swarm))
  }

  private async put (key: string, body: string, ifNoneMatch = false): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.client.send(new PutObjectCommand({
          Bucket: this.bucket, Key: key, Body: body, ContentType: 'application/json', IfNoneMatch: ifNoneMatch ? '*' : undefined
        }))
        return
      } catch (err) {
        const { name, status } = s3Code(err)
        if (ifNoneMatch && (status === 412 || name === 'PreconditionFailed')) {
          throw new CheckpointTakenError(`${key} was written by another agent first.`)
        }
        if (ifNoneMatch && (status === 409 || name === 'ConditionalRequestConflict') && attempt < CONFLICT_RETRIES) {
          await new Promise(resolve => setTimeout(resolve, 50 * 2 ** attempt))
          continue
        }
        throw this.storeError(err)
      }
    }
  }

  private async remove (key: string): Promise<void> {
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }))
    } catch (err) { throw this.storeError(err) }
  }

  /** Streams a file up: one PutObject, or a multipart upload in parts of partBytes (aborted on failure). */
  private async upload (key: string, path: string, bytes: number): Promise<void> {
    try {
      if (bytes <= this.partBytes) {
        await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: createReadStream(path), ContentLength: bytes }))
        return
      }
      const partBytes = Math.max(this.partBytes, Math.ceil(bytes / MAX_PARTS))
      const { UploadId } = await this.client.send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: key }))
      const progress = this.progress(`uploading ${this.url(key)}`, bytes)
      try {
        const parts: Array<{ ETag?: string, PartNumber: number }> = []
        for (let start = 0, n = 1; start < bytes; start += partBytes, n++) {
          const length = Math.min(partBytes, bytes - start)
          const { ETag } = await this.client.send(new UploadPartCommand({
            Bucket: this.bucket, Key: key, UploadId, PartNumber: n, ContentLength: length, Body: createReadStream(path, { start, end: start + length - 1 })
          }))
          parts.push({ ETag, PartNumber: n })
          progress?.update(start + length)
        }
        await this.client.send(new CompleteMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId, MultipartUpload: { Parts: parts } }))
      } catch (err) {
        await this.client.send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId })).catch(() => {})
        throw err
      }
    } catch (err) { throw this.storeError(err) }
  }

  /**
   * Writes checkpoint `round` (data object, then manifest with If-None-Match: *, then `latest`), then
   * deletes the rounds older than the newest `keep` complete ones (manifest before data). Exactly one of
   * several concurrent writers of a round wins; the others get CheckpointTakenError and delete their
   * data object, as does a round already checkpointed or older than the newest checkpoint.
   */
  async write (opts: S3WriteOptions): Promise<{ manifest: Manifest, key: string, removed: string[] }> {
    const { swarm, round, samples } = opts
    const keep = opts.keep ?? DEFAULT_KEEP
    checkWriteOptions(round, keep, samples)
    const folder = this.folderKey(swarm)
    const names = await this.names(swarm)
    const existing = roundsOf(names)
    refuseTaken(existing, swarm, round)
    const { file, metadata, manifest: describe } = describeWrite(opts)
    const written = await withTempFile(async path => {
      const fh = await open(path, 'wx', 0o600)
      let result
      try { result = await writeSafetensors(fh, opts.tensors, metadata) } finally { await fh.close() }
      await this.upload(folder + file, path, result.bytes)
      return result
    })
    const manifest = describe(written)
    try {
      await this.put(folder + manifestName(round), JSON.stringify(manifest, null, 1) + '\n', true)
    } catch (err) {
      await this.remove(folder + file).catch(() => {})
      throw err
    }
    const { newest, oldestKept } = pruneBound(existing, round, keep)
    if (newest) await this.put(folder + 'latest', JSON.stringify({ round, manifest: manifestName(round), data: file }) + '\n')
    const removed: string[] = []
    for (const c of existing) {
      if (c.round >= oldestKept) continue
      for (const name of [...(c.manifest ? [manifestName(c.round)] : []), ...names.filter(n => isDataOf(n, c.round))]) {
        await this.remove(folder + name)
        removed.push(name)
      }
    }
    return { manifest, key: folder + file, removed }
  }

  private async get (key: string): Promise<GetObjectCommandOutput | undefined> {
    try {
      return await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }))
    } catch (err) {
      const { name, status } = s3Code(err)
      if (name === 'NoSuchKey' || (status === 404 && name !== 'NoSuchBucket')) return undefined
      throw this.storeError(err)
    }
  }

  /** Reads and validates a round's manifest; bounded by MAX_MANIFEST_BYTES before and while reading. Undefined when absent. */
  async readManifest (swarm: string, round: number): Promise<Manifest | undefined> {
    const res = await this.get(this.folderKey(swarm) + manifestName(round))
    if (res === undefined) return undefined
    const body = res.Body as Readable
    if (res.ContentLength === undefined || res.ContentLength > MAX_MANIFEST_BYTES) {
      body.destroy()
      throw new CheckpointError(res.ContentLength === undefined
        ? 'The manifest object has no Content-Length.'
        : `The manifest is ${res.ContentLength} bytes, more than the ${MAX_MANIFEST_BYTES} allowed.`)
    }
    const chunks: Buffer[] = []
    await pipeline(body, limiter(res.ContentLength, 'manifest'), async function * (source: AsyncIterable<Buffer>) {
      for await (const chunk of source) chunks.push(chunk)
    })
    return parseManifest(Buffer.concat(chunks).toString('utf8'), round, swarm)
  }

  /**
   * Checks one checkpoint: manifest, data object's size and header against it, every tensor's sha256,
   * and the schema when given; with `load`, returns the values too. Never throws for a bad checkpoint
   * (a missing bucket or refused access still throws).
   */
  async verify (swarm: string, round: number, opts: { schema?: CheckpointSchema, load?: boolean } = {}): Promise<VerifyResult> {
    const folder = this.folderKey(swarm)
    let manifest: Manifest | undefined
    try {
      manifest = await this.readManifest(swarm, round)
    } catch (err) {
      if (err instanceof S3StoreError) throw err
      return { ok: false, file: manifestName(round), reason: oneLine(err) }
    }
    if (manifest === undefined) return { ok: false, file: manifestName(round), reason: 'no manifest: the write did not complete' }
    if (opts.schema !== undefined) {
      const why = schemaMismatch(manifest, opts.schema)
      if (why !== undefined) return { ok: false, file: manifestName(round), reason: `does not match the schema: ${why}` }
    }
    const file = manifest.file.name
    const res = await this.get(folder + file)
    if (res === undefined) return { ok: false, file, reason: 'the data object named by the manifest is missing' }
    const body = res.Body as Readable
    if (res.ContentLength !== manifest.file.bytes) {
      body.destroy()
      const size = res.ContentLength === undefined ? 'of unknown size' : `${res.ContentLength} bytes`
      return { ok: false, file, reason: `the data object is ${size} where the manifest says ${manifest.file.bytes}` }
    }
    const m = manifest
    return await withTempFile(async path => {
      try {
        await pipeline(body, limiter(m.file.bytes, 'data object', this.progress(`downloading ${this.url(folder + file)}`, m.file.bytes)), createWriteStream(path, { flags: 'wx', mode: 0o600 }))
      } catch (err) {
        return { ok: false, file, reason: `reading the data object failed: ${oneLine(err)}` }
      }
      let reader: SafetensorsReader
      try {
        reader = await SafetensorsReader.open(path)
      } catch (err) {
        return { ok: false, file, reason: oneLine(err) }
      }
      try {
        return await verifyData(reader, m, file, opts.load === true)
      } finally {
        await reader.close()
      }
    })
  }

  /**
   * The newest checkpoint of `swarm` whose manifest and hashes verify and whose tensors match `schema`
   * (when given), with its float32 values; each newer one that does not is skipped, logged and listed with its reason.
   */
  async loadNewest (swarm: string, schema?: CheckpointSchema, opts: { log?: (line: string) => void } = {}): Promise<{ checkpoint: LoadedCheckpoint | null, skipped: Skipped[] }> {
    const log = opts.log ?? ((line: string) => { console.warn(line) })
    const skipped: Skipped[] = []
    const skip = (s: Skipped): void => {
      skipped.push(s)
      log(`checkpoint: skipping ${this.url(this.folderKey(swarm) + s.file)}: ${s.reason}`)
    }
    for (const c of await this.list(swarm)) {
      if (!c.manifest) {
        skip({ file: dataName(c.round), reason: 'no manifest: the write did not complete' })
        continue
      }
      const result = await this.verify(swarm, c.round, { schema, load: true })
      if (result.ok) {
        return { checkpoint: { manifest: result.manifest, path: this.url(this.folderKey(swarm) + result.manifest.file.name), tensors: result.tensors! }, skipped }
      }
      skip({ file: result.file, reason: result.reason })
    }
    return { checkpoint: null, skipped }
  }

  destroy (): void { this.client.destroy() }

  private progress (what: string, bytes: number): TransferProgress | undefined {
    return this.report === undefined ? undefined : new TransferProgress(what, bytes, this.report.line, this.report.intervalMs)
  }
}

/** Runs `fn` with a path in a fresh private folder under os.tmpdir(), removed afterwards. */
async function withTempFile<T> (fn: (path: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'avs-s3-ckpt-'))
  try {
    return await fn(join(dir, 'data.safetensors'))
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}
