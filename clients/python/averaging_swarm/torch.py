"""PyTorch on top of :class:`~averaging_swarm.DecentralizedAverager`: averaging parameters in place, and DiLoCo.

    avg = ParameterAverager(model.named_parameters())
    avg.step(weight=samples_since_last_step)            # parameters now hold the group's mean

    future = avg.step(weight=samples, wait=False)       # overlapped: the round runs while training goes on
    ...                                                 # local steps on the parameters
    avg.land()                                          # parameters += group mean − snapshot sent

    opt = DiLoCoOptimizer(model.named_parameters(), torch.optim.AdamW(model.parameters()), local_steps=500)
    loss.backward(); opt.step(samples=len(batch), loss=loss.item()); opt.zero_grad()
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
import warnings
from concurrent.futures import Future
from typing import Any, Dict, Iterable, List, Literal, Optional, Tuple, Union, overload

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
    """Averages a model's parameters in place through the pod's agent.

    ``step()`` copies the parameters into the region, runs one round and copies the group's weighted mean back.
    ``step(wait=False)`` overlaps the round with training, like hivemind's ``DecentralizedAverager.step(wait=False)``:
    it copies the parameters into the region (the *snapshot sent*), starts the agent's round in a background
    thread and returns a :class:`concurrent.futures.Future` at once; the trainer goes on taking local steps on
    its parameters, and :meth:`land` (or the next :meth:`step`) adds ``group mean − snapshot sent`` to them, so
    the local steps taken meanwhile are kept (delayed averaging). While a round is in flight the agent owns the
    region: touch it (``averager.get_tensors()``) only after :meth:`land`.
    """

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
        self._pending: Optional["Future[StepResult]"] = None
        self._thread: Optional[threading.Thread] = None
        self._sent: List[torch.Tensor] = []
        """CPU copies of the region as sent by the round in flight, in the parameters' dtypes."""

    @overload
    def step(self, weight: Optional[float] = None, gather: Any = None, timeout: Optional[float] = None,
             wait: Literal[True] = True) -> StepResult: ...

    @overload
    def step(self, weight: Optional[float] = None, gather: Any = None, timeout: Optional[float] = None, *,
             wait: Literal[False]) -> "Future[StepResult]": ...

    @overload
    def step(self, weight: Optional[float] = None, gather: Any = None, timeout: Optional[float] = None,
             wait: bool = True) -> Union[StepResult, "Future[StepResult]"]: ...

    def step(self, weight: Optional[float] = None, gather: Any = None, timeout: Optional[float] = None,
             wait: bool = True) -> Union[StepResult, "Future[StepResult]"]:
        """One round; a round still in flight is landed first (:meth:`land`, whose error, if any, is raised here).

        ``wait=True`` (default): returns the :class:`StepResult` once the parameters hold the group's weighted mean
        (unchanged when ``averaged`` is False). ``wait=False``: copies the parameters into the region and returns
        a ``Future[StepResult]`` at once, while the agent averages the snapshot in a background thread; the
        parameters are not touched until :meth:`land`. The future cannot be cancelled, and its result alone
        changes nothing: call :meth:`land` (or the next ``step``) to apply the round.
        """
        self.land()
        with torch.no_grad(), self.averager.get_tensors():
            for p, r, s in zip(self.params, self._region, self._staging):
                self._host.copy(r, p.detach(), s)
            _sync(self.params)
            if not wait:
                self._sent = [r.clone() for r in self._region]
        if wait:
            result = self.averager.step(weight=weight, gather=gather, timeout=timeout)
            if result.averaged:
                with torch.no_grad():
                    self._copy_into_params()
            return result
        future: "Future[StepResult]" = Future()
        future.set_running_or_notify_cancel()  # running from now on: cancel() returns False
        thread = threading.Thread(target=self._run_step, args=(future, weight, gather, timeout),
                                  name="averaging-swarm-step", daemon=True)
        self._pending, self._thread = future, thread
        thread.start()
        return future

    def _run_step(self, future: "Future[StepResult]", weight: Optional[float], gather: Any,
                  timeout: Optional[float]) -> None:
        try:
            result = self.averager.step(weight=weight, gather=gather, timeout=timeout)
        except BaseException as err:  # noqa: B036 - handed to whoever waits on the future
            future.set_exception(err)
        else:
            future.set_result(result)

    @property
    def round_in_flight(self) -> bool:
        """True from ``step(wait=False)`` until the round is landed (or dropped), whether or not the agent is done."""
        return self._pending is not None

    def land(self) -> Optional[StepResult]:
        """Waits for the round in flight, if any, and applies it; returns its result, or None when none was in flight.

        When the round averaged, each parameter becomes ``p + (mean − sent)``: ``p`` its current value (local
        steps taken since ``step(wait=False)`` included), ``mean`` the group's weighted mean the agent wrote into
        the region, ``sent`` the snapshot sent. The correction ``mean − sent`` is computed in float32 on the CPU
        from the region's values, then added in float32 on the parameter's device and cast back to the
        parameter's dtype: float32 parameters get two float32 roundings (the difference, the sum); float16 and
        bfloat16 parameters get one rounding to nearest even of ``float32(p) + (mean − sent)`` (the mean itself is
        the agent's, already rounded to the dtype). With no local step taken meanwhile this is the mean itself.
        Parts the group kept local (``raw["partsKeptLocal"]``) hold the values sent, so their correction is zero.

        When the round did not average (``averaged`` False) the parameters stay as trained. When it raised (the
        agent refused or could not be reached), the parameters stay as trained and the error is raised here; the
        round counts as landed either way.
        """
        future = self._pending
        if future is None:
            return None
        try:
            result = future.result()
            if result.averaged:
                self._apply_correction()
            return result
        finally:
            self._forget()

    def _apply_correction(self) -> None:
        with torch.no_grad(), self.averager.get_tensors():
            for p, r, sent in zip(self.params, self._region, self._sent):
                correction = r.float() - sent.float()
                correction = correction.to(p.device)
                if p.dtype == torch.float32:
                    p.data.add_(correction)
                else:
                    p.data.copy_(p.data.float().add_(correction))
            _sync(self.params)

    def _forget(self) -> None:
        """Waits for the background thread to end and drops the round in flight."""
        thread = self._thread
        if thread is not None:
            thread.join()
        self._pending, self._thread = None, None
        self._sent = []

    def _drop(self) -> None:
        """Waits for the agent's step to end without applying the round or raising its error."""
        if self._pending is not None:
            with contextlib.suppress(BaseException):
                self._pending.exception()
            self._forget()

    def load_state_from_peers(self) -> str:
        """Copies the agent's state into the parameters unless it is ``initial``; returns the origin.

        A round in flight is dropped, not landed: this waits for the agent's step to end, then the agent's state
        replaces the parameters (its error, if the round raised one, is not raised).
        """
        self._drop()
        origin = self.averager.load_state_from_peers()
        if origin != "initial":
            with torch.no_grad():
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
        """This trainer is done: lands the round in flight (:meth:`land`), then :meth:`DecentralizedAverager.finish`.

        When that round raised, its error is raised here before the agent is told (the round counts as landed:
        call ``finish()`` again).
        """
        self.land()
        return self.averager.finish()

    def close(self) -> None:
        """Lands the round in flight, if any (its error becomes a RuntimeWarning), then unmaps and deletes the region."""
        if self._pending is not None:
            try:
                self.land()
            except Exception as err:  # noqa: BLE001 - close() must not fail on the last round's error
                warnings.warn(f"the round in flight at close() did not average: {err}", RuntimeWarning, stacklevel=2)
        self._host.close()
        self._region.clear()
        self.averager.close()


