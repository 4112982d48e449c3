/**
 * The S3 checkpoint store against a real S3-compatible server (versitygw, posix backend, loopback):
 * round trip, one winner among concurrent writers (If-None-Match: *), corruption skipped, pruning,
 * a missing bucket. Skipped when versitygw is not built (scripts/build-versitygw.sh; CI builds it).
 */
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { CreateBucketCommand, GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3'
import { CheckpointError, CheckpointTakenError, type CheckpointSchema } from '../../../agent/checkpoint/index.js'
import { S3CheckpointStore, type S3StoreOptions, type TransferReport } from '../../../agent/checkpoint/s3-store.js'
import type { StorageDtype } from '../../../agent/workloads/sidecar/dtypes.js'
import { roundTensors, storedValues } from './tensors.js'
import { startVersitygw, versitygwBinary, versitygwBuilt, type Versitygw } from './versitygw.js'

const SIZES: Array<[string, StorageDtype, number[]]> = [
  ['w', 'float32', [300, 7]], ['h', 'float16', [1 << 20 | 3]], ['b', 'bfloat16', [1100, 1000]], ['s', 'float32', []], ['e', 'float16', [0]]
]
const SCHEMA: CheckpointSchema = SIZES.map(([name, dtype, shape]) => ({ name, dtype, shape }))
const BUCKET = 'checkpoints'
const quiet = { log: () => {} }

const skip = versitygwBuilt() ? false : `versitygw is not built (${versitygwBinary()}): run scripts/build-versitygw.sh`

describe('S3 checkpoint store on a real S3-compatible server (versitygw)', { skip, timeout: 180_000 }, () => {
  let gw: Versitygw
  let raw: S3Client
  const stores: S3CheckpointStore[] = []
  const options = (extra: Partial<S3StoreOptions> = {}): S3StoreOptions => ({
    endpoint: gw.endpoint,
    region: 'us-east-1',
    bucket: BUCKET,
    prefix: 'team-a/checkpoints',
    forcePathStyle: true,
    credentials: { accessKeyId: gw.accessKeyId, secretAccessKey: gw.secretAccessKey },
    ...extra
  })
  const store = (extra: Partial<S3StoreOptions> = {}, report?: TransferReport): S3CheckpointStore => {
    const s = new S3CheckpointStore(options(extra), report)
    stores.push(s)
    return s
  }
  /** The swarm folder's object names, writer tags replaced by `*`. */
  const listing = async (swarm: string): Promise<string[]> => {
    const prefix = `team-a/checkpoints/${swarm}/`
    const page = await raw.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: prefix }))
    return (page.Contents ?? []).map(o => o.Key!.slice(prefix.length).replace(/-[0-9a-f]{12}\.safetensors$/, '-*.safetensors')).sort()
  }
  const getText = async (key: string): Promise<string> => await (await raw.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }))).Body!.transformToString()
  const getBytes = async (key: string): Promise<Uint8Array> => await (await raw.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }))).Body!.transformToByteArray()

  before(async () => {
    gw = await startVersitygw()
    raw = new S3Client({
      endpoint: gw.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: gw.accessKeyId, secretAccessKey: gw.secretAccessKey }
    })
    await raw.send(new CreateBucketCommand({ Bucket: BUCKET }))
  })
  after(async () => {
    for (const s of stores) s.destroy()
    raw?.destroy()
    await gw?.stop()
  })

  test('every dtype round-trips bit for bit through the bucket, with manifest and latest under the prefix', async () => {
    const s = store()
    const { manifest, key } = await s.write({ swarm: 'rt', round: 4, samples: 400, tensors: roundTensors(4, SIZES), trainerState: { outerMomentum: ['w.m'] } })
    assert.match(key, /^team-a\/checkpoints\/rt\/round-4-[0-9a-f]{12}\.safetensors$/)
    assert.deepEqual(await listing('rt'), ['latest', 'round-4-*.safetensors', 'round-4.json'])
    assert.deepEqual(JSON.parse(await getText('team-a/checkpoints/rt/latest')), { round: 4, manifest: 'round-4.json', data: manifest.file.name })
    assert.deepEqual(JSON.parse(await getText('team-a/checkpoints/rt/round-4.json')), manifest)
    const { checkpoint, skipped } = await s.loadNewest('rt', SCHEMA, quiet)
    assert.deepEqual(skipped, [])
    assert.ok(checkpoint !== null)
    assert.equal(checkpoint.path, `s3://${BUCKET}/${key}`)
    assert.equal(checkpoint.manifest.round, 4)
    assert.equal(checkpoint.manifest.samples, 400)
    assert.deepEqual(checkpoint.manifest.trainerState, { outerMomentum: ['w.m'] })
    for (const src of roundTensors(4, SIZES)) {
      const got: Float32Array = checkpoint.tensors.get(src.name)!
      assert.deepEqual(new Uint32Array(got.buffer), new Uint32Array(storedValues(src.dtype, src.data as Float32Array).buffer), src.name)
    }
    // A round older than the newest, or the same round again, is refused before anything is uploaded.
    await assert.rejects(s.write({ swarm: 'rt', round: 4, samples: 0, tensors: roundTensors(4, SIZES) }), CheckpointTakenError)
    await assert.rejects(s.write({ swarm: 'rt', round: 3, samples: 0, tensors: roundTensors(3, SIZES) }), CheckpointTakenError)
    assert.deepEqual(await listing('rt'), ['latest', 'round-4-*.safetensors', 'round-4.json'])
  })

  test('a data object larger than partBytes goes up as a multipart upload and restores bit for bit, both showing progress', async () => {
    const sizes: Array<[string, StorageDtype, number[]]> = [['big', 'float32', [1600, 1000]], ['half', 'bfloat16', [700, 1000]]]
    // A progress line whenever there is news (every 5 s by default), so the test sees them.
    const lines: string[] = []
    const s = store({ partBytes: 5 << 20 }, { line: (l) => { lines.push(l) }, intervalMs: 0 })
    const { manifest } = await s.write({ swarm: 'mp', round: 1, samples: 1, tensors: roundTensors(1, sizes) })
    assert.ok(manifest.file.bytes > 5 << 20)
    assert.match(lines.join('\n'), new RegExp(`^uploading s3://${BUCKET}/team-a/checkpoints/mp/round-1-[0-9a-f]{12}\\.safetensors: 5\\.00 MiB of 7\\.[0-9]+ MiB \\(6[0-9] %\\), [0-9.]+ MB/s, about [0-9]+ s left$`))
    lines.length = 0
    const { checkpoint } = await s.loadNewest('mp', undefined, quiet)
    assert.ok(checkpoint !== null)
    assert.ok(lines.length > 0 && lines.every(l => l.startsWith(`downloading s3://${BUCKET}/team-a/checkpoints/mp/round-1-`)), lines.join('\n'))
    for (const src of roundTensors(1, sizes)) {
      assert.deepEqual(new Uint32Array(checkpoint.tensors.get(src.name)!.buffer), new Uint32Array(storedValues(src.dtype, src.data as Float32Array).buffer))
    }
  })

  test('the server refuses a second If-None-Match: * put of one key (412), the primitive the manifest relies on', async () => {
    const put = async (): Promise<unknown> => await raw.send(new PutObjectCommand({ Bucket: BUCKET, Key: 'cond/x', Body: 'a', IfNoneMatch: '*' }))
    await put()
    await assert.rejects(put(), (err: any) => err.$metadata?.httpStatusCode === 412)
  })

  test('of four concurrent writers of one round exactly one wins; the others get CheckpointTakenError and leave no data object', async () => {
    const writers = [0, 1, 2, 3].map(() => store())
    const results = await Promise.allSettled(writers.map(async (w, i) =>
      await w.write({ swarm: 'race', round: 7, samples: 700 + i, tensors: roundTensors(7, SIZES) })))
    const won = results.filter(r => r.status === 'fulfilled')
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
    assert.equal(won.length, 1, JSON.stringify(lost.map(r => String(r.reason))))
    for (const r of lost) assert.ok(r.reason instanceof CheckpointTakenError, String(r.reason))
    // At least one loser got there by the conditional write (all four listed the bucket before any manifest existed).
    assert.ok(lost.some(r => /written by another agent first/.test(r.reason.message)), lost.map(r => r.reason.message).join(' | '))
    assert.deepEqual(await listing('race'), ['latest', 'round-7-*.safetensors', 'round-7.json'])
    const winner = (won[0] as PromiseFulfilledResult<Awaited<ReturnType<S3CheckpointStore['write']>>>).value
    const { checkpoint, skipped } = await writers[0].loadNewest('race', SCHEMA, quiet)
    assert.deepEqual(skipped, [])
    assert.equal(checkpoint?.manifest.file.name, winner.manifest.file.name)
    assert.equal(checkpoint?.manifest.samples, winner.manifest.samples)
  })

  test('a corrupted, a truncated or an unreadable newest checkpoint is skipped with its reason and the previous round restored', async () => {
    const s = store()
    const folder = 'team-a/checkpoints/bad/'
    for (const round of [1, 2, 3, 4]) await s.write({ swarm: 'bad', round, samples: round, tensors: roundTensors(round, SIZES), keep: 4 })
    const manifestOf = async (round: number): Promise<any> => JSON.parse(await getText(`${folder}round-${round}.json`))
    // Round 4: bytes flipped inside tensor "w" (same size), written over the data object through the SDK.
    const m4 = await manifestOf(4)
    const flipped = await getBytes(folder + m4.file.name)
    for (let i = 0; i < 16; i++) flipped[m4.file.headerBytes + 100 + i] ^= 0xff
    await raw.send(new PutObjectCommand({ Bucket: BUCKET, Key: folder + m4.file.name, Body: flipped }))
    // Round 3: the data object truncated by 1000 bytes.
    const m3 = await manifestOf(3)
    const data3 = await getBytes(folder + m3.file.name)
    await raw.send(new PutObjectCommand({ Bucket: BUCKET, Key: folder + m3.file.name, Body: data3.subarray(0, data3.length - 1000) }))
    // Round 5: a manifest that is not JSON.
    await raw.send(new PutObjectCommand({ Bucket: BUCKET, Key: `${folder}round-5.json`, Body: '{"format": "averag' }))
    const lines: string[] = []
    const { checkpoint, skipped } = await s.loadNewest('bad', SCHEMA, { log: line => lines.push(line) })
    assert.equal(checkpoint?.manifest.round, 2)
    assert.deepEqual(skipped.map(x => x.file), ['round-5.json', m4.file.name, m3.file.name])
    assert.equal(skipped[0].reason, 'The manifest is not valid JSON.')
    assert.match(skipped[1].reason, /^tensor "w" has sha256 [0-9a-f]{12}… where the manifest has [0-9a-f]{12}…$/)
    assert.equal(skipped[2].reason, `the data object is ${m3.file.bytes - 1000} bytes where the manifest says ${m3.file.bytes}`)
    assert.equal(lines.length, 3)
    assert.ok(lines[1].startsWith(`checkpoint: skipping s3://${BUCKET}/${folder}${m4.file.name}: tensor "w"`), lines[1])
    for (const src of roundTensors(2, SIZES)) {
      assert.deepEqual(new Uint32Array(checkpoint!.tensors.get(src.name)!.buffer), new Uint32Array(storedValues(src.dtype, src.data as Float32Array).buffer))
    }
  })

  test('pruning keeps the newest `keep` rounds (manifests and data objects), orphans of older rounds included', async () => {
    const s = store()
    await raw.send(new PutObjectCommand({ Bucket: BUCKET, Key: 'team-a/checkpoints/prune/round-0-0123456789ab.safetensors', Body: 'orphan' }))
    let removed: string[] = []
    for (const round of [1, 2, 3, 4, 5]) ({ removed } = await s.write({ swarm: 'prune', round, samples: round, tensors: roundTensors(round, SIZES), keep: 2 }))
    assert.deepEqual(removed.map(n => n.replace(/-[0-9a-f]{12}\./, '-*.')), ['round-3.json', 'round-3-*.safetensors'])
    assert.deepEqual(await listing('prune'), ['latest', 'round-4-*.safetensors', 'round-4.json', 'round-5-*.safetensors', 'round-5.json'])
    assert.deepEqual((await s.list('prune')).map(c => c.round), [5, 4])
    assert.equal(JSON.parse(await getText('team-a/checkpoints/prune/latest')).round, 5)
  })

  test('a missing bucket is one sentence naming the bucket, for writes and restores', async () => {
    const s = store({ bucket: 'no-such-bucket' })
    const sentence = (err: unknown): boolean => {
      assert.ok(err instanceof CheckpointError, String(err))
      assert.equal(err.message, `The bucket "no-such-bucket" does not exist at ${gw.endpoint}.`)
      return true
    }
    await assert.rejects(s.write({ swarm: 'sw', round: 1, samples: 1, tensors: roundTensors(1, SIZES) }), sentence)
    await assert.rejects(s.loadNewest('sw', SCHEMA, quiet), sentence)
    await assert.rejects(s.verify('sw', 1), sentence)
  })
})
