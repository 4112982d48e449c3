/**
 * Loopback addresses for nodes and pods. Linux routes all of 127.0.0.0/8 to `lo`, so any
 * 127.x.y.z can be bound without configuration. Each cluster claims its own second octet
 * (127.<block>.0.0/16) with an exclusive lock file, so clusters started by concurrent test runs on
 * this machine never hand out the same address. Nodes get 127.<block>.0.<n>; pods get
 * 127.<block>.<1..255>.<1..254>, never reused while the cluster lives.
 */
import { openSync, closeSync, writeSync, readFileSync, rmSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const LOCK_DIR = join(tmpdir(), 'averaging-swarm-loopback-blocks')

function alive (pid: number): boolean {
  try { process.kill(pid, 0); return true } catch (error) { return (error as NodeJS.ErrnoException).code === 'EPERM' }
}

export interface AddressBlock {
  readonly block: number
  nodeAddress: (index: number) => string
  /** A fresh pod address; throws after ~65 000 pods. */
  nextPodAddress: () => string
  release: () => void
}

export function claimAddressBlock (): AddressBlock {
  mkdirSync(LOCK_DIR, { recursive: true })
  // 127.0.x.x and 127.1.x.x are left to the control plane and other loopback users.
  const start = 2 + Math.floor(Math.random() * 250)
  for (let i = 0; i < 252; i++) {
    const block = 2 + ((start - 2 + i) % 252)
    const lock = join(LOCK_DIR, String(block))
    try {
      const fd = openSync(lock, 'wx')
      writeSync(fd, String(process.pid))
      closeSync(fd)
    } catch {
      // Taken: reclaim it only when its owner is gone.
      const owner = Number.parseInt(readFileSync(lock, 'utf8'), 10)
      if (Number.isFinite(owner) && alive(owner)) continue
      rmSync(lock, { force: true })
      i--
      continue
    }
    let third = 1
    let fourth = 0
    return {
      block,
      nodeAddress: (index) => `127.${block}.0.${index + 1}`,
      nextPodAddress: () => {
        fourth++
        if (fourth > 254) { fourth = 1; third++ }
        if (third > 255) throw new Error(`Loopback block 127.${block}.0.0/16 has no pod addresses left.`)
        return `127.${block}.${third}.${fourth}`
      },
      release: () => rmSync(lock, { force: true })
    }
  }
  throw new Error('Every loopback block 127.2-253.0.0/16 is claimed by a running test cluster.')
}
