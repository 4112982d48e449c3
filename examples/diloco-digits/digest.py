"""The figures of a long digits run, from the trainers' logs `npm start` wrote (and, if given, its checkpoints).

For runs ended by --duration (trainers with `--steps 1000000`), with or without --faults, as RELIABILITY.md's
"Fifteen minutes with pods lost too" reports them:

- trainer processes started (a recreated pod starts a second one in the same log), tracebacks, waits for an agent;
- outer steps averaged and taken alone;
- inner steps a minute that reached an outer step, summed over trainer processes (a killed trainer's steps after
  its last outer step are lost, so they are not counted);
- held-out accuracy: the mean of each trainer's last --last outer steps, then mean (min-max) over trainers;
- collapses: --window-second windows after the first --skip seconds in which the mean of every held-out accuracy
  the trainers logged falls below --below (the swarm-wide dips RELIABILITY.md describes), merged into episodes;
- with --checkpoints, the held-out accuracy of the outer parameters θ in the swarm's latest checkpoint.

    npm start -- /tmp/digits-long.yaml --duration 900 --out runs/long --checkpoints runs/long-ckpt
    /usr/bin/python3 examples/diloco-digits/digest.py runs/long --checkpoints runs/long-ckpt/diloco-digits
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import struct
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer import accuracy, load_split, make_model  # noqa: E402

OUTER = re.compile(r"^outer step (\d+): inner step (\d+).*?, (averaged in a group of \d+|alone \(.*?\))"
                   r".*held-out accuracy ([\d.]+), params \S+, ([\d.]+) s$")
STARTED = re.compile(r"inner steps from (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z$")


@dataclass
class Process:
    """One incarnation of a trainer: its outer steps as (inner step, averaged, accuracy, seconds since its start)."""
    start: Optional[float] = None
    steps: List[Tuple[int, bool, float, float]] = field(default_factory=list)


def read_log(path: str) -> Tuple[List[Process], int, int]:
    """A trainer log's processes (each starts with its `shard` line), tracebacks and waits for an agent."""
    processes: List[Process] = []
    tracebacks = waits = 0
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("shard "):
                processes.append(Process())
            elif line.startswith("Traceback"):
                tracebacks += 1
            elif "the agent is back" in line:
                waits += 1
            elif processes:
                m = STARTED.search(line)
                if m:
                    processes[-1].start = datetime.fromisoformat(m.group(1) + "+00:00").timestamp()
                m = OUTER.match(line)
                if m:
                    processes[-1].steps.append((int(m.group(2)), m.group(3).startswith("averaged"),
                                                float(m.group(4)), float(m.group(5))))
    return processes, tracebacks, waits


def run_folder(path: str) -> str:
    """The folder holding *.trainer.log: `path` itself or its one (newest) run subfolder."""
    if glob.glob(os.path.join(path, "*.trainer.log")):
        return path
    subs = sorted(d for d in glob.glob(os.path.join(path, "*")) if glob.glob(os.path.join(d, "*.trainer.log")))
    if not subs:
        sys.exit(f"{path}: no *.trainer.log in it or in a folder under it (the --out folder of `npm start`)")
    return subs[-1]


