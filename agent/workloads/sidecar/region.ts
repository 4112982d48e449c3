import { closeSync, constants, fstatSync, lstatSync, openSync, readSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { RequestError } from './request-parsing.js'
import { firstNonFinite16, halfToFloat } from './dtypes.js'
import { GENERATION_OFFSET, HEADER_BYTES, REGION_MAGIC, SEQ_OFFSET, type RegionLayout, type TensorPlacement } from './region-layout.js'
import { firstNonFinite } from './tensor-codec.js'
import type { DistanceSum } from './distance.js'
import { createRegionKernels, type HalfDtype, type KernelBackend, type RegionKernels } from '../../kernels/reduce-kernels.js'

/** The bounded buffers an agent converts 16-bit tensors through and checks region values in. */
/** Node's readSync/writeSync coerce the length to an int32: a tensor of 2 GiB or more moves in calls of at most this. */
const MAX_IO_BYTES = 1 << 30

export const SCRATCH_BYTES = 4 * 1024 * 1024

/**
 * Two chunks of SCRATCH_BYTES in the region kernels' memory (allocated once per agent): `f32` (seen
 * as `bytes` and `u16` too) takes what the region holds, `now` the same chunk of the agent's values,
 * so the finiteness check and the divergence sums run in WebAssembly SIMD where the values lie.
 */
export class Scratch {
  readonly kernels: RegionKernels
  readonly f32: Float32Array
  readonly bytes: Uint8Array
  readonly u16: Uint16Array
  readonly now: Float32Array
  readonly nowBytes: Uint8Array

  constructor (backend?: KernelBackend) {
    this.kernels = createRegionKernels(SCRATCH_BYTES / 4, backend)
    this.f32 = this.kernels.sent
    this.bytes = new Uint8Array(this.f32.buffer, this.f32.byteOffset, SCRATCH_BYTES)
    this.u16 = new Uint16Array(this.f32.buffer, this.f32.byteOffset, SCRATCH_BYTES / 2)
    this.now = this.kernels.now
    this.nowBytes = new Uint8Array(this.now.buffer, this.now.byteOffset, SCRATCH_BYTES)
  }
}

/**
 * `src`'s 16-bit values widened into `dst` through the scratch, whose SIMD kernels work in their own
 * memory (binary bodies). `src` may lie in the upper half of `dst`'s bytes: each chunk is read before
 * any byte of it is overwritten.
 */
export function widenThrough (scratch: Scratch, dtype: HalfDtype, src: Uint16Array, dst: Float32Array): void {
  const per = SCRATCH_BYTES / 4
  for (let at = 0; at < src.length; at += per) {
    const n = Math.min(per, src.length - at)
    scratch.u16.set(src.subarray(at, at + n), SCRATCH_BYTES / 4)
    scratch.kernels.widenUpper(dtype, n)
    dst.set(scratch.f32.subarray(0, n), at)
  }
}

/** `src` narrowed into `dst` (16-bit items) through the scratch; `dst` may start at or before `src`'s bytes. */
export function narrowThrough (scratch: Scratch, dtype: HalfDtype, src: Float32Array, dst: Uint16Array): void {
  const per = SCRATCH_BYTES / 4
  for (let at = 0; at < src.length; at += per) {
    const n = Math.min(per, src.length - at)
    scratch.now.set(src.subarray(at, at + n))
    scratch.kernels.narrowNow(dtype, n)
    dst.set(scratch.u16.subarray(0, n), at)
  }
}

/** Bytes of a Float32Array, for reading and writing files straight into it (no copy). */
export const bytesOf = (a: Float32Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength)

/** How many times a step reads the region again when the trainer wrote during the read. */
const READ_ATTEMPTS = 3

/**
 * A float32 tensor is copied in pieces of this size, and every piece (and every chunk the check
 * reads) ends with a turn of the event loop: the step's matchmaking runs beside the copy-in
 * (sidecar-api.ts regionStep), so its messages are answered within a piece's time (~4 ms here).
 */
const COPY_PIECE_BYTES = 16 * 1024 * 1024

/**
 * A trainer's shared-memory region (docs/trainer-api.md), read and written with pread/pwrite
 * because Node cannot map memory. The fd stays open, so a file the trainer unlinks and recreates
 * under the same name is only seen after the trainer registers again.
 *
 * A trainer that writes while a step copies the region in (breaking the contract) makes the agent
 * read again; when that fails three times the step answers 409 and the agent's tensors may hold
 * part of the trainer's newer values. Refused input found before the copy (odd seq, NaN, a short
 * file) never touches them.
 */
export class Region {
  /** The seqlock and generation words go through this one buffer. */
  private readonly word = Buffer.alloc(8)

  private constructor (readonly name: string, private readonly fd: number, readonly layout: RegionLayout) {}

  /** Opens `name` inside `dir` after checking it is a plain file there, with the magic and at least the layout's size. */
  static open (dir: string | undefined, name: string, layout: RegionLayout): Region {
    if (dir === undefined) throw new RequestError(400, 'this agent has no shared-memory folder (AVS_SHM_DIR is unset); use the binary or JSON path')
    if (name.length === 0 || name.length > 255 || name.includes('/') || name.includes('\\') || name.includes('\0') || name === '.' || name === '..') {
      throw new RequestError(400, `region must be a plain file name inside AVS_SHM_DIR, got ${JSON.stringify(name)}`)
    }
    const path = join(dir, name)
    let fd: number
    try {
      if (!lstatSync(path).isFile()) throw new RequestError(400, `region "${name}" is not a regular file (symlinks are refused)`)
      // O_NOFOLLOW: a symlink swapped in after the lstat still fails here.
      fd = openSync(path, constants.O_RDWR | constants.O_NOFOLLOW)
    } catch (err) {
      if (err instanceof RequestError) throw err
      const code = (err as NodeJS.ErrnoException).code
      throw new RequestError(400, code === 'ENOENT' ? `region "${name}" does not exist in ${dir}; create it before register` : `region "${name}" cannot be opened (${code ?? String(err)})`)
    }
    const region = new Region(name, fd, layout)
    try {
      region.checkSize()
      const header = Buffer.alloc(HEADER_BYTES)
      region.readFully(header, 0)
      if (header.toString('latin1', 0, 8) !== REGION_MAGIC) throw new RequestError(400, `region "${name}" does not start with the magic ${REGION_MAGIC}`)
    } catch (err) {
      region.close()
      throw err
    }
    return region
  }

  close (): void {
    try { closeSync(this.fd) } catch {}
  }

  get seq (): number {
    return this.readU64(SEQ_OFFSET)
  }

  /**
   * Reads every tensor into `tensors` (float32) under the seqlock. A first pass only checks
   * finiteness through `scratch`, so a region holding NaN leaves `tensors` untouched; `apply`
   * runs the second pass (the copy) under the caller's tensor lock. Both passes yield to the event
   * loop between chunks (COPY_PIECE_BYTES). An unchanged even seq
   * across both passes proves they read the same bytes. Returns the bytes copied. `only`: the
   * indices of the tensors to check and copy (a step over a subset); the others are not read.
   */
  async readInto (scratch: Scratch, apply: (copy: (tensors: readonly Float32Array[]) => Promise<boolean>) => Promise<boolean>, only?: readonly number[]): Promise<number> {
    const placed = this.placed(only)
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      if (attempt > 0) await sleep(5 * attempt)
      const seq = this.seq
      if (seq % 2 !== 0) continue
      this.checkSize()
      let bad: string | undefined
      for (const [t] of placed) {
        bad = await this.findNonFinite(t, scratch)
        if (bad !== undefined) break
      }
      if (this.seq !== seq) continue
      if (bad !== undefined) throw new RequestError(400, bad)
      const copied = await apply(async tensors => {
        for (const [t, i] of placed) await this.copyIn(t, tensors[i], scratch)
        return this.seq === seq
      })
      // A changed seq here means the trainer wrote during the copy: read again (see the class comment on what the tensors hold then).
      if (copied) return placed.reduce((n, [t]) => n + t.bytes, 0)
    }
    throw new RequestError(409, 'the region changed while the agent read it (seq odd or moving); write only between steps')
  }

  /**
   * Writes the tensors back (narrowed to each dtype) under the seqlock and records `generation`.
   * Returns the bytes copied. `only`: the indices of the tensors to write (the others are left as they are).
   */
  writeFrom (tensors: readonly Float32Array[], generation: number, scratch: Scratch, only?: readonly number[]): number {
    const placed = this.placed(only)
    this.checkSize()
    const seq = this.seq
    const odd = seq % 2 === 0 ? seq + 1 : seq + 2
    this.writeU64(SEQ_OFFSET, odd)
    for (const [t, i] of placed) this.copyOut(tensors[i], t, scratch)
    this.writeU64(GENERATION_OFFSET, generation)
    this.writeU64(SEQ_OFFSET, odd + 1)
    return placed.reduce((n, [t]) => n + t.bytes, 0)
  }

  /**
   * A step's write-back when the round's landing did not sum the divergence whole (sidecar-api.ts
   * regionStep): like writeFrom, and in the same pass ‖region − now‖² and ‖region‖² are added
   * to `sum` (the step's divergence). Chunk by chunk, the trainer's values are read from the region,
   * the agent's values copied next to them, both scanned by the region kernels, and the agent's chunk
   * (narrowed to the dtype) written over the region's. Returns the bytes written. `only`: the indices
   * of the tensors to write (a step over a subset); the region's other tensors are left as they are.
   */
  writeBack (now: readonly Float32Array[], generation: number, scratch: Scratch, sum: DistanceSum, only?: readonly number[]): number {
    const placed = this.placed(only)
    this.checkSize()
    const seq = this.seq
    const odd = seq % 2 === 0 ? seq + 1 : seq + 2
    this.writeU64(SEQ_OFFSET, odd)
    const { kernels } = scratch
    kernels.lanes.set(sum.lanes)
    const perChunk = SCRATCH_BYTES / 4
    for (const [t, i] of placed) {
      const src = now[i]
      for (let start = 0; start < src.length; start += perChunk) {
        const n = Math.min(perChunk, src.length - start)
        this.readWidened(t, start, n, scratch)
        scratch.now.set(src.subarray(start, start + n))
        kernels.addDistance(n)
        if (t.dtype === 'float32') {
          this.writeFully(scratch.nowBytes.subarray(0, n * 4), t.offset + start * 4)
        } else {
          kernels.narrowNow(t.dtype, n)
          this.writeFully(scratch.bytes.subarray(0, n * 2), t.offset + start * 2)
        }
      }
    }
    sum.lanes.set(kernels.lanes)
    this.writeU64(GENERATION_OFFSET, generation)
    this.writeU64(SEQ_OFFSET, odd + 1)
    return placed.reduce((n, [t]) => n + t.bytes, 0)
  }

  /** The placements of the tensors `only` names (all by default), each with its index. */
  private placed (only?: readonly number[]): Array<[TensorPlacement, number]> {
    return only === undefined ? this.layout.offsets.map((t, i) => [t, i]) : only.map(i => [this.layout.offsets[i], i])
  }

  /** n values from element `start` of tensor t as float32 in scratch; 16-bit ones land in its upper half and widen in place. */
  private readWidened (t: TensorPlacement, start: number, n: number, scratch: Scratch): Float32Array {
    if (t.dtype === 'float32') {
      this.readFully(scratch.bytes.subarray(0, n * 4), t.offset + start * 4)
    } else {
      this.readFully(scratch.bytes.subarray(SCRATCH_BYTES / 2, SCRATCH_BYTES / 2 + n * 2), t.offset + start * 2)
      scratch.kernels.widenUpper(t.dtype, n)
    }
    return scratch.f32.subarray(0, n)
  }

  private async findNonFinite (t: TensorPlacement, scratch: Scratch): Promise<string | undefined> {
    const size = t.dtype === 'float32' ? 4 : 2
    const perChunk = SCRATCH_BYTES / size
    for (let start = 0; start * size < t.bytes; start += perChunk) {
      if (start > 0) await nextTurn()
      const n = Math.min(perChunk, t.bytes / size - start)
      this.readFully(scratch.bytes.subarray(0, n * size), t.offset + start * size)
      // The SIMD kernels scan the chunk; only a chunk they refuse is searched for the index.
      const at = t.dtype === 'float32'
        ? (scratch.kernels.allFinite(n) ? -1 : firstNonFinite(scratch.f32.subarray(0, n)))
        : (scratch.kernels.allFinite16(t.dtype, n) ? -1 : firstNonFinite16(t.dtype, scratch.u16.subarray(0, n)))
      if (at >= 0) {
        const value = t.dtype === 'float32' ? scratch.f32[at] : halfToFloat(scratch.u16[at])
        return `tensor "${t.name}" in the region holds a non-finite value (${value}) at index ${start + at}`
      }
    }
    return undefined
  }

  private async copyIn (t: TensorPlacement, dst: Float32Array, scratch: Scratch): Promise<void> {
    if (t.dtype === 'float32') {
      const bytes = bytesOf(dst)
      for (let at = 0; at < bytes.byteLength; at += COPY_PIECE_BYTES) {
        if (at > 0) await nextTurn()
        this.readFully(bytes.subarray(at, Math.min(bytes.byteLength, at + COPY_PIECE_BYTES)), t.offset + at)
      }
      return
    }
    // 16-bit values widen in the scratch (the kernels' memory), then one copy into the tensor.
    const perChunk = SCRATCH_BYTES / 4
    for (let start = 0; start < dst.length; start += perChunk) {
      if (start > 0) await nextTurn()
      const n = Math.min(perChunk, dst.length - start)
      dst.set(this.readWidened(t, start, n, scratch), start)
    }
  }

  private copyOut (src: Float32Array, t: TensorPlacement, scratch: Scratch): void {
    if (t.dtype === 'float32') { this.writeFully(bytesOf(src), t.offset); return }
    const perChunk = SCRATCH_BYTES / 4
    for (let start = 0; start < src.length; start += perChunk) {
      const n = Math.min(perChunk, src.length - start)
      scratch.now.set(src.subarray(start, start + n))
      scratch.kernels.narrowNow(t.dtype, n)
      this.writeFully(scratch.bytes.subarray(0, n * 2), t.offset + start * 2)
    }
  }

  private checkSize (): void {
    const size = fstatSync(this.fd).size
    if (size < this.layout.bytes) throw new RequestError(400, `region "${this.name}" has ${size} bytes but the registered tensors need ${this.layout.bytes}`)
  }

  private readFully (into: Uint8Array, position: number): void {
    let done = 0
    while (done < into.byteLength) {
      const n = readSync(this.fd, into, done, Math.min(into.byteLength - done, MAX_IO_BYTES), position + done)
      if (n === 0) throw new RequestError(400, `region "${this.name}" ended at byte ${position + done}; it shrank after register`)
      done += n
    }
  }

  private writeFully (from: Uint8Array, position: number): void {
    let done = 0
    while (done < from.byteLength) done += writeSync(this.fd, from, done, Math.min(from.byteLength - done, MAX_IO_BYTES), position + done)
  }

  private readU64 (offset: number): number {
    this.readFully(this.word, offset)
    return Number(this.word.readBigUInt64LE(0))
  }

  private writeU64 (offset: number, value: number): void {
    this.word.writeBigUInt64LE(BigInt(value))
    this.writeFully(this.word, offset)
  }
}

async function sleep (ms: number): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, ms))
}
