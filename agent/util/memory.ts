import { readFileSync } from 'node:fs'
import { totalmem } from 'node:os'

/**
 * The agent container's memory limit: cgroup v2 `memory.max` when it holds a number, else the
 * machine's memory (a container without a limit can use all of it).
 */
export function containerMemoryBytes (cgroupFile = '/sys/fs/cgroup/memory.max'): number {
  try {
    const text = readFileSync(cgroupFile, 'utf8').trim()
    const limit = Number(text)
    if (text !== 'max' && Number.isFinite(limit) && limit > 0) return Math.min(limit, totalmem())
  } catch {}
  return totalmem()
}
