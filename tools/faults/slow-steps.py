#!/usr/bin/env python3
"""Where a chaos run's survivors lost their time.

usage: python3 tools/faults/slow-steps.py RUN_DIR CHAOS_OUTPUT [--over MS]

RUN_DIR is the folder `npm run chaos` names ("logs in ..."): steps.jsonl and each agent's log;
CHAOS_OUTPUT is what the command printed (its fault lines give the victims and times). Prints, per
fault kind, the survivors' step time over the median of steps outside every fault's 15 s, the
survivors' steps whose matchmaking took over --over ms (default 1500) sorted by what their agent's
log says in that step, every group size's waits split at its last member's arrival (the spread
of arrivals, then the time until the group formed), how many groups formed in waves (beside a group
of other agents), and the short groups that assembled at their leader's expiration by what held
their early assembly (matchmaker.ts). The logs say most at `--log-level debug`.
"""
import argparse
import datetime
import json
import os
import re
import statistics
from collections import Counter

WINDOW_MS = 15_000
# The first pattern a step's log lines match names its kind (matchmaker.ts's messages).
KINDS = [
    ('late: its key grouped without it', r'one too many under|formed without us'),
    ('went to or waited under the leftover key', r'leftover key|alone under'),
    ('asked a peer that did not answer', r'did not answer a liveness check|counted silent|closed unanswered'),
]
OTHER = 'no move: waited for arrivals or the expiration'


def run_start_ms(run_dir):
    m = re.search(r'chaos-(\d{4}-\d\d-\d\dT\d\d)-(\d\d)-(\d\d)-(\d{3})Z$', os.path.basename(os.path.normpath(run_dir)))
    if m is None:
        raise SystemExit(f'{run_dir} is not a chaos run folder (chaos-<ISO time>)')
    t = datetime.datetime.strptime(f'{m[1]}:{m[2]}:{m[3]}.{m[4]}', '%Y-%m-%dT%H:%M:%S.%f')
    return t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000


def read_logs(run_dir):
    """Each agent's log lines as (ms, message), and its first peer id's last 6 characters."""
    logs = {}
    for name in sorted(os.listdir(run_dir)):
        if not name.endswith('.log'):
            continue
        rows, first_id = [], None
        for line in open(os.path.join(run_dir, name)):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if first_id is None and 'peerId' in j:
                first_id = j['peerId'][-6:]
            rows.append((j.get('time', 0), j.get('msg', '')))
        logs[name[:-4]] = (first_id, rows)
    return logs


def agent_index(logs, steps):
    """Agent name -> the index steps.jsonl uses: the one peer id every group of an index's first process held is its own."""
    own = {}
    for i in sorted({s['agent'] for s in steps}):
        groups = [set(s['peers']) for s in steps if s['agent'] == i and s['incarnation'] == 1 and s['peers']]
        common = set.intersection(*groups) if groups else set()
        if len(common) == 1:
            own[common.pop()] = i
    index = {name: own[pid] for name, (pid, _) in logs.items() if pid in own}
    if len(index) < len(logs):
        missing = sorted(set(logs) - set(index))
        raise SystemExit(f'could not tell which agent index {", ".join(missing)} had: its first groups share more than one peer')
    return index


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('run_dir')
    ap.add_argument('chaos_output')
    ap.add_argument('--over', type=float, default=1500)
    a = ap.parse_args()
    t0 = run_start_ms(a.run_dir)
    steps = [json.loads(line) for line in open(os.path.join(a.run_dir, 'steps.jsonl'))]
    logs = read_logs(a.run_dir)
    index = agent_index(logs, steps)
    name_of = {i: n for n, i in index.items()}
    faults = []
    for line in open(a.chaos_output):
        m = re.match(r'\s*([\d.]+)s (SIGKILL|SIGSTOP) (\S+)', line)
        if m and m[3] in index:
            faults.append({'at': t0 + float(m[1]) * 1000, 'kind': m[2], 'agent': index[m[3]]})

    def near(s, f):
        return f['at'] <= s['startedAt'] + s['wallMs'] and s['startedAt'] < f['at'] + WINDOW_MS

    mm = lambda s: s.get('matchmakingMs') or 0  # noqa: E731
    quiet = [s for s in steps if s['averaged'] and not any(near(s, f) for f in faults)]
    base = statistics.median(mm(s) for s in quiet) if quiet else 0
    print(f'{len(steps)} steps, {sum(s["averaged"] for s in steps)} averaged, {len(faults)} faults; '
          f'matchmaking median {base:.0f} ms over {len(quiet)} steps outside every fault\'s {WINDOW_MS // 1000} s')
    for kind in ('SIGKILL', 'SIGSTOP'):
        fs = [f for f in faults if f['kind'] == kind]
        if not fs:
            continue
        lost = sum(max(0, mm(s) - base) for f in fs for s in steps if s['agent'] != f['agent'] and near(s, f)) / 1000
        print(f'{kind}: {len(fs)} faults, the survivors\' matchmaking over the median in the {WINDOW_MS // 1000} s after each: '
              f'{lost:.1f} s ({lost / len(fs):.1f} s a fault)')
    counts, seconds = Counter(), Counter()
    for s in steps:
        if mm(s) < a.over or (faults and s['startedAt'] < faults[0]['at']):
            continue
        if any(f['agent'] == s['agent'] and near(s, f) for f in faults):
            continue
        rows = logs.get(name_of.get(s['agent'], ''), (None, []))[1]
        text = '\n'.join(msg for t, msg in rows if s['startedAt'] <= t <= s['startedAt'] + s['wallMs'])
        kind = next((k for k, p in KINDS if re.search(p, text)), OTHER)
        counts[kind] += 1
        seconds[kind] += mm(s) / 1000
    print(f'survivors\' steps with matchmaking over {a.over:.0f} ms, by what their logs say:')
    for kind, n in counts.most_common():
        print(f'  {kind:45} {n:5} steps {seconds[kind]:8.1f} s')
    print_group_waits(steps, mm)
    print_waves(steps, mm)
    print_held(logs)


