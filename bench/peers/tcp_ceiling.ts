/** The ceiling: one butterfly all-reduce's traffic over raw loopback TCP sockets, no encryption, no arithmetic. */
import { createServer, connect } from 'node:net'
import { runBenchPeer } from '../lib/peer-client.js'
import { createSocketFloor } from '../lib/socket-floor.js'
import { benchHost } from '../lib/protocol.js'

await runBenchPeer(async (env) => await createSocketFloor(env, {
  async listen (onSocket) {
    const server = createServer(onSocket)
    await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(0, benchHost(), resolve) })
    return server
  },
  async connect (host, port) {
    return await new Promise((resolve, reject) => {
      const socket = connect({ host, port }, () => resolve(socket))
      socket.once('error', reject)
    })
  },
  describe: () => 'raw TCP'
}))
