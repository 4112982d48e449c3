/**
 * When the milestones of one all-reduce happened, in ms from its start, for the debug log: which
 * reducer's channel opened late, which sender's last part arrived last, how long the means took
 * after our span was reduced. On shaped links this told a tail in the receivers' buffers from one
 * in our own writes (BENCHMARKS.md, "The 100 Mbit/s round's last 5 %"). A few dozen marks a round.
 */
export class Timeline {
  private readonly marks: string[] = []
  private readonly started = Date.now()

  mark (what: string): void {
    this.marks.push(`${what} ${Date.now() - this.started}`)
  }

  toString (): string {
    return this.marks.join(', ')
  }
}
