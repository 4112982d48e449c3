/**
 * The Moshpit grid rule alone, without a network: what the agent's grouping and span rules reach
 * when every all-reduce is exact, so that bench:moshpit-scale can show how much of its distance to
 * the mean the rule itself leaves under crashes (and how much our agents add).
 *
 * Per round: peers sharing a group key form groups (a key holding more than g peers is cut into
 * chunks of g in random order, the rest a smaller group, as the matchmaker does); each group's
 * members are in random order (the leader's shuffle), which decides the spans they reduce; every
 * span becomes the exact float64 mean of the survivors' values. Victims crash once their group
 * assembled and before sending anything: the survivors average every span among themselves, the
 * victim's too, as the agent's span repair does (agent/allreduce/repair.ts); with `repair: false`
 * every survivor keeps the victim's span as it was (hivemind's rule, and ours before). Survivors then take their next bits from a
 * random group id (`nextGroupBits`, the agent's own). A peer alone under its key keeps its value and
 * its bits (the agent would try the swarm's leftover key, not modelled: rare with few crashes).
 *
 * With `grouping: 'random'` the grid is ignored: each round the live peers are shuffled and cut into
 * groups of g (the rest a smaller group), everything else as above. That is the baseline the
 * Moshpit paper sets its grid against, and what issue 19's aim at 10 % crashes compares with.
 */
import { gridGroupBits, nextGroupBits } from '../../agent/moshpit/group-bits.js'
import { assignParts, elementsPerPart, planParts } from '../../agent/allreduce/partition.js'
import { spanFractions } from '../../agent/allreduce/load-balancing.js'
import { noneCodec } from '../../agent/compression/none.js'
import { AVERAGING_PARAMETERS } from '../../api/averaging-parameters.js'
import { seededRandom, shuffle } from '../../agent/util/random.js'
import { distanceToMean } from './moshpit-math.js'

export interface RuleOptions {
  readonly peers: number
  readonly groupSize: number
  /** Values per peer, uniform in [-1, 1). */
  readonly elements: number
  readonly rounds: number
  readonly seed: number | string
  /** Victims per round, drawn uniformly from the live peers: a count, or one from the live count. Default 0. */
  readonly crashesPerRound?: number | ((live: number) => number)
  /**
   * Elements per streamed part. Default: the agent's default part size in float32 (16384), so a
   * small tensor is ONE part, reduced whole by the group's first member: its crash leaves the
   * whole group unaveraged, another member's crash none of it.
   */
  readonly elementsPerPart?: number
  /** Whether the survivors average a victim's span after the round (the agent's span repair). Default true. */
  readonly repair?: boolean
  /** 'grid' (default): groups by the agent's group keys; 'random': fresh random groups of g every round. */
  readonly grouping?: 'grid' | 'random'
}

export interface RuleRound {
  readonly round: number
  /** Peers alive after the round, and those that crashed in it. */
  readonly live: number
  readonly crashed: number
  /** Against the live peers' mean after the round, as RoundStats measures ours (distanceToMean). */
  readonly deviation: number
  readonly variance: number
}

export const DEFAULT_ELEMENTS_PER_PART = elementsPerPart(AVERAGING_PARAMETERS.partSizeBytes.default, noneCodec.bytesPerElement)

/** Runs `rounds` rounds of the rule from seeded vectors; the same options give the same figures. */
export function simulateGridRule (o: RuleOptions): RuleRound[] {
  const random = seededRandom(`${o.seed}:grid-rule`)
  const g = o.groupSize
  const x = Array.from({ length: o.peers }, () => Float64Array.from({ length: o.elements }, () => random() * 2 - 1))
  const bits = Array.from({ length: o.peers }, (_, rank) => gridGroupBits(rank, o.peers, g))
  const spans = spanTable(o.elements, o.elementsPerPart ?? DEFAULT_ELEMENTS_PER_PART)
  let live = Array.from({ length: o.peers }, (_, rank) => rank)
  const out: RuleRound[] = []
  for (let round = 1; round <= o.rounds; round++) {
    const wanted = typeof o.crashesPerRound === 'function' ? o.crashesPerRound(live.length) : o.crashesPerRound ?? 0
    const victims = new Set(shuffle(live, random).slice(0, Math.min(live.length, wanted)))
    const byKey = new Map<string, number[]>()
    for (const rank of live) {
      // Random grouping: everyone under one key, cut into groups of g in random order below.
      const bitsOf = o.grouping === 'random' ? '' : bits[rank]
      const key = byKey.get(bitsOf)
      if (key === undefined) byKey.set(bitsOf, [rank]); else key.push(rank)
    }
    for (const members of byKey.values()) {
      const order = shuffle(members, random)
      for (let start = 0; start < order.length; start += g) {
        const group = order.slice(start, start + g)
        if (group.length < 2) continue
        averageGroup(group, victims, x, spans(group.length), o.repair ?? true)
        const groupId = Uint8Array.from({ length: 20 }, () => Math.floor(random() * 256))
        group.forEach((rank, index) => { bits[rank] = nextGroupBits(bits[rank], groupId, index, group.length, g) })
      }
    }
    live = live.filter(rank => !victims.has(rank))
    out.push({ round, live: live.length, crashed: victims.size, ...distanceToMean(live.map(rank => x[rank])) })
  }
  return out
}

/** Each member's span [from, to) of the elements: the parts the agent's plan gives it (equal bandwidths, all 'node'). */
function spanTable (elements: number, perPart: number): (members: number) => Array<[number, number]> {
  const parts = planParts([elements], perPart)
  const cache = new Map<number, Array<[number, number]>>()
  return (members) => {
    let spans = cache.get(members)
    if (spans === undefined) {
      const counts = assignParts(parts, spanFractions(new Array<null>(members).fill(null), new Array<'node'>(members).fill('node')))
      spans = []
      let next = 0
      for (const count of counts) {
        const from = count === 0 ? 0 : parts[next].offset
        const to = count === 0 ? 0 : parts[next + count - 1].offset + parts[next + count - 1].length
        spans.push([from, to])
        next += count
      }
      cache.set(members, spans)
    }
    return spans
  }
}

/** One group's all-reduce: each live member's span becomes the survivors' exact mean; a victim's span too with repair, else it stays as it was. */
function averageGroup (group: readonly number[], victims: ReadonlySet<number>, x: Float64Array[], spans: ReadonlyArray<[number, number]>, repair: boolean): void {
  const survivors = group.filter(rank => !victims.has(rank))
  if (survivors.length < (repair ? 2 : 1)) return
  group.forEach((reducer, index) => {
    if (victims.has(reducer) && !repair) return
    const [from, to] = spans[index]
    for (let e = from; e < to; e++) {
      let sum = 0
      for (const rank of survivors) sum += x[rank][e]
      const mean = sum / survivors.length
      for (const rank of survivors) x[rank][e] = mean
    }
  })
}

/** After each round, the median deviation and variance of `sims` simulations seeded `${seed}:0`, `${seed}:1`, …: the reference a run is set beside. */
export function ruleMedians (o: Omit<RuleOptions, 'seed'>, sims: number, seed: number | string): Array<{ round: number, deviation: number, variance: number }> {
  const runs = Array.from({ length: sims }, (_, k) => simulateGridRule({ ...o, seed: `${seed}:${k}` }))
  return Array.from({ length: o.rounds }, (_, k) => ({
    round: k + 1,
    deviation: median(runs.map(r => r[k].deviation)),
    variance: median(runs.map(r => r[k].variance))
  }))
}

function median (values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const m = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[m] : (sorted[m - 1] + sorted[m]) / 2
}
