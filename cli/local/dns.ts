import { createSocket, type Socket } from 'node:dgram'
import * as packet from '@dnsquery/dns-packet'

/**
 * A static DNS server on loopback answering A records for the swarm's pod names, so agents
 * resolve the bootstrap agents' /dns4 multiaddrs exactly as they do in a cluster.
 */
export async function startStaticDns (records: ReadonlyMap<string, string>): Promise<{ address: string, close: () => void }> {
  const socket: Socket = createSocket('udp4')
  socket.on('message', (msg, rinfo) => {
    try {
      const query = packet.decode(msg)
      const question = query.questions?.[0]
      const ip = question != null ? records.get(question.name.toLowerCase().replace(/\.$/, '')) : undefined
      const answers = ip != null && question?.type === 'A' ? [{ type: 'A' as const, name: question.name, ttl: 5, data: ip }] : []
      const reply = packet.encode({
        id: query.id, type: 'response', flags: packet.AUTHORITATIVE_ANSWER | (ip == null ? 3 : 0), questions: query.questions, answers
      })
      socket.send(reply, rinfo.port, rinfo.address)
    } catch { /* not a DNS query: ignore */ }
  })
  await new Promise<void>((resolve, reject) => { socket.once('error', reject); socket.bind(0, '127.0.0.1', resolve) })
  const { port } = socket.address()
  let open = true
  return { address: `127.0.0.1:${port}`, close: () => { if (open) { open = false; socket.close() } } }
}
