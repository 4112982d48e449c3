import type { Connection, Stream } from '@libp2p/interface'
import type { SwarmNode } from '../net/node.js'
import type { NamedTensor } from '../averager.js'
import { FramedStream } from '../net/framed-stream.js'
import type { FrameChannel } from '../net/frame-channel.js'
import type { DirectEndpoint } from '../net/direct/direct-transport.js'
import { StateHeader, StateRequest } from '../proto/averaging.js'
import { elementCount } from '../schema.js'
import { AveragingError, ProtocolError, TimeoutError, describeError } from '../errors.js'
import { CHUNK_BYTES, chunkHead, MAX_REQUEST_FRAME_BYTES, MAX_STATE_STREAMS_PER_CONNECTION, MAX_STATE_STREAMS_PER_PEER } from './state-protocol.js'
import { PerPeerStreamLimit, refuseStream } from '../net/rpc.js'
import type { Log } from '../log.js'

/**
 * What a StateSource returns: tensors the upload may read for as long as it runs, so a copy taken
 * under the averager's lock (the sidecar's source copies; the builtin model's weights() are fresh
 * arrays). The handler does not copy them again: a 4 GB state copied twice was 8 GB more on a donor.
 */
export interface StateSnapshot {
  readonly tensors: readonly NamedTensor[]
  readonly metadata: Record<string, unknown>
}

export type StateSource = () => Promise<StateSnapshot>

export type UploadOutcome = 'served' | 'busy' | 'failed'

export interface StateHandlerOptions {
  readonly requestTimeoutMs: number
  readonly maxConcurrentUploads: number
  readonly onUpload?: (outcome: UploadOutcome) => void
  readonly log?: Log
}

/** Streams buffered beyond this are slowing the uploader down: write() waits for them to drain. */
const WRITE_HIGH_WATER_MARK = 1024 * 1024
const CHUNK_ELEMENTS = CHUNK_BYTES / 4

/**
 * hivemind's rpc_download_state: one StateRequest in, then a StateHeader and the tensors as
 * StateChunks of at most 64 KiB, in order. A donor already serving its limit of uploads answers
 * a header marked busy at once, so the newcomer moves to the next donor instead of queueing here
 * (the choke point of hivemind issue #169). Over a libp2p stream, or over the direct data channel
 * (serveDirect), the same frames either way.
 */
export class StateHandler {
  private active = 0
  /** A newcomer downloads from one donor at a time: more streams from one peer are hostile. */
  private readonly perPeer = new PerPeerStreamLimit(MAX_STATE_STREAMS_PER_PEER)

  constructor (private readonly source: StateSource, private readonly options: StateHandlerOptions) {}

  get activeUploads (): number {
    return this.active
  }

  async register (node: SwarmNode, protocol: string): Promise<void> {
    await node.handle(protocol, (stream: Stream, connection: Connection) => {
      const peer = connection.remotePeer.toString()
      const release = this.perPeer.tryAcquire(peer)
      if (release == null) { refuseStream(stream, protocol); return }
      const framed = new FramedStream(stream, { maxFrameBytes: MAX_REQUEST_FRAME_BYTES, maxQueuedFrames: 1, writeHighWaterMark: WRITE_HIGH_WATER_MARK })
      void this.serve(framed, peer).finally(release)
    }, { maxInboundStreams: MAX_STATE_STREAMS_PER_CONNECTION, runOnLimitedConnection: false })
  }

  /** Serves the same exchange on the direct data channel's protocol; returns what stops it. */
  serveDirect (endpoint: DirectEndpoint, protocol: string): () => void {
    return endpoint.serve(protocol, (channel) => {
      const release = this.perPeer.tryAcquire(channel.remotePeer)
      if (release == null) { channel.abort(new ProtocolError(`peer ${channel.remotePeer} already has ${MAX_STATE_STREAMS_PER_PEER} state downloads open`)); return }
      void this.serve(channel, channel.remotePeer).finally(release)
    })
  }

  private async serve (framed: FrameChannel, peer: string): Promise<void> {
    let counted = false
    try {
      const request = await framed.read(this.options.requestTimeoutMs)
      if (request == null) throw new ProtocolError(`peer ${peer} closed the state stream without a request`)
      // The direct channel bounds frames by the all-reduce's part size: a request is far smaller.
      if (request.byteLength > MAX_REQUEST_FRAME_BYTES) throw new ProtocolError(`peer ${peer} sent a ${request.byteLength}-byte state request`)
      StateRequest.decode(request)
      if (this.active >= this.options.maxConcurrentUploads) {
        await this.write(framed, StateHeader.encode({ busy: true }))
        await framed.closeWrite()
        this.options.onUpload?.('busy')
        return
      }
      this.active++
      counted = true
      const snapshot = await this.snapshot()
      const started = Date.now()
      await this.write(framed, StateHeader.encode({
        metadata: new TextEncoder().encode(JSON.stringify(snapshot.metadata)),
        tensors: snapshot.tensors.map(t => ({ name: t.name, shape: [...t.shape] }))
      }))
      for (const [index, tensor] of snapshot.tensors.entries()) {
        const data = tensor.data
        for (let offset = 0; offset < data.length; offset += CHUNK_ELEMENTS) {
          const count = Math.min(CHUNK_ELEMENTS, data.length - offset)
          const bytes = new Uint8Array(data.buffer, data.byteOffset + offset * 4, count * 4)
          // The message's head and a view of the tensor's bytes, not one new message per 64 KiB.
          await this.write(framed, [chunkHead(index, offset, bytes.byteLength), bytes])
        }
      }
      await framed.closeWrite()
      this.options.onUpload?.('served')
      this.options.log?.info(`served state to ${peer} in ${Date.now() - started} ms`)
    } catch (err) {
      this.options.onUpload?.('failed')
      this.options.log?.warn(`state upload to ${peer} failed: ${describeError(err)}`)
      framed.abort(err instanceof Error ? err : new ProtocolError(describeError(err)))
    } finally {
      if (counted) this.active--
    }
  }

  private async snapshot (): Promise<StateSnapshot> {
    const { tensors, metadata } = await this.source()
    for (const t of tensors) {
      if (elementCount(t.shape) !== t.data.length) throw new AveragingError(`tensor ${t.name} has shape [${t.shape.join(', ')}] but ${t.data.length} values`)
    }
    return { tensors, metadata }
  }

  /** One frame, failing if the newcomer stops reading for longer than the request timeout. */
  private async write (framed: FrameChannel, frame: Uint8Array | readonly Uint8Array[]): Promise<void> {
    let timer: NodeJS.Timeout | undefined
    try {
      await Promise.race([
        framed.write(frame),
        new Promise<never>((_resolve, reject) => {
          timer = setTimeout(() => { reject(new TimeoutError(`the newcomer read nothing for ${this.options.requestTimeoutMs} ms`)) }, this.options.requestTimeoutMs)
        })
      ])
    } finally {
      clearTimeout(timer)
    }
  }
}

