import { execFile } from 'node:child_process'
import { promisify } from 'node:util'

const exec = promisify(execFile)

/**
 * Two network namespaces ("halves") on one Linux bridge in the root namespace, each joined by a
 * veth pair, with real addresses (10.77.<subnet>.0/24, no loopback). `cut` isolates both bridge
 * ports (the bridge then drops every frame between them, silently, as a failed link does; each
 * half still reaches the root namespace), `heal` lifts it. Needs root and iproute2.
 */
export interface TwoHalves {
  readonly namespaces: readonly [string, string]
  /** Addresses of the agents in half 0 and half 1. */
  readonly addrs: readonly [readonly string[], readonly string[]]
  readonly gateway: string
  cut (): Promise<void>
  heal (): Promise<void>
  /** Kills whatever still runs inside the namespaces, deletes them, the veths and the bridge; never throws. */
  destroy (): Promise<void>
}

async function ip (...args: string[]): Promise<void> {
  try {
    await exec('ip', args)
  } catch (err) {
    throw new Error(`ip ${args.join(' ')} failed: ${String((err as { stderr?: string }).stderr ?? (err as Error).message).trim()}`)
  }
}

/** Why this machine cannot run the partition (not root, no iproute2), or undefined when it can. */
export async function partitionUnsupported (): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'network namespaces need root (this process is not uid 0)'
  try { await exec('ip', ['-V']) } catch { return 'iproute2 (the ip command) is not installed' }
  try { await exec('bridge', ['-V']) } catch { return 'iproute2\'s bridge command is not installed' }
  return undefined
}

export async function createTwoHalves (tag: string, subnet: number, perHalf: number): Promise<TwoHalves> {
  const ns: [string, string] = [`${tag}a`, `${tag}b`]
  const bridge = `${tag}br`
  const hostEnds = [`${tag}ah`, `${tag}bh`]
  const net = `10.77.${subnet}`
  const addrs: [string[], string[]] = [
    Array.from({ length: perHalf }, (_, k) => `${net}.${10 + k}`),
    Array.from({ length: perHalf }, (_, k) => `${net}.${130 + k}`)
  ]
  const halves: TwoHalves = {
    namespaces: ns,
    addrs,
    gateway: `${net}.1`,
    async cut () { for (const h of hostEnds) await exec('bridge', ['link', 'set', 'dev', h, 'isolated', 'on']) },
    async heal () { for (const h of hostEnds) await exec('bridge', ['link', 'set', 'dev', h, 'isolated', 'off']) },
    async destroy () {
      for (const n of ns) {
        const pids = await exec('ip', ['netns', 'pids', n]).then(r => r.stdout.split(/\s+/).filter(Boolean).map(Number), () => [])
        for (const pid of pids) { try { process.kill(pid, 'SIGKILL') } catch { /* gone */ } }
        await exec('ip', ['netns', 'del', n]).catch(() => {})
      }
      for (const link of [...hostEnds, bridge]) await exec('ip', ['link', 'del', link]).catch(() => {})
    }
  }
  try {
    await ip('link', 'add', bridge, 'type', 'bridge')
    await ip('addr', 'add', `${halves.gateway}/24`, 'dev', bridge)
    await ip('link', 'set', bridge, 'up')
    for (let h = 0; h < 2; h++) {
      await ip('netns', 'add', ns[h])
      await ip('link', 'add', hostEnds[h], 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns[h])
      await ip('link', 'set', hostEnds[h], 'master', bridge)
      await ip('link', 'set', hostEnds[h], 'up')
      await ip('-n', ns[h], 'link', 'set', 'lo', 'up')
      for (const a of addrs[h]) await ip('-n', ns[h], 'addr', 'add', `${a}/24`, 'dev', 'eth0')
      await ip('-n', ns[h], 'link', 'set', 'eth0', 'up')
    }
  } catch (err) {
    await halves.destroy()
    throw err
  }
  return halves
}
