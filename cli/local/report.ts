import type { SwarmSample } from './progress.js'

export interface SoloPoint { readonly t: number, readonly heldOutLoss: number }

interface Series { readonly label: string, readonly color: string, readonly points: ReadonlyArray<[number, number]> }

/** A line chart as inline SVG: the report opens offline, with no script or CDN. */
function chart (title: string, yLabel: string, series: readonly Series[]): string {
  const W = 640; const H = 280; const L = 60; const R = 20; const T = 30; const B = 40
  const all = series.flatMap(s => s.points).filter(([, y]) => Number.isFinite(y))
  if (all.length === 0) return `<h2>${title}</h2><p>No data was recorded.</p>`
  const xMax = Math.max(...all.map(([x]) => x), 1)
  const yMax = Math.max(...all.map(([, y]) => y)) * 1.1 || 1
  const x = (v: number): number => L + (v / xMax) * (W - L - R)
  const y = (v: number): number => H - B - (v / yMax) * (H - T - B)
  const ticks = [0, 0.25, 0.5, 0.75, 1].map(f => f * yMax)
  const lines = series.map(s => {
    const pts = s.points.filter(([, v]) => Number.isFinite(v)).map(([a, b]) => `${x(a).toFixed(1)},${y(b).toFixed(1)}`).join(' ')
    return `<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts}"/>`
  }).join('')
  const legend = series.map((s, i) => `<rect x="${L + 10 + i * 200}" y="8" width="14" height="4" fill="${s.color}"/><text x="${L + 30 + i * 200}" y="14" font-size="12">${s.label}</text>`).join('')
  const grid = ticks.map(v => `<line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" stroke="#eee"/><text x="${L - 6}" y="${y(v) + 4}" font-size="11" text-anchor="end">${v.toPrecision(2)}</text>`).join('')
  return `<h2>${title}</h2><svg width="${W}" height="${H}" role="img" aria-label="${title}">${grid}
<line x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}" stroke="#333"/><line x1="${L}" x2="${L}" y1="${T}" y2="${H - B}" stroke="#333"/>
<text x="${(L + W - R) / 2}" y="${H - 8}" font-size="12" text-anchor="middle">seconds since start</text>
<text x="14" y="${(T + H - B) / 2}" font-size="12" transform="rotate(-90 14 ${(T + H - B) / 2})" text-anchor="middle">${yLabel}</text>
<text x="${W - R}" y="${H - B + 16}" font-size="11" text-anchor="end">${xMax.toFixed(0)}</text>${lines}${legend}</svg>`
}

export function renderReport (name: string, agents: number, samples: readonly SwarmSample[], solo: readonly SoloPoint[], summary: Record<string, string>): string {
  const rows = Object.entries(summary).map(([k, v]) => `<tr><th>${k}</th><td>${v}</td></tr>`).join('')
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>AveragingSwarm ${name}: local run</title>
<style>body{font-family:system-ui,sans-serif;margin:2rem;max-width:720px;color:#222}th{text-align:left;padding-right:1rem}td,th{padding:2px 8px}table{border-collapse:collapse}tr:nth-child(odd){background:#f5f5f5}</style></head>
<body><h1>AveragingSwarm <code>${name}</code>: ${agents} agents on this machine</h1>
<table>${rows}</table>
${chart('Held-out loss: the swarm against one agent alone', 'cross-entropy', [
    { label: `swarm (mean of ${agents} agents)`, color: '#1f77b4', points: samples.map(s => [s.t, s.meanHeldOutLoss]) },
    { label: 'single agent, same steps, no averaging', color: '#d62728', points: solo.map(p => [p.t, p.heldOutLoss]) }
  ])}
${chart('Parameter divergence: how far each round moved an agent', 'relative L2 distance', [
    { label: 'mean over agents', color: '#2ca02c', points: samples.map(s => [s.t, s.meanDivergence]) }
  ])}
${chart('Averaging rounds completed (all agents)', 'rounds', [
    { label: 'successful rounds', color: '#9467bd', points: samples.map(s => [s.t, s.rounds]) }
  ])}
</body></html>
`
}
