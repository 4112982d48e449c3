/**
 * Last line of defence against leaked processes: if the test process dies without running its
 * teardowns (SIGKILL, a crash), a detached watcher kills every process group it had started.
 * The live set of process-group ids (lines "g <pgid>") and temp dirs to remove ("d <path>") is kept
 * in a file the watcher reads after its parent is gone.
 */
import { spawn } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const groups = new Set<number>()
const dirs = new Set<string>()
let file: string | undefined

const WATCHER = `parent=$1; file=$2
while kill -0 "$parent" 2>/dev/null; do sleep 1; done
if [ -f "$file" ]; then
  while read -r kind value; do [ "$kind" = g ] && kill -KILL -- "-$value" 2>/dev/null; done < "$file"
  while read -r kind value; do [ "$kind" = d ] && rm -rf -- "$value"; done < "$file"
  rm -f "$file"
fi`

function startWatcher (): string {
  const dir = join(tmpdir(), 'averaging-swarm-reaper')
  mkdirSync(dir, { recursive: true })
  const path = join(dir, `${process.pid}.pgids`)
  writeFileSync(path, '')
  const child = spawn('bash', ['-c', WATCHER, 'avs-reaper', String(process.pid), path], { detached: true, stdio: 'ignore' })
  child.unref()
  return path
}

function save (): void {
  if (file === undefined) return
  const lines = [...[...groups].map((g) => `g ${g}`), ...[...dirs].map((d) => `d ${d}`)]
  try { writeFileSync(file, lines.map((line) => line + '\n').join('')) } catch {}
}

export function watchGroup (pgid: number): void {
  if (pgid <= 0) return
  file ??= startWatcher()
  groups.add(pgid)
  save()
}

export function unwatchGroup (pgid: number): void {
  if (groups.delete(pgid)) save()
}

/** Removes `dir` if this process dies without cleaning up (newline-free paths only). */
export function watchDir (dir: string): void {
  if (dir.includes('\n')) return
  file ??= startWatcher()
  dirs.add(dir)
  save()
}

export function unwatchDir (dir: string): void {
  if (dirs.delete(dir)) save()
}
