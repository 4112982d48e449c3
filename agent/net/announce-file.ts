import { readFile } from 'node:fs/promises'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { describeError } from '../errors.js'
import type { Log } from '../log.js'
import { dataEndpointOf } from './direct/data-addrs.js'
import { ANNOUNCE_DATA_PREFIX } from '../../api/agent-env.js'

/**
 * Extra addresses to announce, from a file the operator keeps up to date (AVS_ANNOUNCE_FILE: a
 * mounted ConfigMap entry holding a node's or a load balancer's address for this pod). The
 * address may become known only after the agent started (the pod had to be scheduled, the load
 * balancer to get its ingress), so the file is reread instead of read once: a late address
 * neither blocks nor restarts the agent. A missing file or a bad entry announces nothing extra.
 *
 * Entries prefixed `data=` are where our direct data channel is reached when that is at another
 * port than its own (a NodePort Service's node port for it): sent to our groups and state
 * newcomers with the data port, so outsiders dial that instead of falling back to libp2p streams.
 */
export class AnnounceFile {
  private current: Multiaddr[] = []
  private currentData: Multiaddr[] = []
  private text = ''
  private timer?: NodeJS.Timeout

  constructor (private readonly path: string, private readonly log: Log) {}

  /** The addresses read last (without /p2p). */
  get addrs (): readonly Multiaddr[] { return this.current }

  /** The data addresses read last (`data=` entries). */
  get dataAddrs (): readonly Multiaddr[] { return this.currentData }

  /** Reads the file again; true when the addresses changed. */
  async reread (): Promise<boolean> {
    let text = ''
    try { text = (await readFile(this.path, 'utf8')).trim() } catch { /* not there yet */ }
    if (text === this.text) return false
    this.text = text
    const parsed: Multiaddr[] = []
    const data: Multiaddr[] = []
    for (const entry of text.split(/[,\s]+/).filter(e => e !== '')) {
      const isData = entry.startsWith(ANNOUNCE_DATA_PREFIX)
      try {
        const ma = multiaddr(isData ? entry.slice(ANNOUNCE_DATA_PREFIX.length) : entry)
        const endpoint = isData ? dataEndpointOf(ma) : undefined
        if (typeof endpoint === 'string') throw new Error(endpoint)
        ;(isData ? data : parsed).push(ma)
      } catch (err) { this.log.warn(`${this.path}: ignoring "${entry}": ${describeError(err)}`) }
    }
    this.current = parsed
    this.currentData = data
    const dataNote = data.length === 0 ? '' : `; our data channel at ${data.map(String).join(', ')}`
    this.log.info(`announcing ${parsed.length === 0 ? 'no extra addresses' : parsed.map(String).join(', ')} (from ${this.path})${dataNote}`)
    return true
  }

  /** Rereads every intervalMs, calling onChange after a change. */
  watch (intervalMs: number, onChange: () => void): void {
    this.timer = setInterval(() => { void this.reread().then(changed => { if (changed) onChange() }) }, intervalMs)
    this.timer.unref()
  }

  stop (): void { clearInterval(this.timer) }
}
