import { execFile } from 'node:child_process'
import { promisify } from 'node:util'

const exec = promisify(execFile)

/**
 * N peers, each in a network namespace of its own, joined by veth pairs to one Linux bridge in the
 * root namespace (10.78.<subnet>.0/24; the bridge holds .1, peer i holds .(10+i)). Peer i's link
 * is shaped to rates[i] Mbit/s in BOTH directions by a token bucket (tc tbf) on each end of its
 * veth: the end inside the namespace shapes what the peer sends, the end on the bridge what it
 * receives. Shaping both ends needs no ifb device and no redirect filter (this kernel has ifb
 * built in, `modprobe ifb` finds no module but `ip link add type ifb` works; it would do the same
 * job with one more hop). netem is not in this kernel: the links add no delay, the bridge's
 * sub-millisecond RTT is all there is. Needs root and iproute2.
 */
export interface ShapedLinks {
  readonly namespaces: readonly string[]
  readonly addrs: readonly string[]
  readonly gateway: string
  /** Changes peer i's rate in both directions, in place (tc qdisc change), while traffic flows. */
  setRate: (peer: number, mbit: number) => Promise<void>
  /** Bytes each peer sent and received since creation: tbf's own counters on the inner and outer end. */
  counters: () => Promise<Array<{ sent: number, received: number }>>
  /** Kills whatever still runs in the namespaces, deletes them, the veths and the bridge; never throws. */
  destroy: () => Promise<void>
}

/** Why this machine cannot build shaped links (not root, no iproute2/tc), or undefined when it can. */
export async function shapedLinksUnsupported (): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'shaped links need root to create network namespaces and tc qdiscs (this process is not uid 0)'
  for (const [cmd, arg] of [['ip', '-V'], ['tc', '-V']]) {
    try { await exec(cmd, [arg]) } catch { return `${cmd} (iproute2) is not installed` }
  }
  return undefined
}

async function run (cmd: string, ...args: string[]): Promise<string> {
  try {
    return (await exec(cmd, args)).stdout
  } catch (err) {
    throw new Error(`${cmd} ${args.join(' ')} failed: ${String((err as { stderr?: string }).stderr ?? (err as Error).message).trim()}`)
  }
}

/**
 * tbf settings for a rate: the bucket must hold at least one 64 KiB GSO segment (veth hands tbf
 * segments that large; a smaller bucket drops them all) and ~2 ms of traffic so the timer's
 * granularity does not cap the rate; 20 ms of queue, as a switch port's buffer.
 */
function tbfArgs (mbit: number): string[] {
  const bytesPerS = mbit * 1e6 / 8
  const burst = Math.max(128 * 1024, Math.round(bytesPerS * 0.002))
  return ['tbf', 'rate', `${mbit}mbit`, 'burst', String(burst), 'latency', '20ms']
}

/**
 * Builds the namespaces and links; tears down whatever it built if any step fails. tag: ≤ 8 characters, unique per run.
 * sysctls ("net.ipv4.tcp_notsent_lowat=131072"): set in every peer's namespace, as a pod's securityContext would.
 */
export async function createShapedLinks (tag: string, subnet: number, rates: readonly number[], sysctls: readonly string[] = []): Promise<ShapedLinks> {
  const n = rates.length
  const ns = rates.map((_, i) => `${tag}n${i}`)
  const hostEnd = rates.map((_, i) => `${tag}h${i}`)
  const bridge = `${tag}br`
  const net = `10.78.${subnet}`
  const addrs = rates.map((_, i) => `${net}.${10 + i}`)
  const links: ShapedLinks = {
    namespaces: ns,
    addrs,
    gateway: `${net}.1`,
    async setRate (peer, mbit) {
      await run('tc', '-n', ns[peer], 'qdisc', 'change', 'dev', 'eth0', 'root', ...tbfArgs(mbit))
      await run('tc', 'qdisc', 'change', 'dev', hostEnd[peer], 'root', ...tbfArgs(mbit))
    },
    async counters () {
      const sent = (out: string): number => Number(/Sent (\d+) bytes/.exec(out)?.[1] ?? NaN)
      return await Promise.all(ns.map(async (name, i) => ({
        sent: sent(await run('tc', '-n', name, '-s', 'qdisc', 'show', 'dev', 'eth0')),
        received: sent(await run('tc', '-s', 'qdisc', 'show', 'dev', hostEnd[i]))
      })))
    },
    async destroy () {
      for (const name of ns) {
        const pids = await exec('ip', ['netns', 'pids', name]).then(r => r.stdout.split(/\s+/).filter(Boolean).map(Number), () => [])
        for (const pid of pids) { try { process.kill(pid, 'SIGKILL') } catch { /* gone */ } }
        await exec('ip', ['netns', 'del', name]).catch(() => {})
      }
      // Deleting a namespace deletes its veth end and with it the pair; the bridge is ours to delete.
      for (const link of [...hostEnd, bridge]) await exec('ip', ['link', 'del', link]).catch(() => {})
    }
  }
  try {
    await run('ip', 'link', 'add', bridge, 'type', 'bridge')
    await run('ip', 'addr', 'add', `${links.gateway}/24`, 'dev', bridge)
    await run('ip', 'link', 'set', bridge, 'up')
    for (let i = 0; i < n; i++) {
      await run('ip', 'netns', 'add', ns[i])
      await run('ip', 'link', 'add', hostEnd[i], 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns[i])
      await run('ip', 'link', 'set', hostEnd[i], 'master', bridge)
      await run('ip', 'link', 'set', hostEnd[i], 'up')
      await run('ip', '-n', ns[i], 'link', 'set', 'lo', 'up')
      await run('ip', '-n', ns[i], 'addr', 'add', `${addrs[i]}/24`, 'dev', 'eth0')
      await run('ip', '-n', ns[i], 'link', 'set', 'eth0', 'up')
      await run('tc', '-n', ns[i], 'qdisc', 'add', 'dev', 'eth0', 'root', ...tbfArgs(rates[i]))
      await run('tc', 'qdisc', 'add', 'dev', hostEnd[i], 'root', ...tbfArgs(rates[i]))
      for (const setting of sysctls) await run('ip', 'netns', 'exec', ns[i], 'sysctl', '-q', '-w', setting)
    }
  } catch (err) {
    await links.destroy()
    throw err
  }
  return links
}
