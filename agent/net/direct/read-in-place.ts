import type { Socket } from 'node:net'

/** Where a socket's bytes go when read in place: the memory for the next bytes, and how many landed there. */
export interface InPlaceSink {
  /** Never empty; node copies at most its length per call. */
  target: () => Uint8Array
  filled: (bytes: number) => void
}

/** What net.Socket's documented `onread` option sets on a socket, found on the socket by name. */
interface UserBufferKeys { readonly buffer: symbol, readonly callback: symbol, readonly generator: symbol }

function userBufferKeys (socket: Socket): UserBufferKeys | undefined {
  const own = Object.getOwnPropertySymbols(socket)
  const named = (name: string): symbol | undefined => own.find(s => s.description === name)
  const buffer = named('kBuffer'); const callback = named('kBufferCb'); const generator = named('kBufferGen')
  if (buffer === undefined || callback === undefined || generator === undefined) return undefined
  return { buffer, callback, generator }
}

/**
 * Makes a connected socket read into memory the sink names instead of handing every read to
 * JavaScript in a Buffer of its own. Returns false, changing nothing, where this node does not
 * offer it; the caller then listens for 'data' as before.
 *
 * Why: a TLS socket hands over each 16 KiB record's plaintext in a fresh ArrayBuffer. At 4 peers ×
 * 25M floats that is ~140 MB of them a round per peer, external memory that sets off V8's full
 * collections (35 mark-compacts in 9 rounds in one peer, `--trace-gc`: "external memory pressure")
 * and their concurrent marking on the helper threads. Read in place, the bytes land in the frame's
 * own memory (a pool its readers give back to), and nothing is allocated per read.
 *
 * How: net.Socket's `onread` option ({ buffer, callback }, a function as buffer: the memory for the
 * next read) does this, and tls.connect passes it on, but a TLS server's sockets are made by node
 * from the raw connection with `onread` left out. So this sets on the socket the three fields that
 * option sets (node's own symbols, found by name) and asks the handle to read into the user buffer
 * (StreamBase.useUserBuffer), what node does for a socket made with the option. Bytes node already
 * read wait in the stream's buffer: they go to the sink first. test/agent/net/read-in-place.test.ts
 * checks on the node we pin that both ends of a TLS connection take this path.
 */
export function readInPlace (socket: Socket, sink: InPlaceSink): boolean {
  const keys = userBufferKeys(socket)
  const handle = (socket as unknown as { _handle?: { useUserBuffer?: (buffer: Uint8Array) => void } })._handle
  if (keys === undefined || handle === undefined || typeof handle.useUserBuffer !== 'function') return false
  for (let chunk: Buffer | null = socket.read() as Buffer | null; chunk !== null; chunk = socket.read() as Buffer | null) {
    for (let at = 0; at < chunk.byteLength;) {
      const to = sink.target()
      const n = Math.min(to.byteLength, chunk.byteLength - at)
      to.set(chunk.subarray(at, at + n))
      at += n
      sink.filled(n)
    }
  }
  const fields = socket as unknown as Record<symbol, unknown>
  fields[keys.callback] = (bytes: number): void => { sink.filled(bytes) }
  fields[keys.generator] = () => sink.target()
  const first = sink.target()
  fields[keys.buffer] = first
  handle.useUserBuffer(first)
  return true
}
