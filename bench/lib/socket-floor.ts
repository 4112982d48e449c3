import type { Server, Socket } from 'node:net'
import { benchHost, type PeerEnv } from './protocol.js'
import type { BenchPeer } from './peer-client.js'
import { pairBytes, RoundReceiver } from './all-to-all.js'

const CHUNK = Number(process.env.BENCH_SOCKET_CHUNK ?? 1024 * 1024)

/**
 * Writes in 1 MiB pieces and waits for 'drain' when the socket's buffer is full, so that sending
 * interleaves with receiving on the one event loop (one 100 MB write makes TLS encrypt it all
 * before the loop reads anything).
 */
async function writeAll (socket: Socket, payload: Buffer): Promise<void> {
  for (let offset = 0; offset < payload.length; offset += CHUNK) {
    const piece = payload.subarray(offset, Math.min(offset + CHUNK, payload.length))
    const last = offset + CHUNK >= payload.length
    if (last) {
      await new Promise<void>((resolve, reject) => socket.write(piece, (err) => err == null ? resolve() : reject(err)))
    } else if (!socket.write(piece)) {
      await new Promise<void>((resolve, reject) => {
        const onDrain = (): void => { socket.off('close', onClose); resolve() }
        const onClose = (): void => { socket.off('drain', onDrain); reject(new Error('socket closed while sending')) }
        socket.once('drain', onDrain)
        socket.once('close', onClose)
      })
    }
  }
}

/** How a floor makes its sockets: raw TCP or TLS, same traffic. */
export interface SocketFactory {
  /** A listening server on benchHost() (127.0.0.1 unless BENCH_HOST says) whose accepted sockets are handed to onSocket once usable. */
  listen: (onSocket: (socket: Socket) => void) => Promise<Server>
  connect: (host: string, port: number) => Promise<Socket>
  describe?: (socket: Socket) => string | undefined
}

/**
 * An all-to-all floor over one persistent full-duplex socket per pair of peers (the lower rank
 * dials; a 4-byte rank header tells the acceptor who called). Connections are made before the
 * first round, as gloo does.
 */
export async function createSocketFloor (env: PeerEnv, factory: SocketFactory): Promise<BenchPeer> {
  const bytes = pairBytes(env.elements, env.world)
  const payload = Buffer.alloc(bytes, 0x5a)
  const receiver = new RoundReceiver()
  const sockets = new Map<number, Socket>()
  const allAccepted = Promise.withResolvers<void>()
  const expectAccepted = env.rank // ranks below ours dial us

  const adopt = (peerRank: number, socket: Socket): void => {
    socket.setNoDelay(true)
    socket.on('data', (chunk: Buffer) => receiver.add(chunk.length))
    socket.on('error', (err) => receiver.fail(err))
    sockets.set(peerRank, socket)
  }

  const server = await factory.listen((socket) => {
    let header = Buffer.alloc(0)
    const onHeader = (chunk: Buffer): void => {
      header = Buffer.concat([header, chunk])
      if (header.length < 4) return
      socket.off('data', onHeader)
      const peerRank = header.readUInt32BE(0)
      adopt(peerRank, socket)
      if (header.length > 4) receiver.add(header.length - 4)
      if ([...sockets.keys()].filter((r) => r < env.rank).length === expectAccepted) allAccepted.resolve()
    }
    socket.on('data', onHeader)
  })
  if (expectAccepted === 0) allAccepted.resolve()
  const { port } = server.address() as { port: number }
  let described: string | undefined

  return {
    address: `${benchHost()}:${port}`,
    async connect (addrs) {
      await Promise.all(addrs.map(async (addr, peerRank) => {
        if (peerRank <= env.rank) return
        const [host, portText] = addr.split(':')
        const socket = await factory.connect(host, Number(portText))
        const header = Buffer.alloc(4)
        header.writeUInt32BE(env.rank)
        socket.write(header)
        adopt(peerRank, socket)
      }))
      await allAccepted.promise
      described = factory.describe?.(sockets.values().next().value as Socket)
    },
    prepare () { receiver.reset(bytes * (env.world - 1)) },
    async allReduce () {
      const sent = [...sockets.values()].map(async (socket) => await writeAll(socket, payload))
      await Promise.all([...sent, receiver.complete])
      return undefined
    },
    note: () => described,
    async close () {
      for (const socket of sockets.values()) socket.destroy()
      server.close()
    }
  }
}
