import { createHash } from 'node:crypto'
import { AveragingError } from '../errors.js'
import { subsetOf, type TensorSchema } from '../schema.js'

/**
 * DiLoCo's outer step, taken by the agent (StepOptions.outer). A DiLoCo trainer's group agrees on
 * the outer parameters θ and momentum m whenever all its members leave the same rounds with them;
 * then the outer step with the group's mean pseudo-gradient, the same on every member, keeps them
 * identical, and a round needs only the pseudo-gradients Δ on the wire (1× the parameters, where
 * averaging θ' and m' moves 2×: SGD with momentum is linear in Δ, so averaging the members' θ', m'
 * is the step with the mean Δ). A group whose members hold different θ, m (a newcomer, a member that
 * missed a round, Moshpit groups that mix earlier groups) averages θ' and m' after each member's
 * step with its own Δ, as the trainer did before; after such a round its members agree again.
 *
 * `step`: the tensors named by StepOptions.names are the members' Δ; `params` and `buffers` name
 * θ and m, pairwise of Δ's shapes. The arithmetic is torch's SGD (dampening 0), in float32, one
 * rounding per operation (Math.fround after each: exact float32 arithmetic, since a double holds
 * a float32 sum or product before its one rounding): m = μ·m + Δ, then θ = θ − lr·(Δ + μ·m) with
 * nesterov, θ = θ − lr·m without; numpy's float32 does the same, bit for bit.
 */
export interface OuterStep {
  /** θ: the registered tensors the step moves, pairwise with StepOptions.names. */
  readonly params: readonly string[]
  /** m: the momentum buffers, pairwise with StepOptions.names. */
  readonly buffers: readonly string[]
  readonly lr: number
  /** μ, torch's SGD `momentum`. */
  readonly momentum: number
  readonly nesterov: boolean
}

/** An outer step checked against the registered tensors: indices in registered order, pairwise. */
export interface OuterPlan {
  readonly gradients: readonly number[]
  readonly params: readonly number[]
  readonly buffers: readonly number[]
  readonly lr: number
  readonly momentum: number
  readonly nesterov: boolean
}

/** What a member's outer round averaged: Δ alone (the group held one θ, m) or θ' and m'. */
export type OuterAveraged = 'pseudo-gradients' | 'parameters'

/**
 * Checks an outer step against the registered tensors; a clear AveragingError names what is wrong.
 * `names` (Δ), `params` and `buffers` are lists of the same length, pairwise of one shape, and no
 * tensor is in two roles.
 */
export function planOuterStep (tensors: readonly TensorSchema[], names: readonly string[] | undefined, outer: OuterStep): OuterPlan {
  if (names === undefined) throw new AveragingError('an outer step needs names: the registered tensors that hold the pseudo-gradients')
  const { lr, momentum, nesterov } = outer
  if (typeof lr !== 'number' || !Number.isFinite(lr) || lr < 0) throw new AveragingError(`outer.lr must be a finite number >= 0, got ${JSON.stringify(lr)}`)
  if (typeof momentum !== 'number' || !Number.isFinite(momentum) || momentum < 0) throw new AveragingError(`outer.momentum must be a finite number >= 0, got ${JSON.stringify(momentum)}`)
  if (typeof nesterov !== 'boolean') throw new AveragingError(`outer.nesterov must be true or false, got ${JSON.stringify(nesterov)}`)
  const index = new Map(tensors.map((t, i) => [t.name, i]))
  const role = (what: string, list: unknown): number[] => {
    if (!Array.isArray(list) || list.length !== names.length) throw new AveragingError(`outer.${what} must list ${names.length} registered tensors, one for each of names, got ${JSON.stringify(list)?.slice(0, 200)}`)
    return list.map(name => {
      const i = typeof name === 'string' ? index.get(name) : undefined
      if (i === undefined) throw new AveragingError(`outer.${what} holds ${JSON.stringify(name)}, which is not a registered tensor`)
      return i
    })
  }
  // subsetOf checks names (registered, none twice); a list covering every tensor leaves no room for θ and m.
  const gradients = subsetOf(tensors, names) === undefined ? [] : names.map(n => index.get(n)!)
  if (gradients.length === 0) throw new AveragingError('an outer step\'s names cannot cover every registered tensor: θ and m are registered tensors too')
  const params = role('params', outer.params)
  const buffers = role('buffers', outer.buffers)
  const seen = new Set<number>()
  for (const i of [...gradients, ...params, ...buffers]) {
    if (seen.has(i)) throw new AveragingError(`tensor "${tensors[i].name}" is named twice in the outer step (names, outer.params and outer.buffers are distinct tensors)`)
    seen.add(i)
  }
  gradients.forEach((g, k) => {
    for (const [what, i] of [['params', params[k]], ['buffers', buffers[k]]] as const) {
      if (!sameShape(tensors[g].shape, tensors[i].shape)) throw new AveragingError(`outer.${what}[${k}] "${tensors[i].name}" has shape [${tensors[i].shape.join(', ')}], but names[${k}] "${tensors[g].name}" has [${tensors[g].shape.join(', ')}]`)
    }
  })
  return { gradients, params, buffers, lr, momentum, nesterov }
}

