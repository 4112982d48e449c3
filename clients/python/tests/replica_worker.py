"""One rank of a data-parallel trainer (torch.distributed over gloo, DDP): started by test_replicas.py.

Four ranks in one world of four: ranks 0–1 are pod 0 and 2–3 pod 1, each pod a process group with its own agent.
Each rank trains on batches of its own, DDP keeps a pod's replicas equal, and only a pod's rank 0 talks to the
agent. Writes what the test checks as JSON to ``out``.
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Dict, List

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from averaging_swarm.torch import DiLoCoOptimizer, ParameterAverager


def batch(rank: int, step: int) -> Any:
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(16, 6, generator=g)
    return x, x.sum(dim=1, keepdim=True) * (1 + rank // 2)  # the two pods learn different targets


def flat(params: List[torch.Tensor]) -> List[float]:
    return [float(v) for p in params for v in p.detach().reshape(-1).tolist()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--mode", choices=["diloco", "overlap", "pseudo", "averager", "no-group", "mismatch"], required=True)
    ap.add_argument("--urls", nargs=2, required=True)
    ap.add_argument("--shm", nargs=2, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu", help="where the model lives (cuda: gloo carries its tensors through the CPU)")
    a = ap.parse_args()
    dist.init_process_group("gloo", init_method=f"file://{a.init}", rank=a.rank, world_size=4)
    pods = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates both, in the same order
    pod = a.rank // 2
    group = pods[pod]
    torch.manual_seed(7 + a.rank)  # replicas start apart: the optimizer's first state load makes them equal
    # "mismatch": the second rank of each pod holds another model, which is no replica of the first's.
    model = torch.nn.Linear(6, 2 if a.mode == "mismatch" and a.rank % 2 == 1 else 1).to(a.device)
    out: Dict[str, Any] = {"rank": a.rank}
    if a.mode in ("no-group", "mismatch"):
        try:
            ParameterAverager(model.named_parameters(), url=a.urls[pod], shm_dir=a.shm[pod],
                              process_group=group if a.mode == "mismatch" else None)
        except ValueError as err:
            out["error"] = str(err)
        json.dump(out, open(a.out, "w"))
        return
    params = list(model.parameters())
    if a.mode == "averager":
        avg = ParameterAverager(model.named_parameters(), url=a.urls[pod], shm_dir=a.shm[pod], process_group=group)
        out["leads"] = avg.averager is not None
        sent = flat(params)
        result = avg.step(weight=1, timeout=30)
        out.update(sent=sent, averaged=result.averaged, group_size=result.group_size, params=flat(params),
                   complete=avg.complete)
        avg.close()
        json.dump(out, open(a.out, "w"))
        return
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    opt = DiLoCoOptimizer(model.named_parameters(), inner, local_steps=3, timeout=30, url=a.urls[pod],
                          shm_dir=a.shm[pod], process_group=group, overlap=a.mode == "overlap",
                          average_pseudo_gradients=a.mode == "pseudo")
    out["leads"] = opt.averager is not None
    out["start"] = flat(params)
    sent: List[List[float]] = []
    if opt.averager is not None:
        # Records each outer step's θ' as it goes to the agent (the real method runs; this only copies its output).
        nesterov = opt._nesterov_into_region

        def recording(keep_sent: bool, part: range) -> None:
            nesterov(keep_sent, part)
            sent.append([float(v) for t in opt._theta for v in np.asarray(t).reshape(-1).tolist()])
        opt._nesterov_into_region = recording  # type: ignore[method-assign]
    ddp = DistributedDataParallel(model, process_group=group)
    results = []
    for step in range(9):
        x, y = (t.to(a.device) for t in batch(a.rank, step))
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        outcome = opt.step(loss=loss.item())
        opt.zero_grad()
        if outcome is not None:
            results.append(outcome)
    landed = opt.land()
    if a.mode == "overlap":
        results = [f.result() for f in results]
        out["landed_at_end"] = landed is not None
    out.update(sent=sent, params=flat(params), averaged=[r.averaged for r in results],
               group_sizes=[r.group_size for r in results], outer_kinds=[r.outer for r in results],
               hash=opt.outer_params_hash,
               outer=flat(list(opt.outer_parameters().values())), complete=opt.complete)
    opt.close()
    json.dump(out, open(a.out, "w"))


if __name__ == "__main__":
    try:
        main()
    finally:
        # Left to the interpreter's exit, gloo's threads were destroyed still running, now and then: "terminate
        # called without an active exception" and SIGABRT after the rank had written its results (torch 1.13).
        if dist.is_initialized():
            dist.destroy_process_group()
