/**
 * The bucket store's names and option checks, apart from the S3 SDK: an agent loads the SDK (~30
 * modules, ~0.1 s of CPU at every start, a restarted agent's way back into rounds) only once it
 * talks to a bucket, and not at all when its checkpoints go to a folder.
 */
import { CheckpointError, checkSwarmName } from './manifest.js'

export const MIN_PART_BYTES = 5 << 20
export const DEFAULT_PART_BYTES = 64 << 20

/** The key prefix without leading or trailing `/`. */
export function bucketPrefix (prefix: string | undefined): string {
  return (prefix ?? '').replace(/^\/+|\/+$/g, '')
}

/** `<prefix>/<swarm>/` */
export function folderKey (prefix: string, swarm: string): string {
  checkSwarmName(swarm)
  return `${prefix === '' ? '' : prefix + '/'}${swarm}/`
}

export function s3Url (bucket: string, key: string): string { return `s3://${bucket}/${key}` }

/** The bucket's name and the part size, checked before any request (a bad one is one sentence). */
export function checkBucketOptions (options: { readonly bucket: string, readonly partBytes?: number }): number {
  if (options.bucket === '') throw new CheckpointError('The S3 bucket name is empty.')
  const partBytes = options.partBytes ?? DEFAULT_PART_BYTES
  if (!Number.isSafeInteger(partBytes) || partBytes < MIN_PART_BYTES) {
    throw new CheckpointError(`partBytes must be an integer of at least ${MIN_PART_BYTES}, not ${partBytes}.`)
  }
  return partBytes
}