def checkpoint_accuracy(folder: str) -> Tuple[int, float, str]:
    """Round, held-out accuracy and hash of θ (the `outer/` tensors) in the checkpoint that `folder/latest` names.

    The hash is the trainers' `params` one (DiLoCoOptimizer.outer_params_hash): the start of blake2b-512 over θ's
    float32 bytes, parameter by parameter, so a checkpoint can be matched bit for bit with a trainer's outer step."""
    latest_path = os.path.join(folder, "latest")
    if not os.path.exists(latest_path):
        sys.exit(f"{folder}: no `latest` file: pass the swarm's checkpoint folder (<--checkpoints>/<swarm name>)")
    with open(latest_path) as f:
        latest = json.load(f)
    with open(os.path.join(folder, latest["data"]), "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    model = make_model(0)
    theta_hash = hashlib.blake2b()
    with torch.no_grad():
        for name, p in model.named_parameters():
            entry = header[f"outer/{name}"]
            if entry["dtype"] != "F32":
                sys.exit(f"{folder}: tensor outer/{name} is {entry['dtype']}; this reads float32 checkpoints only")
            lo, hi = entry["data_offsets"]
            theta_hash.update(data[lo:hi])
            p.copy_(torch.from_numpy(np.frombuffer(data[lo:hi], dtype="<f4").reshape(entry["shape"]).copy()))
    _, _, x_test, y_test = load_split()
    return (int(latest["round"]), accuracy(model, torch.from_numpy(x_test), torch.from_numpy(y_test)),
            theta_hash.hexdigest()[:16])


def collapses(points: List[Tuple[float, float]], window: float, skip: float, below: float) -> List[Tuple[float, float]]:
    """Episodes (start, end in seconds) of consecutive windows whose mean accuracy is below `below`."""
    by_window: Dict[int, List[float]] = {}
    for t, acc in points:
        if t >= skip:
            by_window.setdefault(int(t // window), []).append(acc)
    low = sorted(w for w, accs in by_window.items() if np.mean(accs) < below)
    episodes: List[Tuple[float, float]] = []
    for w in low:
        if episodes and w * window <= episodes[-1][1]:
            episodes[-1] = (episodes[-1][0], (w + 1) * window)
        else:
            episodes.append((w * window, (w + 1) * window))
    return episodes


def digest(path: str, args: argparse.Namespace) -> None:
    folder = run_folder(path)
    logs = sorted(glob.glob(os.path.join(folder, "*.trainer.log")))
    per_log = [read_log(p) for p in logs]
    processes = [proc for procs, _, _ in per_log for proc in procs]
    starts = [p.start for p in processes if p.start is not None]
    origin = min(starts) if starts else 0.0
    timed = len(starts) == len(processes)
    ends = [(p.start - origin if p.start is not None else 0.0) + p.steps[-1][3] for p in processes if p.steps]
    minutes = args.minutes or (max(ends) / 60 if ends else 0.0)
    inner = sum(p.steps[-1][0] for p in processes if p.steps)
    averaged = sum(s[1] for p in processes for s in p.steps)
    alone = sum(not s[1] for p in processes for s in p.steps)
    last = [np.mean([s[2] for s in procs[-1].steps[-args.last:]]) for procs, _, _ in per_log if procs and procs[-1].steps]
    print(f"{folder}")
    print(f"  trainers {len(logs)}, processes started {len(processes)}, tracebacks {sum(t for _, t, _ in per_log)}, "
          f"waits for an agent {sum(w for _, _, w in per_log)}")
    print(f"  outer steps averaged {averaged}, alone {alone}")
    print(f"  inner steps a minute (reached an outer step, summed over processes): "
          f"{inner / minutes:.0f} ({inner} in {minutes:.2f} min)" if minutes else "  no outer step logged")
    if last:
        print(f"  held-out accuracy, each trainer's last {args.last} outer steps: {np.mean(last):.3f} "
              f"({min(last):.3f}-{max(last):.3f})")
    points = [((p.start - origin if p.start is not None else 0.0) + s[3], s[2]) for p in processes for s in p.steps]
    episodes = collapses(points, args.window, args.skip, args.below)
    note = "" if timed else " (some processes print no start time: their steps are placed from the run's start)"
    print(f"  collapses (mean accuracy of a {args.window:g}-s window below {args.below:g}, after {args.skip:g} s): "
          f"{len(episodes)}" + "".join(f"{' at' if i == 0 else ','} {a:.0f}-{b:.0f} s" for i, (a, b) in enumerate(episodes))
          + note)
    if args.checkpoints:
        rnd, acc, theta = checkpoint_accuracy(args.checkpoints)
        print(f"  θ in the latest checkpoint (round {rnd}): held-out accuracy {acc:.3f}, params {theta}")


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="--out folders of `npm start` (or the run folders in them)")
    p.add_argument("--last", type=int, default=30, help="outer steps at each trainer's end that its accuracy averages")
    p.add_argument("--minutes", type=float, default=None, help="the run's length (default: its last outer step's time)")
    p.add_argument("--window", type=float, default=5.0, help="seconds per window when counting collapses")
    p.add_argument("--skip", type=float, default=60.0, help="seconds at the start not counted for collapses")
    p.add_argument("--below", type=float, default=0.9, help="a window whose mean accuracy is below this is a collapse")
    p.add_argument("--checkpoints", default=None, help="the swarm's checkpoint folder (holding `latest`): θ's accuracy")
    args = p.parse_args(argv)
    if args.checkpoints and len(args.runs) > 1:
        p.error("--checkpoints goes with one run")
    for run in args.runs:
        digest(run, args)


if __name__ == "__main__":
    main()
