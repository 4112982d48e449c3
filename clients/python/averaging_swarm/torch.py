"""PyTorch on top of :class:`~averaging_swarm.DecentralizedAverager`: averaging parameters in place, and DiLoCo.

    avg = ParameterAverager(model.named_parameters())
    avg.step(weight=samples_since_last_step)            # parameters now hold the group's mean

    opt = DiLoCoOptimizer(model.named_parameters(), torch.optim.AdamW(model.parameters()), local_steps=500)
    loss.backward(); opt.step(samples=len(batch), loss=loss.item()); opt.zero_grad()
"""
from __future__ import annotations

import hashlib
import warnings
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch

from .averager import DecentralizedAverager
from .client import AgentError, StepResult

_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _named(named_parameters: Iterable[Tuple[str, torch.Tensor]]) -> Tuple[List[str], List[torch.Tensor]]:
    pairs = list(named_parameters)
    if not pairs:
        raise ValueError("give at least one named parameter")
    for name, p in pairs:
        if p.dtype not in _DTYPE_NAMES:
            raise TypeError(f"parameter {name!r} is {p.dtype}; the agent averages float32, float16 and bfloat16")
    return [n for n, _ in pairs], [p for _, p in pairs]


def region_tensor(view: np.ndarray, dtype: str) -> torch.Tensor:
    """A torch tensor sharing memory with a region view (bfloat16 from its uint16 bits)."""
    if dtype == "bfloat16":
        return torch.from_numpy(view.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(view)


class _HostRegistration:
    """Page-locks the averager's buffer for CUDA copies (cudaHostRegister), so a device copy is one DMA.

    Where registering fails, copies go through a pinned staging tensor instead (``staging`` is then set).
    """

    def __init__(self, averager: DecentralizedAverager, params: List[torch.Tensor]):
        self.registered_ptr: Optional[int] = None
        self.staging: Optional[torch.Tensor] = None
        if not any(p.is_cuda for p in params):
            return
        view = np.frombuffer(averager._buffer, dtype=np.uint8)
        ptr = int(view.ctypes.data)
        try:
            cudart = torch.cuda.cudart()
            err = cudart.cudaHostRegister(ptr, averager.region_bytes, 0)
            if int(getattr(err, "value", err)) == 0:
                self.registered_ptr = ptr
        except (AttributeError, RuntimeError, TypeError):
            pass
        if self.registered_ptr is None:
            self.staging = torch.empty(averager.region_bytes, dtype=torch.uint8, pin_memory=True)

    def copy(self, dst: torch.Tensor, src: torch.Tensor, staging: Optional[torch.Tensor]) -> None:
        """dst <- src where one side lives on the GPU and the other in the region (same dtype and shape)."""
        if not (dst.is_cuda or src.is_cuda) or staging is None:
            dst.copy_(src, non_blocking=dst.is_cuda or src.is_cuda)
        elif src.is_cuda:
            staging.copy_(src, non_blocking=True)
            torch.cuda.current_stream(src.device).synchronize()
            dst.copy_(staging)
        else:
            staging.copy_(src)
            dst.copy_(staging, non_blocking=True)

    def staging_for(self, offset: int, like: torch.Tensor) -> Optional[torch.Tensor]:
        if self.staging is None:
            return None
        n = like.numel() * like.element_size()
        return self.staging[offset:offset + n].view(like.dtype).view(like.shape)

    def close(self) -> None:
        if self.registered_ptr is not None:
            torch.cuda.cudart().cudaHostUnregister(self.registered_ptr)
            self.registered_ptr = None


def _sync(params: List[torch.Tensor]) -> None:
    if any(p.is_cuda for p in params):
        torch.cuda.synchronize()


class ParameterAverager:
    """Averages a model's parameters in place: ``step`` copies them into the region, steps, copies the mean back."""

    def __init__(self, named_parameters: Iterable[Tuple[str, torch.Tensor]], url: Optional[str] = None,
                 shm_dir: Optional[str] = None, transport: str = "shm"):
        self.names, self.params = _named(named_parameters)
        self.averager = DecentralizedAverager(
            {n: (tuple(p.shape), _DTYPE_NAMES[p.dtype]) for n, p in zip(self.names, self.params)},
            url=url, shm_dir=shm_dir, transport=transport)
        with self.averager.get_tensors() as views:
            self._region = [region_tensor(views[s.name], s.dtype) for s in self.averager.specs]
        self._host = _HostRegistration(self.averager, self.params)
        self._staging = [self._host.staging_for(slot.offset, r) for slot, r in zip(self.averager.slots, self._region)]

    @torch.no_grad()
    def step(self, weight: Optional[float] = None, gather: Any = None, timeout: Optional[float] = None) -> StepResult:
        """One round: the parameters then hold the group's weighted mean (unchanged when ``averaged`` is False)."""
        with self.averager.get_tensors():
            for p, r, s in zip(self.params, self._region, self._staging):
                self._host.copy(r, p.detach(), s)
            _sync(self.params)
        result = self.averager.step(weight=weight, gather=gather, timeout=timeout)
        if result.averaged:
            self._copy_into_params()
        return result

    @torch.no_grad()
    def load_state_from_peers(self) -> str:
        """Copies the agent's state into the parameters unless it is ``initial``; returns the origin."""
        origin = self.averager.load_state_from_peers()
        if origin != "initial":
            self._copy_into_params()
        return origin

    def _copy_into_params(self) -> None:
        for p, r, s in zip(self.params, self._region, self._staging):
            self._host.copy(p.data, r, s)
        _sync(self.params)

    @property
    def complete(self) -> bool:
        """See :attr:`DecentralizedAverager.complete`."""
        return self.averager.complete

    def finish(self) -> Dict[str, Any]:
        """This trainer is done: see :meth:`DecentralizedAverager.finish`."""
        return self.averager.finish()

    def close(self) -> None:
        self._host.close()
        self._region.clear()
        self.averager.close()


class DiLoCoOptimizer:
    """DiLoCo: ``local_steps`` inner steps, then one outer Nesterov step on the swarm's averaged pseudo-gradient.

    The averaged tensors are, per parameter, the outer parameters ``outer/<name>`` (θ) and the outer momentum
    ``momentum/<name>`` (m), float32. Each outer step computes Δ = θ − θ_local, m' = μ·m + Δ and
    θ' = θ − lr·(Δ + μ·m') (torch's SGD with ``nesterov=True``) in numpy float32 on the CPU, averages θ' and m'
    weighted by the samples since the last outer step, and loads the mean θ into the model. Members of one group
    leave with bit-identical θ; alone (no group within ``timeout``) a trainer keeps its own θ', m'. Needs the
    agent's averagingAlpha to be 1.
    """

    def __init__(self, named_parameters: Iterable[Tuple[str, torch.Tensor]], inner_optimizer: torch.optim.Optimizer,
                 local_steps: int = 500, outer_lr: float = 0.7, outer_momentum: float = 0.9,
                 timeout: Optional[float] = None, url: Optional[str] = None, shm_dir: Optional[str] = None,
                 transport: str = "shm"):
        if local_steps < 1:
            raise ValueError(f"local_steps is {local_steps}; it must be at least 1")
        self.names, self.params = _named(named_parameters)
        self.inner_optimizer = inner_optimizer
        self.local_steps = local_steps
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum
        self.timeout = timeout
        shapes = {n: tuple(p.shape) for n, p in zip(self.names, self.params)}
        self.averager = DecentralizedAverager(
            {**{f"outer/{n}": (s, "float32") for n, s in shapes.items()},
             **{f"momentum/{n}": (s, "float32") for n, s in shapes.items()}},
            url=url, shm_dir=shm_dir, transport=transport)
        with self.averager.get_tensors() as views:
            self._theta = [views[f"outer/{n}"] for n in self.names]
            self._momentum = [views[f"momentum/{n}"] for n in self.names]
        self._pinned = [torch.empty(tuple(p.shape), dtype=torch.float32, pin_memory=True) if p.is_cuda else None
                        for p in self.params]
        self.local_step = 0
        """Inner steps since construction (or the loaded state dict)."""
        self.outer_step_count = 0
        self.last_result: Optional[StepResult] = None
        self._samples = 0
        self._losses: List[float] = []
        self._reported_error = False
        self.origin = self.load_state_from_peers()

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        """The inner optimizer's parameter groups (what learning-rate schedulers change)."""
        return self.inner_optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, samples: Optional[int] = None, loss: Optional[float] = None) -> Optional[StepResult]:
        """One inner step; every ``local_steps``-th call also runs the outer step and returns its result.

        ``samples`` (default 1, so that weights count inner steps) weights this trainer in the outer average;
        ``loss`` is averaged over the outer step's inner steps and reported to the agent.
        """
        self.inner_optimizer.step()
        self.local_step += 1
        self._samples += 1 if samples is None else int(samples)
        if loss is not None:
            self._losses.append(float(loss))
        if self.local_step % self.local_steps == 0:
            return self.outer_step()
        return None

    @torch.no_grad()
    def outer_step(self) -> StepResult:
        """Nesterov on the pseudo-gradient, the swarm's weighted mean of θ and m, θ into the model."""
        mu, lr = np.float32(self.outer_momentum), np.float32(self.outer_lr)
        with self.averager.get_tensors():
            for p, pinned, theta, m in zip(self.params, self._pinned, self._theta, self._momentum):
                local = self._local_float32(p, pinned)
                nesterov_update(theta, m, local, lr, mu)
        result = self.averager.step(weight=max(self._samples, 1), timeout=self.timeout,
                                    gather={"samples": self._samples})
        self._theta_into_model()
        self.outer_step_count += 1
        self.last_result = result
        self._report()
        return result

    @torch.no_grad()
    def load_state_from_peers(self) -> str:
        """Takes θ and m from the agent (a live peer's for a newcomer) and θ into the model; returns the origin.

        When the agent holds nothing yet (``initial``) θ becomes the model's parameters, m zeros, and the agent
        is given them so that peers downloading state get real parameters.
        """
        origin = self.averager.load_state_from_peers()
        if origin == "initial":
            with self.averager.get_tensors():
                for p, pinned, theta, m in zip(self.params, self._pinned, self._theta, self._momentum):
                    theta[...] = self._local_float32(p, pinned)
                    m[...] = 0
            self.averager.publish_state()
        else:
            self._theta_into_model()
        return origin

    @property
    def outer_params_hash(self) -> str:
        """16 hex digits: the start of blake2b-512 over θ's float32 bytes, parameter by parameter."""
        h = hashlib.blake2b()
        for theta in self._theta:
            h.update(theta.tobytes())
        return h.hexdigest()[:16]

    def outer_parameters(self) -> Dict[str, torch.Tensor]:
        """Copies of θ, by parameter name."""
        return {n: torch.from_numpy(t.copy()) for n, t in zip(self.names, self._theta)}

    def state_dict(self) -> Dict[str, Any]:
        return {
            "inner_optimizer": self.inner_optimizer.state_dict(),
            "local_step": self.local_step,
            "outer_step_count": self.outer_step_count,
            "samples": self._samples,
            "losses": list(self._losses),
            "outer": self.outer_parameters(),
            "momentum": {n: torch.from_numpy(m.copy()) for n, m in zip(self.names, self._momentum)},
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a checkpoint and gives its θ and m to the agent (the model's parameters are the caller's)."""
        self.inner_optimizer.load_state_dict(state["inner_optimizer"])
        self.local_step = int(state["local_step"])
        self.outer_step_count = int(state.get("outer_step_count", 0))
        self._samples = int(state.get("samples", 0))
        self._losses = [float(x) for x in state.get("losses", [])]
        with self.averager.get_tensors():
            for n, theta, m in zip(self.names, self._theta, self._momentum):
                theta[...] = state["outer"][n].detach().cpu().float().numpy()
                m[...] = state["momentum"][n].detach().cpu().float().numpy()
        self.averager.publish_state()

    @property
    def complete(self) -> bool:
        """See :attr:`DecentralizedAverager.complete`: check it at start, a restarted trainer of a finished run exits."""
        return self.averager.complete

    def finish(self) -> Dict[str, Any]:
        """This trainer is done: see :meth:`DecentralizedAverager.finish`. Call it after the last outer step."""
        return self.averager.finish()

    def close(self) -> None:
        self._theta.clear()
        self._momentum.clear()
        self.averager.close()

    def _local_float32(self, p: torch.Tensor, pinned: Optional[torch.Tensor]) -> np.ndarray:
        if pinned is not None:
            pinned.copy_(p.detach(), non_blocking=True)
            torch.cuda.current_stream(p.device).synchronize()
            return pinned.numpy()
        return p.detach().to(torch.float32).numpy()

    def _theta_into_model(self) -> None:
        for p, pinned, theta in zip(self.params, self._pinned, self._theta):
            src = torch.from_numpy(theta)
            if pinned is not None:
                pinned.copy_(src)
                p.data.copy_(pinned, non_blocking=True)
            else:
                p.data.copy_(src)
        _sync(self.params)

    def _report(self) -> None:
        loss = sum(self._losses) / len(self._losses) if self._losses else None
        try:
            self.averager.client.report(loss=loss, samples=self._samples, params_hash=self.outer_params_hash)
        except AgentError as err:
            if not self._reported_error:
                warnings.warn(f"the agent refused a progress report: {err}", RuntimeWarning, stacklevel=3)
                self._reported_error = True
        self._samples = 0
        self._losses = []


def nesterov_update(theta: np.ndarray, m: np.ndarray, local: np.ndarray, lr: np.float32, mu: np.float32) -> None:
    """In place, float32, in this order: Δ = θ − local; m = μ·m + Δ; θ = θ − lr·(Δ + μ·m) (SGD, nesterov=True)."""
    delta = theta - local
    m *= mu
    m += delta
    update = m * mu
    update += delta
    update *= lr
    theta -= update
