"""DiLoCo on scikit-learn's digits: one of 8 trainers, each on a non-IID shard, averaging through its agent.

Every trainer starts from the same initialisation (torch.manual_seed), trains a small MLP with AdamW on its
own shard (mostly 3 of the 10 classes), and every --local-steps inner steps takes one DiLoCo outer step
(Nesterov on the swarm's averaged pseudo-gradient) through the pod's agent. It prints the held-out accuracy
(a fixed split of the digits nobody trains on) after each outer step and at the end.

    npm start -- examples/diloco-digits.yaml          # 8 agents + 8 of these trainers on this machine
    python3 examples/diloco-digits/compare.py         # the same steps alone on one shard, and on all data

--local-momentum averages the outer parameters alone (DiLoCoOptimizer(average_momentum=False), half the bytes);
each trainer then keeps its own outer momentum (clients/python/README.md compares the two).
--overlap overlaps each outer round with the next inner steps (DiLoCoOptimizer(overlap=True)): the outer step returns
at once with the trainer's own θ' in the model, and the round lands (model = mean θ + the inner progress since) at the
first inner step after the agent is done, or before the next outer step at the latest.
--fragments P syncs the parameters in P fragments (Streaming DiLoCo, DiLoCoOptimizer(fragments=P)): fragment f every
--local-steps inner steps at offset f·H/P, one round over that fragment's outer parameters and momentum only.
--average-parameters averages θ' and m' in every round (DiLoCoOptimizer(average_pseudo_gradients=False)); by default a
group whose members hold one θ and m averages the pseudo-gradients alone, the agent taking the outer step (1x the
parameters per outer step instead of 2x there).

Shard: --shard, else $AVS_SHARD_INDEX, else derived from $AVS_POD_NAME (the YAML gives the trainer its pod
name): <swarm>-bootstrap-<i>-0 is shard i, <swarm>-agent-<n> is shard --bootstrap-replicas + n.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from concurrent.futures import Future
from typing import List, Optional, Tuple

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

TRAINERS = 8
CLASSES = 10
MAJOR_SHARE = 0.9
"""Share of each class that goes to the 2 or 3 trainers owning it; the rest is spread over all trainers."""


def owned_classes(shard: int, trainers: int = TRAINERS) -> List[int]:
    """The 3 classes trainer `shard` mostly sees: consecutive classes from shard*10//8, so every class has 2-3 owners."""
    first = shard * CLASSES // trainers
    return [(first + j) % CLASSES for j in range(3)]


