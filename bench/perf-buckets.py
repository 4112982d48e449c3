#!/usr/bin/env python3
"""Where a bench round's CPU goes, from a whole-machine `perf` recording, in buckets a reader can act on.

    NODE_OPTIONS=--perf-basic-prof perf record -a -g -F 999 -o run.data -- node dist/bench/links.js --profiles 1g --impl ours --compression none
    perf script -i run.data -F comm,pid,time,ip,sym,dso > run.txt
    python3 bench/perf-buckets.py run.txt --rounds 6 [--hz 999] [--detail 'JS + builtins' ...]

The peers are the node processes whose stacks show the all-reduce (ALLREDUCE_FRAMES); each one's window runs from
its first such sample to its last, so start-up and shut-down stay out, while everything between the rounds stays in
(the bench's own fill and check are a bucket of their own). Every sample of a peer's threads in its window falls in
one bucket: kernel work by the call that led to it, AES-GCM, copies by who asked for them, the wasm kernels, V8's
collector and compiler, the JavaScript itself, the rest of node. Figures are milliseconds per round per peer
(samples ÷ peers ÷ rounds at the sampling rate) and shares of the peers' samples. `--perf-basic-prof` names the
JavaScript frames ("JS:..."); without it they are addresses and fall in 'other native'.
"""
import argparse
import collections
import re
import sys

# Frames only a bench peer running our all-reduce has on its stack.
ALLREDUCE_FRAMES = ('exchangeWith', 'acceptSender', 'writeParts')
BENCH_FRAMES = ('maxAbsErrorOf', 'fillTensor')


def parse(path):
    """The samples of a `perf script -F comm,pid,time,ip,sym,dso` listing: comm, pid, time and the stack, leaf first."""
    samples, cur = [], None
    header = re.compile(r'^(\S.*?)\s+(\d+)\s+([\d.]+):')
    with open(path, encoding='utf-8', errors='replace') as f:
        for line in f:
            if not line.strip():
                if cur is not None:
                    samples.append(cur)
                cur = None
                continue
            if line[0] not in ' \t':
                m = header.match(line)
                cur = {'comm': m.group(1), 'pid': int(m.group(2)), 't': float(m.group(3)), 'stack': []} if m else None
            elif cur is not None:
                parts = line.strip().split(' ', 1)
                cur['stack'].append(parts[1] if len(parts) > 1 else '')
    if cur is not None:
        samples.append(cur)
    return samples


def bucket(stack):
    """The bucket of one sample, by its leaf and, where the leaf is shared (the kernel, memmove), by who called it."""
    whole = ' | '.join(stack)
    leaf = stack[0] if stack else ''
    if any(f in whole for f in BENCH_FRAMES):
        return "bench's own fill and check"
    if 'kernel.kallsyms' in leaf:
        if 'handle_softirqs' in whole or 'net_rx_action' in whole:
            return 'kernel: softirq (veth, qdisc, TCP receive)'
        if 'tcp_sendmsg' in whole:
            return 'kernel: send (tcp_sendmsg)'
        if 'tcp_recvmsg' in whole:
            return 'kernel: receive (tcp_recvmsg)'
        if 'page_fault' in whole:
            return 'kernel: page faults'
        return 'kernel: other'
    if 'aes_gcm' in leaf or 'gcm_ghash' in leaf or 'aesni' in leaf:
        return 'crypto: AES-GCM'
    if 'memmove' in leaf or 'memcpy' in leaf:
        if 'TLSWrap::DoWrite' in whole or 'writevGeneric' in whole or '_writeGeneric' in whole:
            return "memcpy: node's TLS write joining a writev's buffers"
        if 'SSL_read' in whole or 'ssl3_read' in whole:
            return 'memcpy: TLS read (plaintext out of OpenSSL)'
        return 'memcpy: asked for by other JavaScript'
    if 'wasm-function' in leaf:
        return 'wasm kernels'
    if re.search(r'Scavenge|MarkCompact|ConcurrentMarking|MarkingVisitor|Sweeper|Heap::', leaf):
        return "V8's collector"
    if re.search(r'v8::internal::compiler|v8::internal::maglev|Scanner|Parser|Compile', leaf):
        return "V8's compiler and parser"
    if leaf.startswith('Builtins_') or leaf.startswith('JS:'):
        return 'JavaScript and V8 builtins'
    if 'SSL' in leaf or 'ssl3_' in leaf or 'tls_' in leaf or 'tls13' in leaf or 'EVP_' in leaf:
        return 'crypto: TLS records'
    if re.match(r'(c?free|malloc|_int_free|_int_malloc|unlink_chunk)', leaf):
        return 'libc malloc/free'
    return 'other native'


def first_js(stack):
    """The innermost JavaScript frame of a stack, without its file's folders: who asked."""
    for frame in stack:
        if frame.startswith('JS:') and 'wasm-function' not in frame:
            return re.sub(r'file:///\S*/(dist|node_modules)/', '', frame.split(' (')[0])[:110]
    return '(no JavaScript frame)'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('listing', help='perf script -F comm,pid,time,ip,sym,dso output')
    parser.add_argument('--rounds', type=int, required=True, help='rounds each peer ran in its window (warm-up included)')
    parser.add_argument('--hz', type=float, default=999, help='the sampling rate perf record ran at (-F)')
    parser.add_argument('--detail', action='append', default=[], help='a bucket to break down by the JavaScript frame that asked (repeatable)')
    args = parser.parse_args()
    samples = [s for s in parse(args.listing) if s['comm'].startswith('node')]
    windows = {}
    for s in samples:
        if any(f in frame for frame in s['stack'] for f in ALLREDUCE_FRAMES):
            a, b = windows.get(s['pid'], (s['t'], s['t']))
            windows[s['pid']] = (min(a, s['t']), max(b, s['t']))
    if not windows:
        sys.exit(f'no node process in {args.listing} ran the all-reduce ({", ".join(ALLREDUCE_FRAMES)}): record with -g and NODE_OPTIONS=--perf-basic-prof')
    mine = [s for s in samples if s['pid'] in windows and windows[s['pid']][0] <= s['t'] <= windows[s['pid']][1]]
    per = len(windows) * args.rounds / (1000.0 / args.hz)
    counts = collections.Counter(bucket(s['stack']) for s in mine)
    spans = ', '.join(f'{b - a:.1f}' for a, b in windows.values())
    print(f'{len(windows)} peers, windows of {spans} s, {len(mine)} samples: {len(mine) / per:.1f} ms a round per peer')
    print(f'{"ms/round/peer":>14} {"share":>6}  bucket')
    for name, n in counts.most_common():
        print(f'{n / per:14.1f} {100 * n / len(mine):5.1f}%  {name}')
    for wanted in args.detail:
        asked = collections.Counter(first_js(s['stack']) for s in mine if bucket(s['stack']) == wanted)
        print(f'\n{wanted}, by the JavaScript frame that asked:')
        for name, n in asked.most_common(15):
            print(f'{n / per:14.1f}  {name}')


if __name__ == '__main__':
    main()
