"""The baselines of the digits example, for the same number of inner steps as the swarm's trainers:

- one trainer alone on its non-IID shard (no averaging): what a trainer gets without the swarm;
- one model on all the training data: what the swarm should come close to;
- with --simulate, also 8 trainers with DiLoCo averaged in this process (every outer step one group of 8, or
  random groups of --group-size as the swarm's matchmaking makes them; --local-momentum averages θ alone;
  --overlap-delay D lands each round D inner steps after its outer step, as DiLoCoOptimizer(overlap=True) does;
  --fragments P syncs the parameters in P fragments at staggered inner steps, as DiLoCoOptimizer(fragments=P);
  --wire float16 / float16-values rounds what the all-reduce carries as the agents' float16 does, changes since a
  shared base / values, and prints how far the mean θ lands from the exact mean, against the outer update's norm),
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


def train_alone(x: torch.Tensor, y: torch.Tensor, steps: int, lr: float, batch: int, seed: int, data_seed: int,
                beta2: float = 0.95) -> torch.nn.Module:
    model = make_model(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, beta2), weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    order = batches(len(y), batch, seed=data_seed)
    for _ in range(steps):
        idx = next(order)
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    return model


def simulate_diloco(shards: List[tuple], steps: int, local_steps: int, lr: float, outer_lr: float, outer_momentum: float,
                    batch: int, seed: int, group_size: int = 0, local_momentum: bool = False,
                    group_seed: int = 0, overlap_delay: int = 0, fragments: int = 1,
                    wire: str = "float32", beta2: float = 0.95) -> List[torch.nn.Module]:
    """DiLoCo as DiLoCoOptimizer does it through the agents, in this process.

    Each outer step every trainer takes its own Nesterov step on its own pseudo-gradient (θ', m'), then each group
    replaces its members' θ' (and m', unless ``local_momentum``) by their mean, weighted by samples (equal here).
    ``group_size`` 0 puts all trainers in one group every outer step (the swarm's best case); otherwise the
    trainers are split at random into groups of that size each outer step (as the swarm's matchmaking does).
    With one fixed group and equal weights, local momentum is the same as averaged momentum (the mean of the
    members' m follows the averaged m exactly: the update is linear); they differ when groups change.

    ``overlap_delay`` D > 0 is the overlapped outer step: each model goes on from its own θ' and the round lands
    D inner steps later (at the next outer step, before its Nesterov step, when D >= local_steps), adding
    (mean θ − θ') to the model, so the D inner steps taken meanwhile are kept. 0: the mean θ at once.

    ``fragments`` P > 1 is Streaming DiLoCo's: the parameters split as DiLoCoOptimizer(fragments=P) splits them
    (fragment_bounds), fragment f's outer step (Nesterov, grouping and averaging on its parameters alone) at the
    inner steps s with (s − ⌊f·H/P⌋) % H == 0; with a delay, a round lands at the next fragment's outer step at the
    latest. 1: every outer step over all parameters (the same random groups and numbers as before fragments).

    ``wire`` is what the all-reduce carries: ``float32`` (compression none, exact), ``float16-values`` (each
    member's θ', m' rounded to float16, and the mean rounded again on its way back: the agents' float16 before
    delta rounds), ``float16`` (the agents' float16 today: when every member of the group holds the same base,
    the result of a round they all landed, each sends its change since it in float16 and the group lands base +
    the float16 mean change; otherwise values, as ``float16-values``).
    """
    from averaging_swarm.torch import fragment_bounds  # the split the optimizer makes
    if wire != "float32" and fragments > 1:
        raise ValueError("--wire float16 and float16-values are simulated for whole-model rounds (--fragments 1) only")
    models = [make_model(seed) for _ in shards]
    inner = [torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, beta2), weight_decay=1e-4) for m in models]
    orders = [batches(len(y), batch, seed=1000 + k) for k, (_, y) in enumerate(shards)]
    theta = [[p.detach().clone() for p in models[0].parameters()] for _ in models]
    momentum = [[torch.zeros_like(p) for p in theta[0]] for _ in models]
    rng = np.random.default_rng(group_seed)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = len(models)
    delay = min(overlap_delay, local_steps)
    bounds = fragment_bounds([p.numel() for p in models[0].parameters()], fragments)
    offsets = [f * local_steps // fragments for f in range(fragments)]

    def due(step: int) -> Optional[int]:
        return next((f for f, off in enumerate(offsets) if (step - off) % local_steps == 0), None)

    sent: List[List[torch.Tensor]] = []
    """With overlap, each trainer's θ' of the round in flight (theta then holds the group's mean)."""
    bases: List[Optional[tuple]] = [None] * n
    """wire float16: each trainer's base, (id, copies of θ and m) after the last round its group landed."""
    half = (lambda t: t.half().float())
    wire_error = [0.0, 0.0]
    """Σ‖θ mean as carried − exact mean‖² and Σ‖exact mean − the group's θ before the outer step‖², over rounds."""
    sent_part = range(0)
    land_at = 0

    def land() -> None:
        """model = mean θ + (model − θ') on the round's fragment, in float32 as DiLoCoOptimizer.land() computes it."""
        with torch.no_grad():
            for mod, t, s in zip(models, theta, sent):
                params = list(mod.parameters())
                for i, sp in zip(sent_part, s):
                    params[i].copy_(t[i] + (params[i] - sp))

    for step in range(1, steps + 1):
        for k, (x, y) in enumerate(shards):
            idx = next(orders[k])
            inner[k].zero_grad()
            loss_fn(models[k](x[idx]), y[idx]).backward()
            inner[k].step()
        if sent and step == land_at:
            land()
            sent = []
        fragment = due(step)
        if fragment is not None:
            part = range(*bounds[fragment])
            prior = [[theta[k][i].clone() for i in part] for k in range(n)]
            with torch.no_grad():
                for k, mod in enumerate(models):
                    params = list(mod.parameters())
                    for i in part:
                        t, m, local = theta[k][i], momentum[k][i], params[i]
                        delta = t - local
                        m.mul_(outer_momentum).add_(delta)
                        t.sub_(outer_lr * (delta + outer_momentum * m))
                if delay:
                    sent = [[t[i].clone() for i in part] for t in theta]
                    sent_part = part
                    next_outer = next(s for s in range(step + 1, step + local_steps + 1) if due(s) is not None)
                    land_at = min(step + delay, next_outer)
                order = rng.permutation(n) if group_size else np.arange(n)
                size = group_size or n
                for g, group in enumerate(order[i:i + size] for i in range(0, n, size)):
                    averaged = [theta] if local_momentum else [theta, momentum]
                    ids = {bases[k][0] if bases[k] is not None else None for k in group}
                    delta = wire == "float16" and len(ids) == 1 and None not in ids
                    for s_, state in enumerate(averaged):
                        for i in part:
                            if wire == "float32":
                                mean = torch.stack([state[k][i] for k in group]).mean(dim=0)
                            elif delta:
                                base = bases[group[0]][1][s_][i]
                                mean = base + half(torch.stack([half(state[k][i] - base) for k in group]).mean(dim=0))
                            else:
                                mean = half(torch.stack([half(state[k][i]) for k in group]).mean(dim=0))
                            if s_ == 0:
                                exact = torch.stack([state[k][i] for k in group]).mean(dim=0)
                                before = torch.stack([prior[k][i - part.start] for k in group]).mean(dim=0)
                                wire_error[0] += float(((mean - exact) ** 2).sum())
                                wire_error[1] += float(((exact - before) ** 2).sum())
                            for k in group:
                                state[k][i].copy_(mean)
                    if wire == "float16":
                        for k in group:
                            bases[k] = ((step, g), [[t.clone() for t in state[k]] for state in averaged])
                for k, mod in enumerate(models):
                    params = list(mod.parameters())
                    for j, i in enumerate(part):
                        params[i].copy_(sent[k][j] if sent else theta[k][i])
    if sent:  # the last round lands after the last inner step (the trainer's finish())
        land()
    if wire != "float32":
        print(f"  wire {wire}: the mean θ as carried is off from the exact mean by "
              f"{(wire_error[0] / wire_error[1]) ** 0.5:.2e} of the outer update's norm (all rounds)")
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


def swarm_logged(run: str, pattern: str) -> str:
    """What the run's trainers logged for a setting (the pattern's group), '?' for logs that predate it."""
    kinds = set()
    for log in glob.glob(os.path.join(run, "*.trainer.log")):
        with open(log, encoding="utf-8", errors="replace") as f:
            kinds.update(re.findall(pattern, f.read()))
    return "/".join(sorted(kinds)) or "?"


def swarm_momentum(run: str) -> str:
    """'local' or 'averaged': what the run's trainers logged (trainer.py --local-momentum), '?' for older logs."""
    return swarm_logged(run, r"outer momentum (local|averaged)")


def main() -> None:
    p = argparse.ArgumentParser(description="baselines of the digits example")
    p.add_argument("--steps", type=int, default=800, help="inner steps, as the trainers' --steps")
    p.add_argument("--local-steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--beta2", type=float, default=0.95, help="the inner AdamW's beta2, as the trainers' --beta2")
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard", type=int, default=0, help="the shard of the lone trainer")
    p.add_argument("--run", default=None, help="run folder of the swarm (default: the latest runs/diloco-digits-*)")
    p.add_argument("--simulate", action="store_true", help="also simulate the 8 DiLoCo trainers in this process")
    p.add_argument("--group-size", type=int, default=0,
                   help="with --simulate: random groups of this size each outer step (0: all trainers in one group)")
    p.add_argument("--local-momentum", action="store_true",
                   help="with --simulate: average only the outer parameters, each trainer keeps its own momentum")
    p.add_argument("--group-seed", type=int, default=0, help="with --simulate --group-size: the random groups' seed")
    p.add_argument("--overlap-delay", type=int, default=0,
                   help="with --simulate: overlapped outer steps whose rounds land this many inner steps later (0: none)")
    p.add_argument("--fragments", type=int, default=1,
                   help="with --simulate: Streaming DiLoCo's fragments, each synced every --local-steps at staggered steps")
    p.add_argument("--wire", choices=["float32", "float16", "float16-values"], default="float32",
                   help="with --simulate: what the all-reduce carries (float16: changes since a shared base, as the agents do)")
    p.add_argument("--no-baselines", action="store_true", help="skip the lone-trainer and all-data baselines")
    args = p.parse_args()
    torch.set_num_threads(1)

    x_train, y_train, x_test, y_test = load_split()
    xt, yt = torch.from_numpy(x_test), torch.from_numpy(y_test)
    shards = []
    for k in range(TRAINERS):
        rows = shard_indices(y_train, k)
        shards.append((torch.from_numpy(x_train[rows]), torch.from_numpy(y_train[rows])))

    print(f"held-out accuracy after {args.steps} inner steps of batch {args.batch} ({len(y_test)} held-out digits):")
    run, accs = swarm_accuracies(args.run)
    if accs:
        print(f"  {len(accs)} trainers with DiLoCo through the swarm: mean {np.mean(accs):.4f} "
              f"(min {min(accs):.4f}, max {max(accs):.4f}; {run}; {swarm_momentum(run)} momentum; "
              f"{swarm_logged(run, r'outer steps (overlapped|blocking)')} outer steps; "
              f"fragments {swarm_logged(run, r'fragments ([0-9]+)')})")
    else:
        print("  the swarm: no finished run found (npm start -- examples/diloco-digits.yaml, then run this again)")
    if args.simulate:
        sim = [accuracy(m, xt, yt) for m in simulate_diloco(shards, args.steps, args.local_steps, args.lr, args.outer_lr,
                                                             args.outer_momentum, args.batch, args.seed, args.group_size,
                                                             args.local_momentum, args.group_seed, args.overlap_delay,
                                                             args.fragments, args.wire, args.beta2)]
        groups = f"random groups of {args.group_size}" if args.group_size else f"one group of {TRAINERS}"
        print(f"  {TRAINERS} trainers with DiLoCo simulated in-process ({groups}, "
              f"{'local' if args.local_momentum else 'averaged'} momentum"
              f"{f', rounds landing {args.overlap_delay} inner steps late' if args.overlap_delay else ''}"
              f"{f', {args.fragments} fragments' if args.fragments > 1 else ''}"
              f"{f', wire {args.wire}' if args.wire != 'float32' else ''}): mean {np.mean(sim):.4f} "
              f"(min {min(sim):.4f}, max {max(sim):.4f})")
    if args.no_baselines:
        return
    x, y = shards[args.shard]
    alone = accuracy(train_alone(x, y, args.steps, args.lr, args.batch, args.seed, 1000 + args.shard, args.beta2), xt, yt)
    everything = accuracy(train_alone(torch.from_numpy(x_train), torch.from_numpy(y_train), args.steps, args.lr, args.batch,
                                      args.seed, 999, args.beta2), xt, yt)
    alone_all = [accuracy(train_alone(*shards[k], args.steps, args.lr, args.batch, args.seed, 1000 + k, args.beta2), xt, yt)
                 for k in range(TRAINERS)]
    print(f"  one trainer alone on shard {args.shard}:               {alone:.4f} "
          f"(each shard alone: mean {np.mean(alone_all):.4f}, max {max(alone_all):.4f})")
    print(f"  one model on all the training data:          {everything:.4f}")


if __name__ == "__main__":
    main()
