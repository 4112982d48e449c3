"""A trainer that averages through the agent's sidecar API: the pattern a PyTorch trainer follows.

It fits a linear model y = x @ w + b by SGD on its own shard of synthetic data (each shard sees a
different region of inputs, so a lone trainer overfits its region), and every --period steps
hands its weights to the agent and continues from the swarm's mean (local SGD). A PyTorch
trainer does the same with `p.detach().cpu().numpy()` in and `p.data.copy_(torch.from_numpy(a))`
out, using samples seen since the last step as the weight.

    AVS_SIDECAR_PORT=9401 python3 example_numpy_trainer.py --shard 0 --steps 200 --period 20
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from avs_client import AvsClient  # noqa: E402

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
    parser.add_argument("--json", action="store_true", help="print the final weights and figures as one JSON line")
    args = parser.parse_args()

    rng = np.random.default_rng(args.shard)
    x, y = shard(args.shard, 2000, rng)
    held_out = [shard(s, 200, np.random.default_rng(100 + s)) for s in range(4)]
    hx, hy = np.concatenate([h[0] for h in held_out]), np.concatenate([h[1] for h in held_out])

    client = AvsClient(args.url)
    client.register({"w": (IN, OUT), "b": (OUT,)})
    state = client.state()
    if state.origin != "initial":  # a restarted trainer continues from the swarm's weights
        w, b = state.tensors["w"], state.tensors["b"]
    else:
        w, b = np.zeros((IN, OUT), np.float32), np.zeros((OUT,), np.float32)

    rounds, failed, seen = 0, 0, 0
    for step in range(1, args.steps + 1):
        idx = rng.integers(0, len(x), size=args.batch)
        xb, yb = x[idx], y[idx]
        err = xb @ w + b - yb
        w -= args.lr * (2 / args.batch) * (xb.T @ err)
        b -= args.lr * (2 / args.batch) * err.sum(axis=0)
        seen += args.batch
        if step % args.period == 0 or step == args.steps:
            result = client.step({"w": w, "b": b}, weight=seen, gather={"shard": args.shard, "loss": loss(w, b, x, y)}, timeout=args.timeout)
            if result.averaged:
                w, b = result.tensors["w"].copy(), result.tensors["b"].copy()
                rounds, seen = rounds + 1, 0
            else:
                failed += 1
                print(f"step {step}: not averaged: {result.error}", file=sys.stderr)
            if not args.json:
                print(f"step {step}: shard loss {loss(w, b, x, y):.4f}, held-out loss {loss(w, b, hx, hy):.4f}, group of {result.group_size}")

    summary = {"shard": args.shard, "rounds": rounds, "failed": failed, "heldOutLoss": loss(w, b, hx, hy),
               "w": w.ravel().tolist(), "b": b.tolist()}
    print(json.dumps(summary) if args.json else f"done: {rounds} rounds averaged, {failed} not, held-out loss {summary['heldOutLoss']:.4f}")


if __name__ == "__main__":
    main()