HELD = re.compile(r'assembled (\d+) of (\d+) at the expiration under (\S+); not early for (.*)$')


def print_held(logs):
    """The leaders' "assembled N of T at the expiration under KEY; not early for WHY" lines (debug level), counted by
    group size, whether KEY is the leftover key (a grid key ends in bits: ".0b0101"; the leftover key in none) and WHY
    (its seconds left out)."""
    held = Counter()
    for _, rows in logs.values():
        for _, msg in rows:
            m = HELD.search(msg)
            if m:
                where = 'leftover key' if m[3].endswith('.0b') else 'its grid key'
                held[(f'{m[1]} of {m[2]}', where, re.sub(r'[\d.]+ s', 'N s', m[4]))] += 1
    if not held:
        return
    print('short groups assembled at their leader\'s expiration, by what held them back earlier:')
    for (size, where, why), n in held.most_common():
        print(f'  {n:5}  {size} under {where}: {why}')


def print_group_waits(steps, mm):
    """Every averaged group's members' waits, split at the start of its last member's step: before it, the spread of
    the arrivals (what blocking trainers carry from round to round); after it, until the group formed (its latest
    member's start plus matchmaking), the time the rule took with everyone in: a quorum waiting out its arrival cutoff."""
    groups = {}
    for s in steps:
        if s['averaged'] and s.get('groupId'):
            groups.setdefault(s['groupId'], []).append(s)
    if not groups:
        return
    by_size = {}
    for members in groups.values():
        last = max(m['startedAt'] for m in members)
        formed = max(m['startedAt'] + mm(m) for m in members)
        row = by_size.setdefault(len(members), [0, 0, 0.0, 0.0])
        row[0] += 1
        row[1] += len(members)
        row[2] += sum(last - m['startedAt'] for m in members) / 1000
        row[3] += len(members) * max(0, formed - last) / 1000
    print('averaged groups, each member\'s wait split at its last member\'s start:')
    for size in sorted(by_size):
        g, n, spread, after = by_size[size]
        print(f'  groups of {size}: {g:5} groups {n:6} member-steps; waiting for their last member {spread:8.1f} s, after it until formed {after:8.1f} s')


WAVE_S = 0.5
WINDOW_S = 30


def print_waves(steps, mm):
    """Whether the swarm steps in waves: the averaged groups that formed within WAVE_S of a group with none of their
    agents (a fault-free run of 8 blocking trainers in groups of 4 forms two such groups at once, 96 % of its groups),
    overall and per WINDOW_S of the run. A swarm that lost its waves forms one group at a time, each waiting for a member
    of the one before (RELIABILITY.md, "Blocking trainers lose their waves")."""
    groups = {}
    for s in steps:
        if s['averaged'] and s.get('groupId'):
            groups.setdefault(s['groupId'], []).append(s)
    formed = sorted((max(m['startedAt'] + mm(m) for m in members), frozenset(m['agent'] for m in members)) for members in groups.values())
    if len(formed) < 2:
        return
    t0 = min(s['startedAt'] for s in steps)
    in_wave = [any(abs(at - other_at) <= WAVE_S * 1000 and not (agents & other) for j, (other_at, other) in enumerate(formed) if j != i)
               for i, (at, agents) in enumerate(formed)]
    windows = {}
    for (at, _), wave in zip(formed, in_wave):
        row = windows.setdefault(int((at - t0) / 1000 // WINDOW_S), [0, 0])
        row[0] += 1
        row[1] += wave
    n, w = len(formed), sum(in_wave)
    print(f'groups formed within {WAVE_S} s of a group of other agents (in waves): {w} of {n} ({100 * w / n:.0f} %); '
          f'per {WINDOW_S} s from its first step: ' + ' '.join(f'{k * WINDOW_S}:{v[1]}/{v[0]}' for k, v in sorted(windows.items())))


if __name__ == '__main__':
    main()
