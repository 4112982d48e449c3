/** A sleep that another part of the program can cut short (a follower joined, the group assembled). */
export class Wakeup {
  private wake: (() => void) | null = null

  async sleep (ms: number): Promise<void> {
    if (ms <= 0) return
    await new Promise<void>(resolve => {
      const timer = setTimeout(done, ms)
      function done (): void { clearTimeout(timer); resolve() }
      this.wake = done
    })
    this.wake = null
  }

  notify (): void {
    this.wake?.()
  }
}
