"""Data-parallel trainers in one pod (torchrun with DDP): one agent, and one process that talks to it.

A pod's agent serves one trainer. When that trainer is several processes holding replicas of the same
parameters (DDP keeps them equal by averaging gradients every step), the process group's rank 0 (the *leader*)
registers with the agent and runs the swarm's rounds; the other ranks take what changed from it over
``torch.distributed`` (NCCL between GPUs, gloo on CPUs) at the same calls. Every such call is a collective, as
DDP's own: each rank of the group makes it, in the same order.
"""
from __future__ import annotations

import pickle
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar

import torch
import torch.distributed as dist

_T = TypeVar("_T")


def _portable(error: Optional[BaseException]) -> Optional[BaseException]:
    """The error itself when it pickles (to be raised on every rank), else a RuntimeError with its text."""
    if error is None:
        return None
    try:
        pickle.dumps(error)
        return error
    except Exception:  # noqa: BLE001 - any pickling failure: send the text instead
        return RuntimeError(f"{type(error).__name__}: {error}")


class Replicas:
    """The ranks of ``group``, which hold replicas of the same parameters; rank 0 of the group leads."""

    def __init__(self, group: Any, device: torch.device):
        self.group = group
        self.size = dist.get_world_size(group)
        rank = dist.get_rank(group)
        if rank < 0:
            raise ValueError("this process is not a member of process_group")
        self.leader = rank == 0
        """Whether this process talks to the agent."""
        self.source = dist.get_global_rank(group, 0) if group is not None and group != dist.group.WORLD else 0
        self.device = device
        """Where broadcast tensors live: NCCL moves CUDA tensors only, gloo CPU ones."""

    def check_replicas(self, names: Sequence[str], params: Sequence[torch.Tensor]) -> None:
        """Raises ValueError on every rank unless every rank holds parameters of rank 0's names, shapes and dtypes."""
        if self.size == 1:
            return
        mine = [(n, tuple(p.shape), str(p.dtype)) for n, p in zip(names, params)]
        box: List[Any] = [mine]
        dist.broadcast_object_list(box, src=self.source, group=self.group,
                                   device=self.device if self.device.type == "cuda" else None)
        agree = torch.tensor([1 if box[0] == mine else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(agree, op=dist.ReduceOp.MIN, group=self.group)
        if int(agree.item()) == 0:
            raise ValueError(f"the ranks of process_group hold different parameters (rank 0: {len(box[0])} tensors, "
                             f"this rank: {len(mine)}{'' if box[0] == mine else ', not the same'}): pass the ranks "
                             "that hold replicas of one model")

    def outcome(self, run: Optional[Callable[[], _T]]) -> _T:
        """The leader runs ``run``; every rank returns its value, or raises its error (other ranks pass None)."""
        value: Any = None
        error: Optional[BaseException] = None
        if self.leader:
            assert run is not None
            try:
                value = run()
            except BaseException as err:  # noqa: B036 - raised on every rank below
                error = err
        if self.size > 1:
            box: List[Any] = [(value, _portable(error))]
            dist.broadcast_object_list(box, src=self.source, group=self.group,
                                       device=self.device if self.device.type == "cuda" else None)
            value, shared_error = box[0]
            if not self.leader:
                error = shared_error
        if error is not None:
            raise error
        return value

    def flag(self, value: bool) -> bool:
        """The leader's ``value`` on every rank."""
        if self.size == 1:
            return value
        t = torch.tensor([1 if value else 0], dtype=torch.int32, device=self.device)
        dist.broadcast(t, src=self.source, group=self.group)
        return bool(t.item())

    def params(self, params: Sequence[torch.Tensor]) -> None:
        """Every rank's parameters become the leader's, in place."""
        if self.size == 1:
            return
        with torch.no_grad():
            for p in params:
                if p.device == self.device or self.device.type != "cuda" and not p.is_cuda:
                    dist.broadcast(p.data, src=self.source, group=self.group)
                else:
                    t = p.data.to(self.device)
                    dist.broadcast(t, src=self.source, group=self.group)
                    p.data.copy_(t)

    def tensors(self, leaders: Optional[Sequence[torch.Tensor]], shapes: Sequence[Tuple[int, ...]]) -> List[torch.Tensor]:
        """The leader's float32 CPU tensors (``leaders``; None elsewhere), as float32 CPU tensors on every rank."""
        out: List[torch.Tensor] = []
        for i, shape in enumerate(shapes):
            if self.leader:
                assert leaders is not None
                t = leaders[i].to(self.device)
            else:
                t = torch.empty(shape, dtype=torch.float32, device=self.device)
            if self.size > 1:
                dist.broadcast(t, src=self.source, group=self.group)
            out.append(t.cpu() if not self.leader else leaders[i])  # type: ignore[index]
        return out


def sharded(names: Sequence[str]) -> bool:
    """Whether parameter names are those of a FullyShardedDataParallel model (each rank then holds a shard)."""
    return any("_fsdp_wrapped_module" in n for n in names)


def replicas_for(process_group: Any, names: Sequence[str], params: Sequence[torch.Tensor]) -> Optional[Replicas]:
    """The Replicas of ``process_group`` (None: one process), checked against torch.distributed's state and, a
    collective, against the other ranks' parameters."""
    initialized = dist.is_available() and dist.is_initialized()
    if process_group is None:
        if initialized and dist.get_world_size() > 1:
            raise ValueError(f"torch.distributed runs {dist.get_world_size()} processes, and a pod's agent serves one "
                             "trainer: pass process_group= (the ranks holding replicas of these parameters, e.g. "
                             "torch.distributed.group.WORLD), so that only its rank 0 talks to the agent")
        return None
    if not initialized:
        raise ValueError("process_group was given but torch.distributed is not initialized: call "
                         "torch.distributed.init_process_group first")
    if sharded(names):
        raise ValueError("these are parameters of a FullyShardedDataParallel model, and each rank holds a different "
                         "shard of it: averaging needs replicas (DistributedDataParallel), or the full parameters "
                         "gathered to one process")
    backend = dist.get_backend(process_group)
    device = params[0].device if backend == "nccl" else torch.device("cpu")
    if backend == "nccl" and device.type != "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    replicas = Replicas(process_group, device)
    replicas.check_replicas(names, params)
    return replicas
