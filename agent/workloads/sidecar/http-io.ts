import type { IncomingMessage, ServerResponse } from 'node:http'
import { RequestError } from './request-parsing.js'

/**
 * Reads a JSON body of at most `limit` bytes. Beyond the limit it stops keeping bytes and lets the
 * rest drain, so the trainer still reads the 413 instead of a reset connection.
 */
export async function readJsonBody (req: IncomingMessage, limit: number): Promise<unknown> {
  const declared = Number(req.headers['content-length'])
  if (Number.isFinite(declared) && declared > limit) {
    req.resume()
    throw new RequestError(413, `the request body has ${declared} bytes, above this endpoint's limit of ${limit}`)
  }
  // Events rather than for-await: leaving an async iterator early destroys the socket.
  const { chunks, size } = await new Promise<{ chunks: Buffer[], size: number }>((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const onData = (chunk: Buffer): void => {
      size += chunk.byteLength
      if (size <= limit) { chunks.push(chunk); return }
      req.off('data', onData)
      req.resume()
      reject(new RequestError(413, `the request body exceeds this endpoint's limit of ${limit} bytes`))
    }
    req.on('data', onData)
    req.once('end', () => { resolve({ chunks, size }) })
    req.once('error', reject)
    req.once('close', () => { reject(new RequestError(400, 'the client closed the connection before sending the whole body')) })
  })
  const text = Buffer.concat(chunks, size).toString('utf8')
  if (text.length === 0) throw new RequestError(400, 'the request body is empty; send a JSON object')
  try {
    return JSON.parse(text)
  } catch {
    throw new RequestError(400, 'the request body is not valid JSON')
  }
}

export function sendJson (res: ServerResponse, status: number, body: unknown, close = false): void {
  const payload = Buffer.from(JSON.stringify(body))
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': payload.byteLength,
    ...(close ? { connection: 'close' } : {})
  })
  res.end(payload)
}

/** Sends string chunks (see jsonWithTensors) without joining them into one more large string. */
export function sendJsonChunks (res: ServerResponse, status: number, chunks: readonly string[]): void {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': chunks.reduce((n, c) => n + Buffer.byteLength(c), 0)
  })
  for (const c of chunks) res.write(c)
  res.end()
}
