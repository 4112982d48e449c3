"""The baselines of the digits example, for the same number of inner steps as the swarm's trainers:

- one trainer alone on its non-IID shard (no averaging): what a trainer gets without the swarm;
- one model on all the training data: what the swarm should come close to;
- with --simulate, also 8 trainers with DiLoCo averaged in this process (every outer step one group of 8),
  the swarm's result without agents, handy to tune --local-steps and the learning rates.

It then prints the swarm's held-out accuracies from the latest `npm start -- examples/diloco-digits.yaml`
run (the trainers' final lines in runs/diloco-digits-*/), or from --run <folder>.

    /usr/bin/python3 examples/diloco-digits/compare.py [--run runs/diloco-digits-...] [--simulate]
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from typing import List, Optional

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer import TRAINERS, accuracy, batches, load_split, make_model, shard_indices  # noqa: E402


def train_alone(x: torch.Tensor, y: torch.Tensor, steps: int, lr: float, batch: int, seed: int, data_seed: int) -> torch.nn.Module:
    model = make_model(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    order = batches(len(y), batch, seed=data_seed)
    for _ in range(steps):
        idx = next(order)
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    return model


def simulate_diloco(shards: List[tuple], steps: int, local_steps: int, lr: float, outer_lr: float, outer_momentum: float,
                    batch: int, seed: int) -> List[torch.nn.Module]:
    """DiLoCo with every trainer in one group each outer step (the swarm's best case), weighted by samples."""
    models = [make_model(seed) for _ in shards]
    inner = [torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=1e-4) for m in models]
    orders = [batches(len(y), batch, seed=1000 + k) for k, (_, y) in enumerate(shards)]
    theta = [p.detach().clone() for p in models[0].parameters()]
    momentum = [torch.zeros_like(p) for p in theta]
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(1, steps + 1):
        for k, (x, y) in enumerate(shards):
            idx = next(orders[k])
            inner[k].zero_grad()
            loss_fn(models[k](x[idx]), y[idx]).backward()
            inner[k].step()
        if step % local_steps == 0:
            with torch.no_grad():
                for i, (t, m) in enumerate(zip(theta, momentum)):
                    # Each trainer's Nesterov step on its own pseudo-gradient, then the mean of θ' and m' (linear, so the
                    # same as the step on the mean pseudo-gradient): what DiLoCoOptimizer does through the agents.
                    local = torch.stack([list(mod.parameters())[i] for mod in models]).mean(dim=0)
                    delta = t - local
                    m.mul_(outer_momentum).add_(delta)
                    t.sub_(outer_lr * (delta + outer_momentum * m))
                for mod in models:
                    for p, t in zip(mod.parameters(), theta):
                        p.copy_(t)
    return models


def swarm_accuracies(run: Optional[str]) -> tuple:
    if run is None:
        found = sorted(glob.glob(os.path.join("runs", "diloco-digits-*")), key=os.path.getmtime)
        if not found:
            return None, []
        run = found[-1]
    accs = []
    for log in sorted(glob.glob(os.path.join(run, "*.trainer.log"))):
        with open(log, encoding="utf-8", errors="replace") as f:
            m = re.findall(r"final held-out accuracy ([0-9.]+)", f.read())
        if m:
            accs.append(float(m[-1]))
    return run, accs


def main() -> None:
    p = argparse.ArgumentParser(description="baselines of the digits example")
    p.add_argument("--steps", type=int, default=800, help="inner steps, as the trainers' --steps")
    p.add_argument("--local-steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard", type=int, default=0, help="the shard of the lone trainer")
    p.add_argument("--run", default=None, help="run folder of the swarm (default: the latest runs/diloco-digits-*)")
    p.add_argument("--simulate", action="store_true", help="also simulate the 8 DiLoCo trainers in this process")
    args = p.parse_args()
    torch.set_num_threads(1)

    x_train, y_train, x_test, y_test = load_split()
    xt, yt = torch.from_numpy(x_test), torch.from_numpy(y_test)
    shards = []
    for k in range(TRAINERS):
        rows = shard_indices(y_train, k)
        shards.append((torch.from_numpy(x_train[rows]), torch.from_numpy(y_train[rows])))

    x, y = shards[args.shard]
    alone = accuracy(train_alone(x, y, args.steps, args.lr, args.batch, args.seed, 1000 + args.shard), xt, yt)
    everything = accuracy(train_alone(torch.from_numpy(x_train), torch.from_numpy(y_train), args.steps, args.lr, args.batch,
                                      args.seed, 999), xt, yt)
    alone_all = [accuracy(train_alone(*shards[k], args.steps, args.lr, args.batch, args.seed, 1000 + k), xt, yt)
                 for k in range(TRAINERS)]
    print(f"held-out accuracy after {args.steps} inner steps of batch {args.batch} ({len(y_test)} held-out digits):")
    run, accs = swarm_accuracies(args.run)
    if accs:
        print(f"  {len(accs)} trainers with DiLoCo through the swarm: mean {np.mean(accs):.4f} "
              f"(min {min(accs):.4f}, max {max(accs):.4f}; {run})")
    else:
        print("  the swarm: no finished run found (npm start -- examples/diloco-digits.yaml, then run this again)")
    if args.simulate:
        sim = [accuracy(m, xt, yt) for m in simulate_diloco(shards, args.steps, args.local_steps, args.lr, args.outer_lr,
                                                             args.outer_momentum, args.batch, args.seed)]
        print(f"  {TRAINERS} trainers with DiLoCo simulated in-process (one group of {TRAINERS}): {np.mean(sim):.4f}")
    print(f"  one trainer alone on shard {args.shard}:               {alone:.4f} "
          f"(each shard alone: mean {np.mean(alone_all):.4f}, max {max(alone_all):.4f})")
    print(f"  one model on all the training data:          {everything:.4f}")


if __name__ == "__main__":
    main()
