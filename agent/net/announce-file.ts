import { readFile } from 'node:fs/promises'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { describeError } from '../errors.js'
import type { Log } from '../log.js'

/**
 * Extra addresses to announce, from a file the operator keeps up to date (AVS_ANNOUNCE_FILE: a
 * mounted ConfigMap entry holding a node's or a load balancer's address for this pod). The
 * address may become known only after the agent started (the pod had to be scheduled, the load
 * balancer to get its ingress), so the file is reread instead of read once: a late address
 * neither blocks nor restarts the agent. A missing file or a bad entry announces nothing extra.
 */
export class AnnounceFile {
  private current: Multiaddr[] = []
  private text = ''
  private timer?: NodeJS.Timeout

  constructor (private readonly path: string, private readonly log: Log) {}

  /** The addresses read last (without /p2p). */
  get addrs (): readonly Multiaddr[] { return this.current }

  /** Reads the file again; true when the addresses changed. */
  async reread (): Promise<boolean> {
    let text = ''
    try { text = (await readFile(this.path, 'utf8')).trim() } catch { /* not there yet */ }
    if (text === this.text) return false
    this.text = text
    const parsed: Multiaddr[] = []
    for (const entry of text.split(/[,\s]+/).filter(e => e !== '')) {
      try { parsed.push(multiaddr(entry)) } catch (err) { this.log.warn(`${this.path}: ignoring "${entry}": ${describeError(err)}`) }
    }
    this.current = parsed
    this.log.info(`announcing ${parsed.length === 0 ? 'no extra addresses' : parsed.map(String).join(', ')} (from ${this.path})`)
    return true
  }

  /** Rereads every intervalMs, calling onChange after a change. */
  watch (intervalMs: number, onChange: () => void): void {
    this.timer = setInterval(() => { void this.reread().then(changed => { if (changed) onChange() }) }, intervalMs)
    this.timer.unref()
  }

  stop (): void { clearInterval(this.timer) }
}
