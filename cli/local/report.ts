import type { SwarmSample } from './progress.js'

export interface SoloPoint { readonly t: number, readonly heldOutLoss: number }

interface Series { readonly label: string, readonly color: string, readonly points: ReadonlyArray<[number, number]> }

/**
 * Round tick values covering [min, max]: steps of 1, 2 or 5 times a power of ten, about `count`
 * of them, the first at or below min and the last at or above max. With `integer`, steps are at
 * least 1 (counts such as rounds never get fractional ticks).
 */
export function niceTicks (min: number, max: number, count = 5, integer = false): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1]
  if (max < min) [min, max] = [max, min]
  if (max === min) { max = min === 0 ? 1 : min + Math.abs(min) * 0.5; if (min > 0) min = 0 }
  const raw = (max - min) / Math.max(1, count)
  const power = 10 ** Math.floor(Math.log10(raw))
  // The nice step nearest to raw on a log scale (d3's rule): 1, 2, 5 or 10 times the power.
  const ratio = raw / power
  let step = (ratio >= Math.sqrt(50) ? 10 : ratio >= Math.sqrt(10) ? 5 : ratio >= Math.sqrt(2) ? 2 : 1) * power
  if (integer) step = Math.max(1, Math.round(step))
  const first = Math.floor(min / step + 1e-9) * step
  const last = Math.ceil(max / step - 1e-9) * step
  const ticks: number[] = []
  for (let i = 0; first + i * step <= last + step * 1e-9; i++) ticks.push(roundTo(first + i * step, step))
  return ticks
}

/** Removes the floating-point noise of i·step (0.30000000000000004 → 0.3). */
function roundTo (v: number, step: number): number {
  const decimals = Math.max(0, -Math.floor(Math.log10(step)) + 1)
  return Number(v.toFixed(Math.min(decimals, 12)))
}

/** A tick's label: no trailing zeros, thousands kept short (12k). */
export function tickLabel (v: number): string {
  if (v !== 0 && Math.abs(v) >= 10_000) return `${Number((v / 1000).toPrecision(4))}k`
  return String(Number(v.toPrecision(6)))
}

const escape = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')

/**
 * A line chart as inline SVG: the report opens offline, with no script or CDN. The SVG scales to
 * the page's width (viewBox), both axes carry round ticks, and integer series get integer ticks.
 */
function chart (title: string, yLabel: string, series: readonly Series[], opts: { integer?: boolean, fromZero?: boolean } = {}): string {
  const W = 1200; const H = 360; const L = 72; const R = 24; const T = 36; const B = 48
  const all = series.flatMap(s => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y))
  if (all.length === 0) return `<h2>${escape(title)}</h2><p>No data was recorded.</p>`
  const xTicks = niceTicks(0, Math.max(...all.map(([x]) => x), 1), 8)
  const ys = all.map(([, y]) => y)
  const yTicks = niceTicks(opts.fromZero === false ? Math.min(...ys) : Math.min(0, ...ys), Math.max(...ys), 5, opts.integer === true)
  const [x0, x1] = [xTicks[0], xTicks[xTicks.length - 1]]
  const [y0, y1] = [yTicks[0], yTicks[yTicks.length - 1]]
  const x = (v: number): number => L + ((v - x0) / (x1 - x0)) * (W - L - R)
  const y = (v: number): number => H - B - ((v - y0) / (y1 - y0)) * (H - T - B)
  const lines = series.map(s => {
    const pts = s.points.filter(([a, b]) => Number.isFinite(a) && Number.isFinite(b)).map(([a, b]) => `${x(a).toFixed(1)},${y(b).toFixed(1)}`).join(' ')
    const dots = s.points.length <= 2 ? s.points.filter(([a, b]) => Number.isFinite(a) && Number.isFinite(b)).map(([a, b]) => `<circle cx="${x(a).toFixed(1)}" cy="${y(b).toFixed(1)}" r="3" fill="${s.color}"/>`).join('') : ''
    return `<polyline fill="none" stroke="${s.color}" stroke-width="2.5" stroke-linejoin="round" points="${pts}"/>${dots}`
  }).join('')
  const legend = series.map((s, i) => `<rect x="${L + 10 + i * 380}" y="12" width="18" height="4" fill="${s.color}"/><text x="${L + 34 + i * 380}" y="19" font-size="14">${escape(s.label)}</text>`).join('')
  const yGrid = yTicks.map(v => `<line x1="${L}" x2="${W - R}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#e5e5e5"/><text x="${L - 8}" y="${(y(v) + 4).toFixed(1)}" font-size="13" text-anchor="end">${tickLabel(v)}</text>`).join('')
  const xGrid = xTicks.map(v => `<line x1="${x(v).toFixed(1)}" x2="${x(v).toFixed(1)}" y1="${T}" y2="${H - B}" stroke="#f0f0f0"/><line x1="${x(v).toFixed(1)}" x2="${x(v).toFixed(1)}" y1="${H - B}" y2="${H - B + 5}" stroke="#333"/><text x="${x(v).toFixed(1)}" y="${H - B + 20}" font-size="13" text-anchor="middle">${tickLabel(v)}</text>`).join('')
  return `<h2>${escape(title)}</h2><svg viewBox="0 0 ${W} ${H}" width="100%" preserveAspectRatio="xMidYMid meet" role="img" aria-label="${escape(title)}">${xGrid}${yGrid}
<line x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}" stroke="#333"/><line x1="${L}" x2="${L}" y1="${T}" y2="${H - B}" stroke="#333"/>
<text x="${(L + W - R) / 2}" y="${H - 6}" font-size="14" text-anchor="middle">seconds since start</text>
<text x="16" y="${(T + H - B) / 2}" font-size="14" transform="rotate(-90 16 ${(T + H - B) / 2})" text-anchor="middle">${escape(yLabel)}</text>${lines}${legend}</svg>`
}

