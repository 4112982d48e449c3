/**
 * Bytes on the wire, from the kernel's TCP counters (`ss -tin`: bytes_acked, bytes_received).
 *
 * Every connection between two peers has at least one end on a peer's listening port (the accepting
 * side; go-libp2p, i.e. hivemind's p2pd, also dials from its listening port, so there both ends are),
 * so summing sent + received once per connection seen from such a socket counts every byte any peer
 * sent to another exactly once; divided by the peer count it is the mean bytes sent per peer. The
 * listening ports are those of sockets owned by the peers' process groups (a peer runs in its own
 * group with its helpers: hivemind's averager process and p2pd), read once when measuring starts.
 * Unix sockets (hivemind's Python <-> p2pd) are not TCP and not counted; the coordinator's HTTP
 * sockets are not on a peer's listening port. Connections may open and close per round (a direct
 * data channel does), so the meter samples every `intervalMs` and keeps each connection's largest
 * counters: the bytes a connection moves after its last sample before it closes are missed (an
 * undercount of at most one interval of its traffic).
 */
import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'

export interface SocketBytes {
  readonly state: string
  readonly local: string
  readonly remote: string
  /** owner's pid when ss was asked for processes (-p), else null */
  readonly pid: number | null
  /** bytes the other end acknowledged (bytes_acked, less the SYN's 1) */
  readonly sent: number
  readonly received: number
}

export const portOf = (endpoint: string): number => Number(endpoint.slice(endpoint.lastIndexOf(':') + 1))

/** Parses `ss -tin[p]H` output: an endpoint line (users:((...pid=N...)) with -p), then an indented line of TCP info. */
export function parseSs (text: string): SocketBytes[] {
  const sockets: SocketBytes[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const head = /^(\S+)\s+\d+\s+\d+\s+(\S+)\s+(\S+)(.*)$/.exec(lines[i])
    if (head == null) continue
    const pid = /pid=(\d+)/.exec(head[4])
    const info = lines[i + 1] ?? ''
    const hasInfo = /^\s/.test(info)
    const acked = hasInfo ? Number(/bytes_acked:(\d+)/.exec(info)?.[1] ?? 0) : 0
    sockets.push({
      state: head[1],
      local: head[2],
      remote: head[3],
      pid: pid != null ? Number(pid[1]) : null,
      sent: Math.max(0, acked - 1),
      received: hasInfo ? Number(/bytes_received:(\d+)/.exec(info)?.[1] ?? 0) : 0
    })
  }
  return sockets
}

/** Whether either end of the socket is a peer's listening port: both ends of a connection are sampled, so
 * its counters survive in whichever socket lingers longer after a close. */
export function onListenPort (s: SocketBytes, listenPorts: ReadonlySet<number>): boolean {
  return listenPorts.has(portOf(s.local)) || listenPorts.has(portOf(s.remote))
}

/**
 * Total bytes moved between the given samples' accepting-side sockets: for each socket, its largest
 * counters seen less those of the first sample (0 for a socket born after it).
 */
export function bytesMoved (first: readonly SocketBytes[], samples: ReadonlyArray<readonly SocketBytes[]>, listenPorts: ReadonlySet<number>): number {
  // One key per connection, not per socket: go-libp2p (hivemind's p2pd) dials from its listening port
  // (SO_REUSEPORT), so both ends of its connections sit on listening ports and both sockets are sampled.
  const key = (s: SocketBytes): string => [s.local, s.remote].sort().join(' ')
  const baseline = new Map<string, number>()
  for (const s of first) if (onListenPort(s, listenPorts)) baseline.set(key(s), Math.max(baseline.get(key(s)) ?? 0, s.sent + s.received))
  const largest = new Map<string, number>()
  for (const sample of samples) {
    for (const s of sample) {
      if (!onListenPort(s, listenPorts)) continue
      largest.set(key(s), Math.max(largest.get(key(s)) ?? 0, s.sent + s.received))
    }
  }
  let total = 0
  for (const [k, bytes] of largest) total += Math.max(0, bytes - (baseline.get(k) ?? 0))
  return total
}

async function ss (args: string[]): Promise<string> {
  return await new Promise<string>((resolve) => {
    execFile('ss', args, { maxBuffer: 256 * 1024 * 1024 }, (err, stdout) => resolve(err != null ? '' : stdout))
  })
}

async function pgidOf (pid: number): Promise<number | null> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8')
    // Fields after the command name (which may hold spaces) start after the last ')'.
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2])
  } catch {
    return null
  }
}

/** TCP ports on which the given process groups listen. */
export async function listeningPorts (pgids: ReadonlySet<number>): Promise<Set<number>> {
  const ports = new Set<number>()
  for (const s of parseSs(await ss(['-tlnpH']))) {
    if (s.pid == null) continue
    const pgid = await pgidOf(s.pid)
    if (pgid != null && pgids.has(pgid)) ports.add(portOf(s.local))
  }
  return ports
}

/** Samples the TCP counters of the peers' accepting-side sockets from start() to stop(). */
export class WireMeter {
  private listenPorts = new Set<number>()
  private first: SocketBytes[] = []
  private readonly samples: SocketBytes[][] = []
  private timer: NodeJS.Timeout | undefined
  private busy = false

  constructor (private readonly intervalMs = 50) {}

  private async sample (): Promise<SocketBytes[]> {
    if (this.listenPorts.size === 0) return []
    // Let the kernel filter by local port: one sample stays cheap on a machine with many sockets.
    const filter = `( ${[...this.listenPorts].map((p) => `sport = :${p} or dport = :${p}`).join(' or ')} )`
    return parseSs(await ss(['-tinH', filter])).filter((s) => onListenPort(s, this.listenPorts))
  }

  async start (pgids: ReadonlySet<number>): Promise<void> {
    this.listenPorts = await listeningPorts(pgids)
    this.first = await this.sample()
    this.samples.push(this.first)
    this.timer = setInterval(() => {
      if (this.busy) return
      this.busy = true
      this.sample().then((s) => { this.samples.push(s) }, () => {}).finally(() => { this.busy = false })
    }, this.intervalMs)
  }

  /**
   * Stops sampling; the total bytes all peers sent to each other meanwhile, or null when the peers had no
   * listening port to watch (gloo's pairs close their listeners once connected: not measurable this way).
   */
  async stop (): Promise<number | null> {
    clearInterval(this.timer)
    if (this.listenPorts.size === 0) return null
    this.samples.push(await this.sample())
    return bytesMoved(this.first, this.samples, this.listenPorts)
  }
}