class DiLoCoOptimizer:
    """DiLoCo: ``local_steps`` inner steps, then one outer Nesterov step on the swarm's averaged pseudo-gradient.

    The averaged tensors are, per parameter, the outer parameters ``outer/<name>`` (θ) and, with
    ``average_momentum=True`` (default), the outer momentum ``momentum/<name>`` (m), float32. Each outer step
    computes Δ = θ − θ_local, m' = μ·m + Δ and θ' = θ − lr·(Δ + μ·m') (torch's SGD with ``nesterov=True``) in
    numpy float32 on the CPU, averages θ' (and m') weighted by the samples since the last outer step, and loads
    the mean θ into the model. Members of one group leave with bit-identical θ; alone (no group within
    ``timeout``) a trainer keeps its own θ', m'. Needs the agent's averagingAlpha to be 1.

    ``average_momentum=False`` registers θ alone: each outer step moves 1× the parameters instead of 2×, and each
    trainer keeps its own m (never averaged, never published: a newcomer downloads θ only and starts with m = 0).
    Every trainer of a swarm must use the same setting (the registered tensors differ).
    """

    def __init__(self, named_parameters: Iterable[Tuple[str, torch.Tensor]], inner_optimizer: torch.optim.Optimizer,
                 local_steps: int = 500, outer_lr: float = 0.7, outer_momentum: float = 0.9,
                 timeout: Optional[float] = None, url: Optional[str] = None, shm_dir: Optional[str] = None,
                 transport: str = "shm", average_momentum: bool = True):
        if local_steps < 1:
            raise ValueError(f"local_steps is {local_steps}; it must be at least 1")
        self.names, self.params = _named(named_parameters)
        self.inner_optimizer = inner_optimizer
        self.local_steps = local_steps
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum
        self.timeout = timeout
        self.average_momentum = average_momentum
        """Whether m is averaged with θ (2× the parameters per outer step) or kept by each trainer (1×)."""
        shapes = {n: tuple(p.shape) for n, p in zip(self.names, self.params)}
        tensors: Dict[str, Tuple[Tuple[int, ...], str]] = {f"outer/{n}": (s, "float32") for n, s in shapes.items()}
        if average_momentum:
            tensors.update({f"momentum/{n}": (s, "float32") for n, s in shapes.items()})
        self.averager = DecentralizedAverager(tensors, url=url, shm_dir=shm_dir, transport=transport)
        with self.averager.get_tensors() as views:
            self._theta = [views[f"outer/{n}"] for n in self.names]
            self._momentum: List[np.ndarray] = (
                [views[f"momentum/{n}"] for n in self.names] if average_momentum
                else [np.zeros(shapes[n], dtype=np.float32) for n in self.names])
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
        """Nesterov on the pseudo-gradient, the swarm's weighted mean of θ (and m, when averaged), θ into the model."""
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
        is given them so that peers downloading state get real parameters. With ``average_momentum=False`` the
        agent holds θ alone: m is this trainer's own and is left as it is (zeros for a newcomer, which starts
        from the swarm's θ with m = 0), except at ``initial``, where it is zeroed.
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
        """The inner optimizer's state, the counters, θ (``outer``) and m (``momentum``), copies by parameter name."""
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
        """Restores a checkpoint and gives its θ and m to the agent (the model's parameters are the caller's).

        With ``average_momentum=False`` the agent gets θ and m stays in this trainer. State dicts are the same
        either way, so a checkpoint of one setting loads into the other.
        """
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
