/**
 * Batches messages to another thread: one postMessage per turn of the event loop, however many
 * messages the turn produced. A postMessage costs tens of microseconds in wake-ups and
 * serialisation, several times a 64 KiB copy, so per-part messages would cost more than they move.
 */
export class Outbox<M> {
  private messages: M[] = []
  private transfer: ArrayBuffer[] = []
  private scheduled = false
  private lazy = 0

  constructor (private readonly send: (messages: M[], transfer: ArrayBuffer[]) => void, private readonly lazyLimit = 16) {}

  /**
   * A lazy message (nobody waits for it: a buffer handed back for reuse) rides along with the
   * next other one, or goes when lazyLimit of them have gathered.
   */
  post (message: M, transfer: readonly ArrayBuffer[] = [], lazy = false): void {
    this.messages.push(message)
    for (const buf of transfer) this.transfer.push(buf)
    if (this.scheduled || (lazy && ++this.lazy < this.lazyLimit)) return
    this.scheduled = true
    setImmediate(() => { this.flush() })
  }

  flush (): void {
    this.scheduled = false
    this.lazy = 0
    if (this.messages.length === 0) return
    const messages = this.messages
    const transfer = this.transfer
    this.messages = []
    this.transfer = []
    this.send(messages, transfer)
  }
}
