/**
 * The cluster's DNS, a UDP and TCP server on 127.0.0.1:<port> that answers A records from the API, at
 * query time (no cache, so it is never stale): Services resolve to the pod IPs of their ready
 * endpoints (there is no kube-proxy, so ClusterIP Services resolve to pod IPs too), and
 * <hostname>.<subdomain> names to the pod whose spec.hostname/subdomain match, when a Service
 * named <subdomain> selects it (as CoreDNS does for StatefulSets behind a headless Service).
 * Not-ready pods count only where the Service sets publishNotReadyAddresses. Names outside the
 * cluster zone are looked up with the machine's resolver, so "localhost" still works.
 */
import { createSocket, type Socket, type RemoteInfo } from 'node:dgram'
import { createServer, type Socket as Socket_ } from 'node:net'
import { lookup } from 'node:dns/promises'
import { decode, encode, AUTHORITATIVE_ANSWER, RECURSION_AVAILABLE, RECURSION_DESIRED, TRUNCATED_RESPONSE, type Packet, type Answer } from '@dnsquery/dns-packet'
import { CoreV1Api, type KubeConfig, type V1Pod, type V1Service } from '@kubernetes/client-node'
import { parseClusterName, inClusterZone, type ClusterName } from './names.js'

const NXDOMAIN = 3
const SERVFAIL = 2
const TTL = 1

export interface DnsServer {
  /** "127.0.0.1:<port>", the value of AVS_DNS_SERVERS. */
  readonly address: string
  readonly port: number
  /** Resolves a name as the server would (for tests): IPs, or undefined for NXDOMAIN. */
  resolve: (name: string) => Promise<string[] | undefined>
  stop: () => Promise<void>
}

function podReady (pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true
}

function selects (service: V1Service, pod: V1Pod): boolean {
  const selector = service.spec?.selector
  if (selector === undefined || Object.keys(selector).length === 0) return false
  return Object.entries(selector).every(([k, v]) => pod.metadata?.labels?.[k] === v)
}

async function clusterAnswer (core: CoreV1Api, name: ClusterName): Promise<string[] | undefined> {
  const serviceName = name.kind === 'service' ? name.service : name.subdomain
  let service: V1Service
  try {
    service = await core.readNamespacedService({ namespace: name.namespace, name: serviceName })
  } catch (error) {
    if ((error as { code?: number }).code === 404) return undefined
    throw error
  }
  const selector = Object.entries(service.spec?.selector ?? {}).map(([k, v]) => `${k}=${v}`).join(',')
  if (selector === '') return name.kind === 'service' ? [] : undefined
  const pods = (await core.listNamespacedPod({ namespace: name.namespace, labelSelector: selector })).items
  const usable = pods.filter((pod) =>
    pod.metadata?.deletionTimestamp == null && pod.status?.podIP !== undefined && selects(service, pod) &&
    (service.spec?.publishNotReadyAddresses === true || podReady(pod)))
  if (name.kind === 'service') return usable.map((pod) => pod.status?.podIP ?? '')
  const pod = usable.find((p) => p.spec?.hostname === name.hostname && p.spec?.subdomain === name.subdomain)
  return pod === undefined ? undefined : [pod.status?.podIP ?? '']
}

/** Builds the full response to one query message; undefined for messages that are not queries. */
async function respond (message: Buffer, resolve: (name: string) => Promise<string[] | undefined>): Promise<{ response: Buffer, query: Packet } | undefined> {
  let query: Packet
  try { query = decode(message) } catch { return undefined }
  const question = query.questions?.[0]
  const reply = (flags: number, answers: Answer[] = []): Buffer => Buffer.from(encode({
    type: 'response', id: query.id, questions: query.questions, answers,
    flags: flags | AUTHORITATIVE_ANSWER | RECURSION_AVAILABLE | ((query.flags ?? 0) & RECURSION_DESIRED)
  }))
  if (question === undefined) return { response: reply(SERVFAIL), query }
  try {
    const ips = await resolve(question.name)
    if (ips === undefined) return { response: reply(NXDOMAIN), query }
    // Names that exist answer NOERROR; only A queries carry records (no IPv6 here).
    const answers: Answer[] = question.type === 'A'
      ? ips.map((ip) => ({ type: 'A', name: question.name, ttl: TTL, class: 'IN', data: ip }))
      : []
    return { response: reply(0, answers), query }
  } catch {
    return { response: reply(SERVFAIL), query }
  }
}

/** The largest UDP answer the client accepts: its EDNS payload size, or classic DNS's 512 bytes. */
function udpLimit (query: Packet): number {
  const opt = query.additionals?.find((a) => a.type === 'OPT') as { udpPayloadSize?: number } | undefined
  return Math.max(512, opt?.udpPayloadSize ?? 512)
}

export async function startDnsServer (kc: KubeConfig): Promise<DnsServer> {
  const core = kc.makeApiClient(CoreV1Api)
  const resolve = async (name: string): Promise<string[] | undefined> => {
    const parsed = parseClusterName(name)
    if (parsed !== undefined) return await clusterAnswer(core, parsed)
    if (inClusterZone(name)) return undefined
    try {
      return (await lookup(name, { family: 4, all: true })).map((a) => a.address)
    } catch {
      return undefined
    }
  }
  const onUdp = (socket: Socket) => (message: Buffer, remote: RemoteInfo): void => {
    void respond(message, resolve).then((result) => {
      if (result === undefined) return
      let response = result.response
      if (response.length > udpLimit(result.query)) {
        // Too big for UDP: an empty truncated answer makes the client retry over TCP.
        response = Buffer.from(encode({ type: 'response', id: result.query.id, questions: result.query.questions, flags: TRUNCATED_RESPONSE | AUTHORITATIVE_ANSWER }))
      }
      try { socket.send(response, remote.port, remote.address) } catch {} // closed while resolving
    })
  }
  const onTcp = (conn: Socket_): void => {
    let buffered = Buffer.alloc(0)
    conn.on('error', () => conn.destroy())
    conn.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk])
      while (buffered.length >= 2 && buffered.length >= 2 + buffered.readUInt16BE(0)) {
        const message = buffered.subarray(2, 2 + buffered.readUInt16BE(0))
        buffered = buffered.subarray(2 + message.length)
        void respond(message, resolve).then((result) => {
          if (result === undefined || conn.destroyed) return
          const length = Buffer.alloc(2)
          length.writeUInt16BE(result.response.length)
          conn.write(Buffer.concat([length, result.response]))
        })
      }
    })
  }
  // UDP and TCP on the same port: bind UDP to a free port, then TCP to it (retry if taken).
  for (let attempt = 0; ; attempt++) {
    const socket = createSocket('udp4')
    socket.on('message', onUdp(socket))
    await new Promise<void>((resolveBind, reject) => {
      socket.once('error', reject)
      socket.bind(0, '127.0.0.1', () => { socket.off('error', reject); resolveBind() })
    })
    const port = socket.address().port
    const tcp = createServer(onTcp)
    try {
      await new Promise<void>((resolveListen, reject) => {
        tcp.once('error', reject)
        tcp.listen(port, '127.0.0.1', () => { tcp.off('error', reject); resolveListen() })
      })
    } catch (error) {
      socket.close()
      if (attempt < 5) continue
      throw error
    }
    return {
      address: `127.0.0.1:${port}`,
      port,
      resolve,
      stop: async () => {
        await new Promise<void>((r) => socket.close(() => r()))
        await new Promise<void>((r) => tcp.close(() => r()))
      }
    }
  }
}