/** θ and m in one list (a round that averages them). */
export function stateIndices (plan: OuterPlan): number[] {
  return [...plan.params, ...plan.buffers]
}

/**
 * The outer step's key material: members average together only with the same tensors in the same
 * roles. lr, μ and nesterov are not in it (a schedule may differ between members): they are in the
 * declared state (OuterStates.declared), so a group whose members would step differently averages θ', m'.
 */
export function outerSchemaHash (subsetHash: Uint8Array, plan: OuterPlan): Uint8Array {
  const canonical = JSON.stringify({ subset: Buffer.from(subsetHash).toString('hex'), params: plan.params, buffers: plan.buffers })
  return new Uint8Array(createHash('sha256').update(canonical).digest())
}

/** In place: m = μ·m + g, θ = θ − lr·(g + μ·m) (nesterov) or θ − lr·m, each operation rounded to float32. */
export function applyOuterStep (theta: Float32Array, m: Float32Array, g: Float32Array, lr: number, momentum: number, nesterov: boolean): void {
  const mu = Math.fround(momentum)
  const rate = Math.fround(lr)
  const f = Math.fround
  const n = theta.length
  if (nesterov) {
    for (let i = 0; i < n; i++) {
      const gi = g[i]
      const mi = f(f(m[i] * mu) + gi)
      m[i] = mi
      theta[i] = f(theta[i] - f(f(f(mi * mu) + gi) * rate))
    }
  } else {
    for (let i = 0; i < n; i++) {
      const mi = f(f(m[i] * mu) + g[i])
      m[i] = mi
      theta[i] = f(theta[i] - f(mi * rate))
    }
  }
}

/**
 * Which θ, m state each tensor holds: the group id of the last round after which every member
 * left with the same θ and m (a pseudo-gradient round or a θ', m' round landed whole), or none.
 * A member declares it with its outer step's hyperparameters (PeerInfo.base); a group whose
 * state-holding members all declared the same averages Δ alone.
 */
export class OuterStates {
  private readonly ids: Array<Uint8Array | undefined>

  constructor (count: number) {
    this.ids = new Array<Uint8Array | undefined>(count).fill(undefined)
  }

  /** The bytes to declare: empty when θ, m hold no shared state, else a hash of the state and the step's hyperparameters. */
  declared (plan: OuterPlan): Uint8Array {
    const indices = stateIndices(plan)
    const first = this.ids[indices[0]]
    if (first === undefined || indices.some(i => this.ids[i] !== first)) return new Uint8Array(0)
    const hyper = new Float32Array([plan.lr, plan.momentum, plan.nesterov ? 1 : 0])
    return new Uint8Array(createHash('sha256').update(first).update(new Uint8Array(hyper.buffer)).digest())
  }

  /** θ and m now hold what every member of group `groupId` holds. */
  landed (plan: OuterPlan, groupId: Uint8Array): void {
    const id = groupId.slice()
    for (const i of stateIndices(plan)) this.ids[i] = id
  }

  /** θ and m hold a state of our own (a step alone, a part kept local, a failed round, a trainer's write). */
  forget (indices: readonly number[]): void {
    for (const i of indices) this.ids[i] = undefined
  }

  /**
   * The ids as a donor's state download carries them (its metadata `outer`): the distinct ids in hex,
   * and for each tensor the index of its id among them, or -1. Taken with the tensors, under their lock.
   */
  snapshot (): OuterStateSnapshot {
    const ids: string[] = []
    const of = this.ids.map(id => {
      if (id === undefined) return -1
      const hex = Buffer.from(id).toString('hex')
      const at = ids.indexOf(hex)
      return at >= 0 ? at : ids.push(hex) - 1
    })
    return { ids, of }
  }

  /**
   * A newcomer that downloaded a donor's tensors holds the donor's states too: it joins the rounds
   * of its donor's group without first averaging θ' and m'. Anything malformed adopts nothing.
   */
  adopt (value: unknown): boolean {
    if (!isSnapshot(value, this.ids.length)) {
      this.forget(this.ids.map((_x, i) => i))
      return false
    }
    const ids = value.ids.map(hex => new Uint8Array(Buffer.from(hex, 'hex')))
    value.of.forEach((at, i) => { this.ids[i] = at < 0 ? undefined : ids[at] })
    return true
  }
}

export interface OuterStateSnapshot { readonly ids: readonly string[], readonly of: readonly number[] }

function isSnapshot (value: unknown, count: number): value is OuterStateSnapshot {
  if (value == null || typeof value !== 'object') return false
  const { ids, of } = value as Record<string, unknown>
  return Array.isArray(ids) && ids.length <= count && ids.every(h => typeof h === 'string' && /^(?:[0-9a-f]{2}){1,32}$/.test(h)) &&
    Array.isArray(of) && of.length === count && of.every(at => Number.isInteger(at) && at >= -1 && at < ids.length)
}

function sameShape (a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i])
}
