/**
 * The cluster's DNS, a UDP server on 127.0.0.1:<port> that answers A records from the API, at
 * query time (no cache, so it is never stale): Services resolve to the pod IPs of their ready
 * endpoints (there is no kube-proxy, so ClusterIP Services resolve to pod IPs too), and
 * <hostname>.<subdomain> names to the pod whose spec.hostname/subdomain match, when a Service
 * named <subdomain> selects it (as CoreDNS does for StatefulSets behind a headless Service).
 * Not-ready pods count only where the Service sets publishNotReadyAddresses. Names outside the
 * cluster zone are looked up with the machine's resolver, so "localhost" still works.
 */
import { createSocket, type Socket } from 'node:dgram'
import { lookup } from 'node:dns/promises'
import { decode, encode, AUTHORITATIVE_ANSWER, RECURSION_AVAILABLE, RECURSION_DESIRED, type Packet, type Answer } from '@dnsquery/dns-packet'
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
  const socket: Socket = createSocket('udp4')
  socket.on('message', (message, remote) => {
    void (async () => {
      let query: Packet
      try { query = decode(message) } catch { return }
      const question = query.questions?.[0]
      const reply = (flags: number, answers: Answer[] = []): void => {
        const response = encode({
          type: 'response', id: query.id, questions: query.questions, answers,
          flags: flags | AUTHORITATIVE_ANSWER | RECURSION_AVAILABLE | ((query.flags ?? 0) & RECURSION_DESIRED)
        })
        socket.send(response, remote.port, remote.address)
      }
      if (question === undefined) { reply(SERVFAIL); return }
      try {
        const ips = await resolve(question.name)
        if (ips === undefined) { reply(NXDOMAIN); return }
        // Names that exist answer NOERROR; only A queries carry records (no IPv6 here).
        const answers: Answer[] = question.type === 'A'
          ? ips.map((ip) => ({ type: 'A', name: question.name, ttl: TTL, class: 'IN', data: ip }))
          : []
        reply(0, answers)
      } catch {
        reply(SERVFAIL)
      }
    })()
  })
  await new Promise<void>((resolveBind, reject) => {
    socket.once('error', reject)
    socket.bind(0, '127.0.0.1', () => { socket.off('error', reject); resolveBind() })
  })
  const port = socket.address().port
  return {
    address: `127.0.0.1:${port}`,
    port,
    resolve,
    stop: async () => { await new Promise<void>((r) => socket.close(() => r())) }
  }
}