export function renderReport (name: string, agents: number, samples: readonly SwarmSample[], solo: readonly SoloPoint[], summary: Record<string, string>, workload: 'builtin' | 'sidecar' = 'builtin'): string {
  const rows = Object.entries(summary).map(([k, v]) => `<tr><th>${escape(k)}</th><td>${escape(v)}</td></tr>`).join('')
  const trainerLoss = samples.some(s => Number.isFinite(s.meanTrainerLoss))
  const lossCharts = workload === 'sidecar'
    ? (trainerLoss
        ? chart('Training loss the trainers report (POST /v1/report)', 'loss', [
          { label: `mean over ${agents} trainers`, color: '#1f77b4', points: samples.map(s => [s.t, s.meanTrainerLoss]) }
        ], { fromZero: false })
        : '<h2>Training loss the trainers report</h2><p>No trainer reported its loss (POST /v1/report).</p>')
    : chart('Held-out loss: the swarm against one agent alone', 'cross-entropy', [
      { label: `swarm (mean of ${agents} agents)`, color: '#1f77b4', points: samples.map(s => [s.t, s.meanHeldOutLoss]) },
      { label: 'single agent, same steps, no averaging', color: '#d62728', points: solo.map(p => [p.t, p.heldOutLoss]) }
    ])
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>AveragingSwarm ${escape(name)}: local run</title>
<style>body{font-family:system-ui,sans-serif;margin:1.5rem 2rem;color:#222}h2{margin-top:2rem;font-size:1.2rem}svg{display:block;max-width:100%;height:auto}th{text-align:left;padding-right:1rem}td,th{padding:2px 8px}table{border-collapse:collapse}tr:nth-child(odd){background:#f5f5f5}</style></head>
<body><h1>AveragingSwarm <code>${escape(name)}</code>: ${agents} agents on this machine</h1>
<table>${rows}</table>
${lossCharts}
${chart('Parameter divergence: how far each round moved an agent', 'relative L2 distance', [
    { label: 'mean over agents', color: '#2ca02c', points: samples.map(s => [s.t, s.meanDivergence]) }
  ])}
${chart('Averaging rounds completed (all agents)', 'rounds', [
    { label: 'successful rounds', color: '#9467bd', points: samples.map(s => [s.t, s.rounds]) }
  ], { integer: true })}
</body></html>
`
}
