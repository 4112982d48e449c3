/**
 * A minimal TCP sender and receiver for bench/tbf-goodput.ts, run inside a network namespace with
 * `ip netns exec <ns> node dist/bench/lib/tcp-blast.js ...`:
 *
 *   sink <port> <connections>     listens on 0.0.0.0:<port>, prints {"listening":<port>} once it does,
 *                                 then, when <connections> connections have ended, prints
 *                                 {"bytes","firstChunkBytes","seconds","connections"}: payload bytes
 *                                 received over all of them, the bytes of the very first chunk, and
 *                                 the time from the first byte to the last (any connection's).
 *   source <host> <port> <bytes>  connects, writes <bytes> bytes (1 MiB writes, honouring
 *                                 back-pressure), ends, and prints {"bytes","seconds"} when closed.
 *
 * Nothing is framed or checked: TCP's payload goodput is what is measured.
 */
import { createServer, connect } from 'node:net'
import { performance } from 'node:perf_hooks'

function print (o: object): void { process.stdout.write(JSON.stringify(o) + '\n') }

async function sink (port: number, expected: number): Promise<void> {
  let bytes = 0
  let firstChunkBytes = 0
  let first = NaN
  let last = NaN
  let ended = 0
  const server = createServer((socket) => {
    socket.on('data', (chunk: Buffer) => {
      const now = performance.now()
      if (Number.isNaN(first)) { first = now; firstChunkBytes = chunk.length }
      last = now
      bytes += chunk.length
    })
    socket.on('error', (err) => { process.stderr.write(`tcp-blast sink: ${err.message}\n`) })
    socket.on('close', () => {
      if (++ended < expected) return
      print({ bytes, firstChunkBytes, seconds: (last - first) / 1000, connections: ended })
      server.close()
      process.exit(0)
    })
  })
  server.listen(port, '0.0.0.0', () => { print({ listening: port }) })
}

async function source (host: string, port: number, total: number): Promise<void> {
  const chunk = Buffer.alloc(1 << 20, 0x5a)
  const socket = connect({ host, port, noDelay: false })
  await new Promise<void>((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject) })
  const started = performance.now()
  let left = total
  while (left > 0) {
    const n = Math.min(left, chunk.length)
    left -= n
    if (!socket.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
      await new Promise<void>((resolve, reject) => {
        const onError = (err: Error): void => { socket.off('drain', onDrain); reject(err) }
        const onDrain = (): void => { socket.off('error', onError); resolve() }
        socket.once('drain', onDrain)
        socket.once('error', onError)
      })
    }
  }
  socket.end()
  await new Promise<void>((resolve, reject) => { socket.once('close', () => resolve()); socket.once('error', reject) })
  print({ bytes: total, seconds: (performance.now() - started) / 1000 })
}

const [mode, a, b, c] = process.argv.slice(2)
try {
  if (mode === 'sink' && a !== undefined) await sink(Number(a), Number(b ?? 1))
  else if (mode === 'source' && a !== undefined && b !== undefined && c !== undefined) await source(a, Number(b), Number(c))
  else {
    process.stderr.write('usage: tcp-blast.js sink <port> [connections] | source <host> <port> <bytes>\n')
    process.exit(2)
  }
} catch (err) {
  process.stderr.write(`tcp-blast ${mode}: ${(err as Error).message}\n`)
  process.exit(1)
}
