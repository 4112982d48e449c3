/**
 * Reachable multiaddrs of exposed agents, derived from what the API reports: the Node of each
 * pod (ExternalIP preferred, else InternalIP), the node ports the API server allocated, the
 * ingress a load-balancer controller wrote. Pure; an agent whose address is not known yet (not
 * scheduled, ingress pending) simply has none, and gets them on a later reconcile.
 */
import { isIP } from 'node:net'
import type { AveragingSwarm } from '../../api/v1alpha1/types.js'
import type { KubeObj } from '../objects.js'
import { exposeTypeOf, exposure, type ExposedPod } from './expose.js'

export interface ReachableInputs {
  /** The swarm's pods, by name (spec.nodeName is what is read). */
  pods: ReadonlyMap<string, KubeObj>
  /** Nodes, by name. */
  nodes: ReadonlyMap<string, KubeObj>
  /** The per-agent Services, by name (= pod name). */
  services: ReadonlyMap<string, KubeObj>
}

interface NodeAddress { type: string, address: string }

/** /ip4/, /ip6/ or /dns4/ for a host: an address literal or a DNS name. */
export function hostComponent (host: string): string {
  const v = isIP(host)
  return v === 4 ? `/ip4/${host}` : v === 6 ? `/ip6/${host}` : `/dns4/${host}`
}

/** A node's externally reachable addresses: every ExternalIP, else every InternalIP. */
export function nodeHosts (node: KubeObj | undefined): string[] {
  const addrs: NodeAddress[] = (node as any)?.status?.addresses ?? []
  for (const type of ['ExternalIP', 'InternalIP']) {
    const found = addrs.filter(a => a.type === type && isIP(a.address) !== 0).map(a => a.address)
    if (found.length > 0) return [...new Set(found)]
  }
  return []
}

/** Hosts of a LoadBalancer Service's ingress: its IPs, and host names (AWS ELBs) as DNS names. */
export function ingressHosts (svc: KubeObj | undefined): string[] {
  const ingress: Array<{ ip?: string, hostname?: string }> = (svc as any)?.status?.loadBalancer?.ingress ?? []
  return [...new Set(ingress.flatMap(i => [i.ip, i.hostname].filter((h): h is string => typeof h === 'string' && h !== '')))]
}

function nodePortOf (svc: KubeObj | undefined, name: string): number | undefined {
  const port = ((svc as any)?.spec?.ports ?? []).find((p: any) => p.name === name)?.nodePort
  return typeof port === 'number' && port > 0 ? port : undefined
}

/**
 * Where one exposed agent is reached from outside, as multiaddrs without /p2p/<id>: its libp2p
 * port, and where its direct data channel's port differs from the container's (`data`, NodePort
 * only: host ports and load balancers forward the container's own). Under NodePort both are node
 * ports the API server allocated, not the container's ports the agent knows, so the agent is told
 * (AVS_ANNOUNCE_FILE) and tells its peers; without it outsiders would dial the container's data port
 * on the node, find nothing, and send their tensor parts over libp2p streams instead. Both empty
 * while unknown; data stays empty while its node port is.
 */
export interface Reachable {
  readonly p2p: readonly string[]
  readonly data: readonly string[]
}

const UNKNOWN: Reachable = { p2p: [], data: [] }

/** One exposed agent's reachable addresses (Reachable); empty while unknown. */
export function reachableAddrs (s: AveragingSwarm, p: ExposedPod, inp: ReachableInputs): Reachable {
  const e = exposure(s)
  if (e === undefined) return UNKNOWN
  const type = exposeTypeOf(s, p.role)
  const pod = inp.pods.get(p.pod)
  const nodeName: string | undefined = (pod as any)?.spec?.nodeName
  const svc = inp.services.get(p.pod)
  let hosts: string[]
  let port: number | undefined
  // Host ports and load balancers keep the container's data port, which the agent advertises itself.
  let dataPort: number | undefined
  if (type === 'HostPort') {
    hosts = nodeHosts(nodeName === undefined ? undefined : inp.nodes.get(nodeName))
    port = s.spec.network.port
  } else if (type === 'NodePort') {
    // The pod's own node: it answers under externalTrafficPolicy Local as well as Cluster.
    hosts = nodeHosts(nodeName === undefined ? undefined : inp.nodes.get(nodeName))
    port = nodePortOf(svc, 'p2p')
    dataPort = nodePortOf(svc, 'data')
  } else {
    hosts = ingressHosts(svc)
    port = s.spec.network.port
  }
  // announceHost replaces the derived host, not the port: a NAT or DNS name in front of the same ports.
  if (e.announceHost !== undefined && (type !== 'NodePort' || port !== undefined)) hosts = [e.announceHost]
  if (port === undefined || hosts.length === 0) return UNKNOWN
  // HostPort and NodePort need a scheduled pod even with announceHost: before that the port goes nowhere.
  if (type !== 'LoadBalancer' && nodeName === undefined) return UNKNOWN
  return {
    p2p: hosts.map(h => `${hostComponent(h)}/tcp/${port}`),
    data: dataPort === undefined ? [] : hosts.map(h => `${hostComponent(h)}/tcp/${dataPort}`)
  }
}

/** pod name → reachable addresses, for every exposed agent whose libp2p addresses are known. */
export function reachableByPod (s: AveragingSwarm, pods: readonly ExposedPod[], inp: ReachableInputs): Map<string, Reachable> {
  const out = new Map<string, Reachable>()
  for (const p of pods) {
    const addrs = reachableAddrs(s, p, inp)
    if (addrs.p2p.length > 0) out.set(p.pod, addrs)
  }
  return out
}
