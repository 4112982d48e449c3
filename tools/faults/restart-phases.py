#!/usr/bin/env python3
"""A chaos run's restarted agents, timed from their process's spawn to their first averaged step.

usage: python3 tools/faults/restart-phases.py RUN_DIR

RUN_DIR is the folder `npm run chaos` names ("logs in ..."): steps.jsonl and each agent's log,
where the harness marks each new process ("--- incarnation N (pid P) at ISO-TIME"). For every
process after an agent's first, prints when each step of its way back came (the median and
quartiles over the restarts, in ms from the spawn), then its first step's group size and
matchmaking time: what a kill costs its victim, phase by phase.
"""
import argparse
import datetime
import glob
import importlib.util
import json
import os
import re
import statistics
from collections import Counter

# The agent's log lines that mark its way back, in the order they come (agent/main.ts and the sidecar API).
PHASES = [
    ('modules loaded, node started', 'agent started'),
    ('bootstrap peers connected', 'bootstrap peers'),
    ('reachability decided', 'reachable'),
    ('sidecar API listening', 'sidecar API listening'),
    ('averager created', 'tensor parts travel'),
    ('state downloaded from a peer', 'downloaded state'),
    ('trainer registered', 'registered its tensors'),
    ('routing table settled', 'routing table settled'),
]
INCARNATION = re.compile(r'--- incarnation (\d+) \(pid \d+\) at (\S+)')


def read_restarts(run_dir):
    """Each agent process after its first: its log, spawn time (ms) and phase times."""
    restarts = []
    for path in sorted(glob.glob(os.path.join(run_dir, 'chaos-*.log'))):
        current = None
        with open(path, encoding='utf-8', errors='replace') as f:
            for line in f:
                m = INCARNATION.match(line)
                if m is not None:
                    spawn = datetime.datetime.fromisoformat(m[2].replace('Z', '+00:00')).timestamp() * 1000
                    current = {'log': os.path.basename(path), 'spawn': spawn, 'phases': {}} if int(m[1]) > 1 else None
                    if current is not None:
                        restarts.append(current)
                    continue
                if current is None or not line.startswith('{'):
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                msg = entry.get('msg', '')
                for name, marker in PHASES:
                    if name not in current['phases'] and marker in msg:
                        current['phases'][name] = entry['time'] - current['spawn']
    return restarts


def load_slow_steps():
    """tools/faults/slow-steps.py as a module: its agent_index tells which steps.jsonl index each log is."""
    spec = importlib.util.spec_from_file_location('slow_steps', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slow-steps.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_steps(restart, agent, steps):
    """The restarted process's first step and first averaged step (steps.jsonl records)."""
    after = sorted((s for s in steps if s['agent'] == agent and s['startedAt'] >= restart['spawn']), key=lambda s: s['startedAt'])
    return (after[0] if after else None), next((s for s in after if s.get('averaged')), None)


def quartiles(values):
    v = sorted(values)
    return statistics.median(v), v[len(v) // 4], v[(3 * len(v)) // 4]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('run_dir')
    args = parser.parse_args()
    steps_path = os.path.join(args.run_dir, 'steps.jsonl')
    if not os.path.isfile(steps_path):
        raise SystemExit(f'{args.run_dir} is not a chaos run folder (it has no steps.jsonl)')
    with open(steps_path, encoding='utf-8') as f:
        steps = [json.loads(line) for line in f if line.strip()]
    restarts = read_restarts(args.run_dir)
    if not restarts:
        print('no agent was restarted in this run')
        return
    rows = {name: [r['phases'][name] for r in restarts if name in r['phases']] for name, _ in PHASES}
    slow_steps = load_slow_steps()
    index = slow_steps.agent_index(slow_steps.read_logs(args.run_dir), steps)
    firsts = [first_steps(r, index[r['log'][:-4]], steps) for r in restarts]
    rows['first step: trainer called'] = [f['startedAt'] - r['spawn'] for r, (f, _) in zip(restarts, firsts) if f is not None]
    rows['first step: done'] = [f['startedAt'] + f['wallMs'] - r['spawn'] for r, (f, _) in zip(restarts, firsts) if f is not None]
    rows['first averaged step: done'] = [a['startedAt'] + a['wallMs'] - r['spawn'] for r, (_, a) in zip(restarts, firsts) if a is not None]
    print(f'{len(restarts)} restarts; ms from the spawn of the new process')
    print(f'{"phase":<30} {"restarts":>8} {"median":>7} {"p25":>7} {"p75":>7}')
    for name, values in rows.items():
        if values:
            median, p25, p75 = quartiles(values)
            print(f'{name:<30} {len(values):>8} {median:>7.0f} {p25:>7.0f} {p75:>7.0f}')
    sizes = Counter(f['groupSize'] if f.get('averaged') else 0 for f, _ in firsts if f is not None)
    matchmaking = [f['matchmakingMs'] for f, _ in firsts if f is not None and 'matchmakingMs' in f]
    print('first step\'s group: ' + ', '.join(f'{n} of {size}' if size > 0 else f'{n} not averaged' for size, n in sorted(sizes.items(), reverse=True)) +
          (f'; its matchmaking median {statistics.median(matchmaking):.0f} ms' if matchmaking else ''))


if __name__ == '__main__':
    main()
