/** A donor as the rendezvous dictionary lists it. */
export interface DonorCandidate {
  readonly peerId: string
  readonly priority: number
}

/**
 * The order in which a newcomer tries donors. hivemind sorts by priority and every newcomer
 * starts on the same top donor (hivemind issue #169). Here the donors within `margin` of the best
 * priority are shuffled, each drawn with a weight growing with its priority, so newcomers
 * spread over the near-best donors and still lean to the most advanced; the rest follow by
 * priority (random among ties) as fallbacks.
 */
export function orderDonors (candidates: readonly DonorCandidate[], margin: number, random: () => number = Math.random): string[] {
  const usable = candidates.filter(c => Number.isFinite(c.priority))
  if (usable.length === 0) return []
  const best = Math.max(...usable.map(c => c.priority))
  const floor = best - Math.max(0, margin)
  const near = usable.filter(c => c.priority >= floor)
  const rest = usable.filter(c => c.priority < floor)
  const order: string[] = []
  const pool = near.map(c => ({ peerId: c.peerId, weight: 1 + (c.priority - floor) }))
  while (pool.length > 0) {
    const total = pool.reduce((sum, c) => sum + c.weight, 0)
    let pick = random() * total
    let index = pool.length - 1
    for (let i = 0; i < pool.length; i++) {
      pick -= pool[i].weight
      if (pick < 0) { index = i; break }
    }
    order.push(pool[index].peerId)
    pool.splice(index, 1)
  }
  const tieBreak = new Map(rest.map(c => [c.peerId, random()]))
  rest.sort((a, b) => b.priority - a.priority || (tieBreak.get(a.peerId) ?? 0) - (tieBreak.get(b.peerId) ?? 0))
  for (const c of rest) order.push(c.peerId)
  return order
}
