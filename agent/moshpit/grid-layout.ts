import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { gridGroupBits } from './group-bits.js'

/**
 * The Moshpit grid of an operator-run swarm. The operator publishes how many members the swarm
 * has (spec.replicas) and how many of them are bootstrap agents in a ConfigMap mounted as files
 * (`<dir>/members`, `<dir>/bootstrap`), rewritten when the swarm is scaled, so pods need not roll;
 * every agent places itself on the grid by its rank from its pod name. Without it every agent of a
 * swarm whose initialGroupBits is empty shares ONE key, whose three replicas hold every declaration,
 * and its groups are random rather than a grid that reaches the exact mean in log_g(N) rounds.
 */
export interface Membership {
  readonly members: number
  readonly bootstrap: number
}

/** The membership the operator published in `dir`, or undefined while the files are missing or malformed. */
export function readMembership (dir: string): Membership | undefined {
  const read = (name: string): number | undefined => {
    try {
      const text = readFileSync(join(dir, name), 'utf8').trim()
      return /^\d{1,7}$/.test(text) ? Number(text) : undefined
    } catch {
      return undefined
    }
  }
  const members = read('members')
  const bootstrap = read('bootstrap')
  if (members === undefined || bootstrap === undefined || bootstrap > members) return undefined
  return { members, bootstrap }
}

/**
 * A member's rank, 0 ≤ rank < members: bootstrap agent i (`<swarm>-bootstrap-<i>-0`) is i, regular
 * agent n (`<swarm>-agent-<n>`) is bootstrap + n. Undefined for other names (an auxiliary peer,
 * a process outside the cluster) or a rank the membership does not hold (a pod of a scale-down
 * that has not stopped yet).
 */
export function rankFromPodName (podName: string, m: Membership): number | undefined {
  const bootstrap = /-bootstrap-(\d+)-0$/.exec(podName)
  const agent = /-agent-(\d+)$/.exec(podName)
  const rank = bootstrap != null ? Number(bootstrap[1]) : agent != null ? m.bootstrap + Number(agent[1]) : undefined
  return rank !== undefined && rank < m.members && (bootstrap == null || rank < m.bootstrap) ? rank : undefined
}

/**
 * Reads the membership again each round and says which grid bits the agent should start from.
 * When it cannot place the agent (the files missing or malformed, a pod name without a rank) it
 * says why once, through `warn`, and again only when the reason changes: a user who expects the
 * grid learns why the agent kept one group key.
 */
export class GridLayout {
  private reason: string | undefined

  constructor (
    private readonly dir: string,
    private readonly podName: string,
    private readonly groupSize: number,
    private readonly warn: (line: string) => void = () => {}
  ) {}

  /** The grid bits for the current membership, or undefined when it is unknown or does not place this agent. */
  bits (): string | undefined {
    const m = readMembership(this.dir)
    const rank = m === undefined ? undefined : rankFromPodName(this.podName, m)
    const reason = m === undefined
      ? `the swarm's membership (files members and bootstrap in ${this.dir}) is missing or malformed`
      : rank === undefined ? `pod ${this.podName} has no rank among the swarm's ${m.members} members` : undefined
    if (reason !== undefined && reason !== this.reason) this.warn(`${reason}: this agent stays off the Moshpit grid, under its group key as it stands`)
    this.reason = reason
    return m === undefined || rank === undefined ? undefined : gridGroupBits(rank, m.members, this.groupSize)
  }
}
