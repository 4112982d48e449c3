/** A FIFO async mutex: the join lock that serialises accepting followers with asking a leader. */
export class Mutex {
  private tail: Promise<void> = Promise.resolve()

  async run<T> (fn: () => Promise<T>): Promise<T> {
    const previous = this.tail
    let release!: () => void
    this.tail = new Promise<void>(resolve => { release = resolve })
    await previous
    try {
      return await fn()
    } finally {
      release()
    }
  }
}