def load_split(seed: int = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits (bundled with scikit-learn, no download), pixels scaled to [0, 1]; a fixed stratified 25 % held out."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    return x_train, y_train, x_test, y_test


def shard_indices(y_train: np.ndarray, shard: int, trainers: int = TRAINERS, seed: int = 0) -> np.ndarray:
    """Training rows of one trainer: MAJOR_SHARE of each class split among its owners, the rest among all trainers."""
    rng = np.random.default_rng(seed)
    mine: List[np.ndarray] = []
    for c in range(CLASSES):
        rows = rng.permutation(np.flatnonzero(y_train == c))
        major = int(round(len(rows) * MAJOR_SHARE))
        owners = [k for k in range(trainers) if c in owned_classes(k, trainers)]
        if shard in owners:
            mine.append(np.array_split(rows[:major], len(owners))[owners.index(shard)])
        mine.append(np.array_split(rows[major:], trainers)[shard])
    return np.sort(np.concatenate(mine))


def make_model(seed: int) -> torch.nn.Module:
    """The same initial weights on every trainer: the seed is the swarm's, not the shard's."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def batches(n: int, batch: int, seed: int):
    """Endless minibatch indices over n rows, reshuffled each epoch."""
    g = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(n, generator=g)
        for i in range(0, n - batch + 1, batch):
            yield perm[i:i + batch]


def shard_from_env(bootstrap_replicas: int) -> Optional[int]:
    if os.environ.get("AVS_SHARD_INDEX"):
        return int(os.environ["AVS_SHARD_INDEX"])
    pod = os.environ.get("AVS_POD_NAME", "")
    m = re.search(r"-bootstrap-(\d+)-0$", pod)
    if m:
        return int(m.group(1))
    m = re.search(r"-agent-(\d+)$", pod)
    if m:
        return bootstrap_replicas + int(m.group(1))
    return None


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=800, help="inner steps in all")
    p.add_argument("--local-steps", type=int, default=20, help="inner steps between outer steps (DiLoCo's H)")
    p.add_argument("--lr", type=float, default=2e-3, help="inner AdamW learning rate")
    p.add_argument("--beta2", type=float, default=0.95,
                   help="the inner AdamW's beta2 (0.95, as LLM recipes use; torch's default is 0.999): at a shard loss near 0, "
                        "with 0.999 a sudden larger gradient can blow up the inner steps and the outer momentum carries it to "
                        "the swarm (RELIABILITY.md, \"Fifteen minutes with pods lost too\")")
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0, help="initialisation seed, the same on every trainer")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds an outer step waits for a group")
    p.add_argument("--shard", type=int, default=None)
    p.add_argument("--trainers", type=int, default=TRAINERS)
    p.add_argument("--bootstrap-replicas", type=int, default=2, help="spec.bootstrap.replicas, to number shards from pod names")
    p.add_argument("--local-momentum", action="store_true",
                   help="average only the outer parameters; each trainer keeps its own outer momentum "
                        "(DiLoCoOptimizer(average_momentum=False): 1x the parameters per outer step instead of 2x)")
    p.add_argument("--overlap", action="store_true",
                   help="overlap each outer round with the next inner steps (DiLoCoOptimizer(overlap=True)); "
                        "the round lands during those steps, keeping the progress made meanwhile")
    p.add_argument("--fragments", type=int, default=1,
                   help="Streaming DiLoCo's fragments (DiLoCoOptimizer(fragments=P)): each outer step syncs one of P "
                        "parts of the parameters, each part every --local-steps inner steps, at staggered steps")
    p.add_argument("--average-parameters", action="store_true",
                   help="average the outer parameters and momentum in every round, also where a group holds one outer "
                        "state (DiLoCoOptimizer(average_pseudo_gradients=False)); by default such a group averages the "
                        "pseudo-gradients alone")
    args = p.parse_args(argv)
    if not 0 <= args.beta2 < 1:
        p.error(f"--beta2 must be in [0, 1), got {args.beta2}")
    return args


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def main() -> None:
    args = parse_args()
    shard = args.shard if args.shard is not None else shard_from_env(args.bootstrap_replicas)
    if shard is None or not 0 <= shard < args.trainers:
        sys.exit(f"no shard in 0..{args.trainers - 1}: pass --shard or set AVS_SHARD_INDEX or AVS_POD_NAME (got {shard})")
    torch.set_num_threads(1)  # 8 trainers share this machine's cores with their agents
    from averaging_swarm.torch import DiLoCoOptimizer  # noqa: E402  (after the argument checks: a clear error first)

    dev = device()
    x_train, y_train, x_test, y_test = load_split()
    rows = shard_indices(y_train, shard, args.trainers)
    x, y = torch.from_numpy(x_train[rows]).to(dev), torch.from_numpy(y_train[rows]).to(dev)
    xt, yt = torch.from_numpy(x_test).to(dev), torch.from_numpy(y_test).to(dev)
    counts = np.bincount(y_train[rows], minlength=CLASSES)
    print(f"shard {shard}: {len(rows)} rows, classes {owned_classes(shard, args.trainers)} mostly "
          f"(per class {counts.tolist()}); held-out {len(y_test)} rows; device {dev}", flush=True)

    model = make_model(args.seed).to(dev)
    inner = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, args.beta2), weight_decay=1e-4)
    opt = DiLoCoOptimizer(model.named_parameters(), inner, local_steps=args.local_steps, outer_lr=args.outer_lr,
                          outer_momentum=args.outer_momentum, timeout=args.timeout,
                          average_momentum=not args.local_momentum, overlap=args.overlap, fragments=args.fragments,
                          average_pseudo_gradients=False if args.average_parameters else None)
    started = time.time()
    print(f"state from the agent: {opt.origin}; outer momentum {'local' if args.local_momentum else 'averaged'}; "
          f"rounds average {'the pseudo-gradients where the group holds one outer state, else ' if opt.average_pseudo_gradients else ''}"
          f"the outer parameters; "
          f"outer steps {'overlapped' if args.overlap else 'blocking'}; fragments {args.fragments} "
          f"(parameters {opt.fragment_bounds}, offsets {opt.fragment_offsets}); "
          f"inner steps from {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(started))}.{int(started % 1 * 1000):03d}Z",
          flush=True)
    if opt.complete:
        # A cluster restarts a container that exited 0: this trainer already finished the run.
        print("the run is complete already (this trainer finished before); nothing to do", flush=True)
        opt.close()
        return
    loss_fn = torch.nn.CrossEntropyLoss()
    averaged = 0
    last_averaged = None
    order = batches(len(rows), args.batch, seed=1000 + shard)
    in_flight: Optional[Tuple[int, int]] = None
    """With --overlap: (outer step, inner step) of the round in flight."""

    def log(result, outer: int, step: int, when: str) -> None:
        """One line per outer round, once its result is in the model (no round in flight: nothing blocks)."""
        nonlocal averaged, last_averaged
        averaged += int(bool(result.averaged))
        if result.averaged:
            last_averaged = opt.outer_parameters()
        print(f"outer step {outer}: inner step {step}{when}, loss {loss.item():.4f}, "
              f"{'averaged in a group of ' + str(result.group_size) if result.averaged else 'alone (' + str(result.error) + ')'}"
              f"{' (changes since a shared base)' if result.delta else ''}"
              f"{' (pseudo-gradients)' if result.outer == 'pseudo-gradients' else ''}, "
              f"held-out accuracy {accuracy(model, xt, yt):.4f}, params {opt.outer_params_hash}, "
              f"{time.time() - started:.1f} s", flush=True)

    for step in range(1, args.steps + 1):
        idx = next(order).to(dev)
        loss = loss_fn(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        next_is_outer = any((opt.local_step + 1 - off) % args.local_steps == 0 for off in opt.fragment_offsets)
        if in_flight is not None and next_is_outer:
            # This step takes the next outer step, which would land the round first: land it here, to log it.
            log(opt.land(), in_flight[0], in_flight[1], f", landed before inner step {step} (blocking)")
            in_flight = None
        result = opt.step(samples=len(idx), loss=loss.item())
        if in_flight is not None and not opt.round_in_flight:  # landed by this inner step: the agent was done
            log(opt.last_result, in_flight[0], in_flight[1], f", landed at inner step {step}")
            in_flight = None
        if isinstance(result, Future):
            in_flight = (opt.outer_step_count, step)
        elif result is not None:
            log(result, opt.outer_step_count, step, "")
    if in_flight is not None:
        log(opt.land(), in_flight[0], in_flight[1], ", landed after the last inner step")
    if opt.last_result is not None and not opt.last_result.averaged and last_averaged is not None:
        # The last outer step found no group (the others had finished): end on the swarm's last averaged outer
        # parameters rather than on this trainer's own, shard-biased outer step.
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(last_averaged[name].to(dev))
        print("last outer step found no group: the model ends on the last averaged outer parameters", flush=True)
    acc = accuracy(model, xt, yt)
    print(f"final held-out accuracy {acc:.4f} (shard {shard}, {args.steps} inner steps, {opt.outer_step_count} outer steps, "
          f"{averaged} averaged, {'local' if args.local_momentum else 'averaged'} momentum, "
          f"{'overlapped' if args.overlap else 'blocking'} outer steps, fragments {args.fragments}, "
          f"{time.time() - started:.0f} s)", flush=True)
    # With spec.completion.onTrainerExit the agent's run ends here, once its last averaged round is checkpointed.
    done = opt.finish()
    print(f"agent: complete {done['complete']}, final checkpoint round {done.get('checkpointRound', '-')}", flush=True)
    opt.close()


if __name__ == "__main__":
    main()
