import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { partitionUnsupported } from './two-halves.js'

const exec = promisify(execFile)

/**
 * A small internet in network namespaces: a "public" namespace whose bridge carries
 * 11.18.<subnet>.0/24 (the relay agents listen there), and sites, each a private LAN
 * (192.168.<site+1>.0/24) behind its own router namespace that masquerades (iptables NAT)
 * onto the public bridge. The public side has no route into any LAN, and each router answers
 * packets for other private ranges with "unreachable" at once, as the internet drops RFC 1918
 * traffic: a dial to another site's private address fails fast instead of timing out. 11.18.x
 * is no private range on purpose: DCUtR only exchanges public addresses. Optional port forwards
 * on a router (iptables DNAT, as kube-proxy programs a NodePort) make an address in a site
 * reachable from outside at <natIp>:<port>.
 */
export interface NatSites {
  readonly publicNs: string
  /** The public bridge's address: where the relay agents listen. */
  readonly publicIp: string
  /** Per site: its namespace, its agents' addresses and its router's public address. */
  readonly sites: ReadonlyArray<{ readonly ns: string, readonly ips: readonly string[], readonly natIp: string }>
  /** Kills whatever still runs inside the namespaces and deletes them; never throws. */
  destroy (): Promise<void>
}

async function run (cmd: string, ...args: string[]): Promise<void> {
  try {
    await exec(cmd, args)
  } catch (err) {
    throw new Error(`${cmd} ${args.join(' ')} failed: ${String((err as { stderr?: string }).stderr ?? (err as Error).message).trim()}`)
  }
}

/** Why this machine cannot build NAT sites (not root, no iproute2 or iptables), or undefined. */
export async function natSitesUnsupported (): Promise<string | undefined> {
  const why = await partitionUnsupported()
  if (why !== undefined) return why
  try { await exec('iptables', ['-V']) } catch { return 'iptables is not installed (the NAT routers need it)' }
  return undefined
}

/**
 * A port forward on a site's router: TCP arriving on its WAN side at <natIp>:<port> goes to
 * <to>:<toPort> inside the site (DNAT in PREROUTING, as kube-proxy does for a NodePort Service);
 * the replies go back through the router's connection tracking.
 */
export interface PortForward {
  /** Index of the site whose router forwards. */
  readonly site: number
  /** The port on the router's public address. */
  readonly port: number
  /** An address inside that site. */
  readonly to: string
  readonly toPort: number
}

export interface NatSitesOptions {
  readonly forwards?: readonly PortForward[]
}

export async function createNatSites (tag: string, subnet: number, agentsPerSite: readonly number[], options: NatSitesOptions = {}): Promise<NatSites> {
  const publicNs = `${tag}pub`
  const pub = `11.18.${subnet}`
  const sites = agentsPerSite.map((n, s) => ({
    ns: `${tag}s${s}`,
    router: `${tag}r${s}`,
    lan: `192.168.${s + 1}`,
    natIp: `${pub}.${2 + s}`,
    ips: Array.from({ length: n }, (_, k) => `192.168.${s + 1}.${10 + k}`)
  }))
  const forwards = options.forwards ?? []
  for (const f of forwards) {
    const site = sites[f.site]
    if (site === undefined) throw new Error(`port forward ${f.port} -> ${f.to}:${f.toPort}: there is no site ${f.site}`)
    if (!f.to.startsWith(`${site.lan}.`)) throw new Error(`port forward ${f.port} -> ${f.to}:${f.toPort}: ${f.to} is not in site ${f.site} (${site.lan}.0/24)`)
    for (const p of [f.port, f.toPort]) if (!Number.isInteger(p) || p < 1 || p > 65535) throw new Error(`port forward ${f.port} -> ${f.to}:${f.toPort}: ${p} is no TCP port`)
  }
  const all = [publicNs, ...sites.flatMap(s => [s.router, s.ns])]
  const result: NatSites = {
    publicNs,
    publicIp: `${pub}.10`,
    sites: sites.map(s => ({ ns: s.ns, ips: s.ips, natIp: s.natIp })),
    async destroy () {
      for (const n of all) {
        const pids = await exec('ip', ['netns', 'pids', n]).then(r => r.stdout.split(/\s+/).filter(Boolean).map(Number), () => [])
        for (const pid of pids) { try { process.kill(pid, 'SIGKILL') } catch { /* gone */ } }
        await exec('ip', ['netns', 'del', n]).catch(() => {})
      }
    }
  }
  try {
    for (const n of all) {
      await run('ip', 'netns', 'add', n)
      await run('ip', '-n', n, 'link', 'set', 'lo', 'up')
    }
    await run('ip', '-n', publicNs, 'link', 'add', 'br0', 'type', 'bridge')
    await run('ip', '-n', publicNs, 'addr', 'add', `${result.publicIp}/24`, 'dev', 'br0')
    await run('ip', '-n', publicNs, 'link', 'set', 'br0', 'up')
    for (const [i, s] of sites.entries()) {
      // WAN: router <-> the public bridge.
      await run('ip', '-n', publicNs, 'link', 'add', `p${i}`, 'type', 'veth', 'peer', 'name', 'wan', 'netns', s.router)
      await run('ip', '-n', publicNs, 'link', 'set', `p${i}`, 'master', 'br0')
      await run('ip', '-n', publicNs, 'link', 'set', `p${i}`, 'up')
      await run('ip', '-n', s.router, 'addr', 'add', `${s.natIp}/24`, 'dev', 'wan')
      await run('ip', '-n', s.router, 'link', 'set', 'wan', 'up')
      // LAN: router <-> the site.
      await run('ip', '-n', s.router, 'link', 'add', 'lan', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', s.ns)
      await run('ip', '-n', s.router, 'addr', 'add', `${s.lan}.1/24`, 'dev', 'lan')
      await run('ip', '-n', s.router, 'link', 'set', 'lan', 'up')
      for (const a of s.ips) await run('ip', '-n', s.ns, 'addr', 'add', `${a}/24`, 'dev', 'eth0')
      await run('ip', '-n', s.ns, 'link', 'set', 'eth0', 'up')
      await run('ip', '-n', s.ns, 'route', 'add', 'default', 'via', `${s.lan}.1`)
      // NAT: forward, masquerade everything leaving by the WAN, refuse other private ranges.
      await run('ip', 'netns', 'exec', s.router, 'sysctl', '-qw', 'net.ipv4.ip_forward=1')
      await run('ip', 'netns', 'exec', s.router, 'iptables', '-t', 'nat', '-A', 'POSTROUTING', '-o', 'wan', '-j', 'MASQUERADE')
      await run('ip', '-n', s.router, 'route', 'add', 'unreachable', '192.168.0.0/16')
      // Port forwards, as kube-proxy programs a NodePort: DNAT what arrives on the WAN.
      for (const f of forwards.filter(f => f.site === i)) {
        await run('ip', 'netns', 'exec', s.router, 'iptables', '-t', 'nat', '-A', 'PREROUTING', '-i', 'wan', '-p', 'tcp', '--dport', String(f.port), '-j', 'DNAT', '--to-destination', `${f.to}:${f.toPort}`)
      }
    }
  } catch (err) {
    await result.destroy()
    throw err
  }
  return result
}
