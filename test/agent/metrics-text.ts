/** The value of one series in Prometheus text exposition, matched by name and the labels given; undefined when absent. */
export function sampleValue (text: string, name: string, labels: Readonly<Record<string, string>> = {}): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (m === null || m[1] !== name) continue
    const have = new Map([...(m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"/g)].map(l => [l[1], l[2]]))
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) return Number(m[3])
  }
  return undefined
}
