/**
 * Progress of a long transfer, for the log: a restarted agent pulling a 1B-parameter model's state
 * (4 GB in float32) from a donor in another site takes minutes at 100 Mbit/s, and said nothing
 * until the end. At most one line per interval, none for a transfer done within the first one, each
 * with how much has arrived, the rate so far and about how long is left.
 */
export class TransferProgress {
  private readonly started: number
  private lastLine: number

  constructor (
    private readonly what: string,
    private readonly totalBytes: number,
    private readonly report: (line: string) => void,
    private readonly intervalMs = 5000,
    private readonly now: () => number = () => Date.now()
  ) {
    this.started = now()
    this.lastLine = this.started
  }

  /** `doneBytes` of the total have arrived; reports when an interval has passed since the last line. */
  update (doneBytes: number): void {
    const t = this.now()
    if (t - this.lastLine < this.intervalMs || doneBytes >= this.totalBytes) return
    this.lastLine = t
    this.report(this.line(doneBytes, t))
  }

  /** "downloading …: 1.2 GiB of 4.0 GiB (30 %), 11.8 MB/s, about 4 min left" */
  line (doneBytes: number, at = this.now()): string {
    const seconds = Math.max(at - this.started, 1) / 1000
    const rate = doneBytes / seconds
    const percent = this.totalBytes > 0 ? Math.floor(100 * doneBytes / this.totalBytes) : 100
    const left = rate > 0 ? `about ${formatDuration((this.totalBytes - doneBytes) / rate)} left` : 'nothing yet'
    return `${this.what}: ${formatBytes(doneBytes)} of ${formatBytes(this.totalBytes)} (${percent} %), ${(rate / 1e6).toFixed(1)} MB/s, ${left}`
  }
}

/** Bytes in binary units, three significant digits at most: "812 B", "64.0 KiB", "1.25 GiB". */
export function formatBytes (bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let v = bytes
  let u = 0
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++ }
  return u === 0 ? `${v} B` : `${v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)} ${units[u]}`
}

/** A coarse duration for a person: "40 s", "4 min", "2.5 h". */
export function formatDuration (seconds: number): string {
  if (seconds < 90) return `${Math.max(1, Math.round(seconds))} s`
  if (seconds < 90 * 60) return `${Math.round(seconds / 60)} min`
  return `${(seconds / 3600).toFixed(1)} h`
}
