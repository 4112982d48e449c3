import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'

// bench/perf-buckets.py on a small `perf script` listing written here, whose buckets can be counted by hand.

const run = promisify(execFile)

/** One sample as `perf script -F comm,pid,time,ip,sym,dso` prints it: a header, then the stack, leaf first. */
function sample (comm: string, pid: number, t: number, stack: string[]): string {
  return [`${comm} ${pid} ${t.toFixed(6)}: `, ...stack.map(f => `\t    ffff0000 ${f}`), ''].join('\n')
}

const SENDER = 'JS:^exchangeWith file:///w/dist/agent/allreduce/sender-side.js:141:23 (/tmp/perf-1.map)'
const REDUCER = 'JS:^acceptSender file:///w/dist/agent/allreduce/reducer-side.js:78:23 (/tmp/perf-2.map)'
const APPLY = 'JS:*applyMean file:///w/dist/agent/allreduce/round-context.js:103:14 (/tmp/perf-1.map)'

test('perf-buckets.py: a peer\'s samples in its all-reduce window, by bucket, per round', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'perf-buckets-'))
  try {
    const listing = join(dir, 'run.txt')
    writeFileSync(listing, [
      // Peer 1: its window is 10.0–10.4 s; a start-up sample before it and one after it stay out.
      sample('node', 1, 9.0, ['v8::internal::Scanner::Next (/n/node)', 'JS:^load file:///w/x.js:1:1 (/tmp/perf-1.map)']),
      sample('node', 1, 10.0, ['Builtins_LoadIC (/n/node)', SENDER]),
      sample('node', 1, 10.1, ['__memmove_avx512_unaligned_erms (/lib/libc.so.6)', 'node::crypto::TLSWrap::DoWrite (/n/node)', SENDER]),
      sample('node', 1, 10.2, ['__memmove_avx512_unaligned_erms (/lib/libc.so.6)', APPLY, SENDER]),
      sample('node', 1, 10.3, ['ossl_aes_gcm_encrypt_avx512 (/n/node)', 'SSL_write (/n/node)']),
      sample('node', 1, 10.4, ['_copy_from_iter ([kernel.kallsyms])', 'tcp_sendmsg ([kernel.kallsyms])', SENDER]),
      sample('node', 1, 11.0, ['Builtins_LoadIC (/n/node)', 'JS:^exit file:///w/y.js:1:1 (/tmp/perf-1.map)']),
      // Peer 2: 20.0–20.3 s, with the bench's own check between its rounds.
      sample('node', 2, 20.0, ['JS:wasm-function[1]-1-turbofan (/tmp/perf-2.map)', REDUCER]),
      sample('node', 2, 20.1, ['JS:*maxAbsErrorOf file:///w/dist/bench/lib/protocol.js:78:30 (/tmp/perf-2.map)']),
      sample('node', 2, 20.2, ['handle_softirqs ([kernel.kallsyms])', 'tcp_recvmsg ([kernel.kallsyms])']),
      sample('node', 2, 20.3, ['Builtins_LoadIC (/n/node)', REDUCER]),
      // Not a peer: the coordinator, and another command.
      sample('node', 3, 20.1, ['Builtins_LoadIC (/n/node)']),
      sample('perf', 4, 20.1, ['_copy_from_iter ([kernel.kallsyms])'])
    ].join('\n'))
    // 9 samples in the windows, 2 peers × 3 rounds, 1 ms a sample (1000 Hz): 1.5 ms a round per peer in all.
    const { stdout } = await run('python3', ['bench/perf-buckets.py', listing, '--rounds', '3', '--hz', '1000', '--detail', 'memcpy: asked for by other JavaScript'])
    assert.match(stdout, /^2 peers, windows of 0\.4, 0\.3 s, 9 samples: 1\.5 ms a round per peer$/m)
    const row = (ms: string, share: string, name: string): RegExp => new RegExp(`^\\s+${ms}\\s+${share}%\\s+${name.replace(/[()]/g, '\\$&')}$`, 'm')
    assert.match(stdout, row('0.3', '22.2', 'JavaScript and V8 builtins'))
    assert.match(stdout, row('0.2', '11.1', "memcpy: node's TLS write joining a writev's buffers"))
    assert.match(stdout, row('0.2', '11.1', 'memcpy: asked for by other JavaScript'))
    assert.match(stdout, row('0.2', '11.1', 'crypto: AES-GCM'))
    assert.match(stdout, row('0.2', '11.1', 'kernel: send (tcp_sendmsg)'))
    assert.match(stdout, row('0.2', '11.1', 'kernel: softirq (veth, qdisc, TCP receive)'))
    assert.match(stdout, row('0.2', '11.1', 'wasm kernels'))
    assert.match(stdout, row('0.2', '11.1', "bench's own fill and check"))
    assert.doesNotMatch(stdout, /compiler and parser/, 'the start-up sample is outside the window')
    assert.match(stdout, /asked for by other JavaScript, by the JavaScript frame that asked:\n\s+0\.2\s+JS:\*applyMean agent\/allreduce\/round-context\.js:103:14$/m)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test('perf-buckets.py: a listing without the all-reduce says how to record one', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'perf-buckets-'))
  try {
    const listing = join(dir, 'run.txt')
    writeFileSync(listing, sample('node', 1, 1.0, ['Builtins_LoadIC (/n/node)']))
    await assert.rejects(run('python3', ['bench/perf-buckets.py', listing, '--rounds', '1']), (err: { stderr: string }) => {
      assert.match(err.stderr, /no node process in .* ran the all-reduce \(exchangeWith, acceptSender, writeParts\): record with -g and NODE_OPTIONS=--perf-basic-prof/)
      return true
    })
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
