"""A trainer that averages through the agent's sidecar API: the pattern a PyTorch trainer follows.

It fits a linear model y = x @ w + b by SGD on its own shard of synthetic data (each shard sees a
different region of inputs, so a lone trainer overfits its region), and every --period steps
hands its weights to the agent and continues from the swarm's mean (local SGD), using samples
seen since the last step as the weight. A PyTorch trainer uses averaging_swarm.torch instead.

    pip install ./clients/python
    AVS_SIDECAR_PORT=9401 AVS_SHM_DIR=/dev/shm/avs python3 example_numpy_trainer.py --shard 0 --steps 200 --period 20
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from averaging_swarm import DecentralizedAverager

IN, OUT = 8, 2


def true_model() -> tuple:
    rng = np.random.default_rng(1234)
    return rng.normal(size=(IN, OUT)).astype(np.float32), rng.normal(size=(OUT,)).astype(np.float32)


def shard(index: int, n: int, rng: np.random.Generator) -> tuple:
    w, b = true_model()
    x = rng.normal(loc=index * 0.5, scale=1.0, size=(n, IN)).astype(np.float32)
    x[:, index % IN] += 3.0  # non-IID: each shard stresses its own input
    y = x @ w + b + rng.normal(scale=0.05, size=(n, OUT)).astype(np.float32)
    return x, y


def loss(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((x @ w + b - y) ** 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="sidecar API (default http://127.0.0.1:$AVS_SIDECAR_PORT)")
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--period", type=int, default=20, help="local SGD steps between averaging rounds")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds one averaging round may take")
    parser.add_argument("--transport", choices=["shm", "binary"], default=None,
                        help="shared memory (default when AVS_SHM_DIR is set) or binary bodies")
    parser.add_argument("--json", action="store_true", help="print the final weights and figures as one JSON line")
    args = parser.parse_args()

    rng = np.random.default_rng(args.shard)
    x, y = shard(args.shard, 2000, rng)
    held_out = [shard(s, 200, np.random.default_rng(100 + s)) for s in range(4)]
    hx, hy = np.concatenate([h[0] for h in held_out]), np.concatenate([h[1] for h in held_out])

    transport = args.transport or ("shm" if os.environ.get("AVS_SHM_DIR") else "binary")
    averager = DecentralizedAverager({"w": np.zeros((IN, OUT), np.float32), "b": np.zeros((OUT,), np.float32)},
                                     url=args.url, transport=transport)
    averager.load_state_from_peers()  # a restarted trainer continues from the swarm's weights (zeros at first)
    with averager.get_tensors() as t:
        w, b = t["w"].copy(), t["b"].copy()

    rounds, failed, seen = 0, 0, 0
    for step in range(1, args.steps + 1):
        idx = rng.integers(0, len(x), size=args.batch)
        xb, yb = x[idx], y[idx]
        err = xb @ w + b - yb
        w -= args.lr * (2 / args.batch) * (xb.T @ err)
        b -= args.lr * (2 / args.batch) * err.sum(axis=0)
        seen += args.batch
        if step % args.period == 0 or step == args.steps:
            with averager.get_tensors() as t:
                t["w"][...], t["b"][...] = w, b
            result = averager.step(weight=seen, gather={"shard": args.shard, "loss": loss(w, b, x, y)}, timeout=args.timeout)
            if result.averaged:
                with averager.get_tensors() as t:
                    w, b = t["w"].copy(), t["b"].copy()
                rounds, seen = rounds + 1, 0
            else:
                failed += 1
                print(f"step {step}: not averaged: {result.error}", file=sys.stderr)
            if not args.json:
                print(f"step {step}: shard loss {loss(w, b, x, y):.4f}, held-out loss {loss(w, b, hx, hy):.4f}, group of {result.group_size}")

    averager.close()
    summary = {"shard": args.shard, "rounds": rounds, "failed": failed, "heldOutLoss": loss(w, b, hx, hy),
               "w": w.ravel().tolist(), "b": b.tolist()}
    print(json.dumps(summary) if args.json else f"done: {rounds} rounds averaged, {failed} not, held-out loss {summary['heldOutLoss']:.4f}")


if __name__ == "__main__":
    main()
