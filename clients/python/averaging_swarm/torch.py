"""PyTorch on top of :class:`~averaging_swarm.DecentralizedAverager`: averaging parameters in place, and DiLoCo.

    avg = ParameterAverager(model.named_parameters())
    avg.step(weight=samples_since_last_step)            # parameters now hold the group's mean

    future = avg.step(weight=samples, wait=False)       # overlapped: the round runs while training goes on
    ...                                                 # local steps on the parameters
    avg.land()                                          # parameters += group mean − snapshot sent

    opt = DiLoCoOptimizer(model.named_parameters(), torch.optim.AdamW(model.parameters()), local_steps=500)
    loss.backward(); opt.step(samples=len(batch), loss=loss.item()); opt.zero_grad()

    opt = DiLoCoOptimizer(..., overlap=True)            # outer steps return a Future; their rounds land during
                                                        # the next inner steps (model = mean θ + inner progress)

    opt = DiLoCoOptimizer(..., process_group=dist.group.WORLD)  # torchrun + DDP: rank 0 talks to the agent,
                                                                # the other ranks follow it (collective calls)
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
import warnings
from concurrent.futures import Future
from typing import Any, Dict, Generic, Iterable, List, Literal, Optional, Tuple, TypeVar, Union, cast, overload

import numpy as np
import torch

from .averager import DecentralizedAverager
from .client import AgentError, OuterStep, StepResult
from .replicas import Replicas, replicas_for

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


def _land_outer(p: torch.Tensor, theta: np.ndarray, sent: np.ndarray) -> None:
    """p becomes θ + δ, δ = p − θ' with θ' = ``sent`` as it was loaded into p (rounded to p's dtype).

    δ and θ + δ are computed in float32 on p's device (θ + δ then rounded to p's dtype): δ is exact whenever p
    and θ' are within a factor of two of each other (Sterbenz), and 0 where p still holds θ', which then gets θ.
    """
    loaded = torch.from_numpy(sent).to(p.device).to(p.dtype)
    landed = p.data.float() - loaded.float()
    landed.add_(torch.from_numpy(theta).to(p.device))
    p.data.copy_(landed)


class _RoundInFlight:
    """One agent round (:meth:`DecentralizedAverager.step`) running in a background thread, and its Future.

    The future is running from the start (``cancel()`` returns False) and gets the :class:`StepResult`, or the
    error the step raised. Whoever started the round must not touch the averager's region until :meth:`result`
    or :meth:`drop` has returned: the agent owns it meanwhile.
    """

    def __init__(self, averager: DecentralizedAverager, weight: Optional[float], gather: Any, timeout: Optional[float],
                 names: Optional[List[str]] = None, outer: Optional[OuterStep] = None):
        self.future: "Future[StepResult]" = Future()
        self.future.set_running_or_notify_cancel()
        self._thread = threading.Thread(target=self._run, args=(averager, weight, gather, timeout, names, outer),
                                        name="averaging-swarm-step", daemon=True)
        self._thread.start()

    def _run(self, averager: DecentralizedAverager, weight: Optional[float], gather: Any,
             timeout: Optional[float], names: Optional[List[str]], outer: Optional[OuterStep]) -> None:
        try:
            result = averager.step(weight=weight, gather=gather, timeout=timeout, names=names, outer=outer)
        except BaseException as err:  # noqa: B036 - handed to whoever waits on the future
            self.future.set_exception(err)
        else:
            self.future.set_result(result)

    def done(self) -> bool:
        """Whether the agent's step has ended (non-blocking)."""
        return self.future.done()

    def result(self) -> StepResult:
        """Waits for the round (and its thread) to end; returns its result or raises its error."""
        try:
            return self.future.result()
        finally:
            self._thread.join()

    def drop(self) -> None:
        """Waits for the round (and its thread) to end without raising its error."""
        with contextlib.suppress(BaseException):
            self.future.exception()
        self._thread.join()


class ParameterAverager:
    """Averages a model's parameters in place through the pod's agent.

    ``step()`` copies the parameters into the region, runs one round and copies the group's weighted mean back.
    ``step(wait=False)`` overlaps the round with training, like hivemind's ``DecentralizedAverager.step(wait=False)``:
    it copies the parameters into the region (the *snapshot sent*), starts the agent's round in a background
    thread and returns a :class:`concurrent.futures.Future` at once; the trainer goes on taking local steps on
    its parameters, and :meth:`land` (or the next :meth:`step`) adds ``group mean − snapshot sent`` to them, so
    the local steps taken meanwhile are kept (delayed averaging). While a round is in flight the agent owns the
    region: touch it (``averager.get_tensors()``) only after :meth:`land`.

    ``process_group`` (data-parallel trainers, e.g. torchrun with DDP: the ranks that hold replicas of these
    parameters): the group's rank 0 alone talks to the agent (``averager`` is None on the other ranks), and
    ``step``, ``land``, ``load_state_from_peers``, ``complete`` and ``finish`` are collectives: every rank calls
    them in the same order and leaves with rank 0's parameters and result (or raises its error). The other ranks'
    ``step(wait=False)`` futures complete when the round lands.
    """

    def __init__(self, named_parameters: Iterable[Tuple[str, torch.Tensor]], url: Optional[str] = None,
                 shm_dir: Optional[str] = None, transport: str = "shm", *, process_group: Any = None):
        self.names, self.params = _named(named_parameters)
        self._replicas: Optional[Replicas] = replicas_for(process_group, self.names, self.params)
        self._round: Optional[_RoundInFlight] = None
        self._sent: List[torch.Tensor] = []
        """CPU copies of the region as sent by the round in flight, in the parameters' dtypes."""
        self._follower_round: "Optional[Future[StepResult]]" = None
        """On a rank other than the group's 0: the future of the round in flight there."""
        self.averager: Optional[DecentralizedAverager] = None
        """The agent's averager; None on a process group's ranks other than 0."""
        if self._replicas is not None and not self._replicas.leader:
            return
        self.averager = DecentralizedAverager(
            {n: (tuple(p.shape), _DTYPE_NAMES[p.dtype]) for n, p in zip(self.names, self.params)},
            url=url, shm_dir=shm_dir, transport=transport)
        with self.averager.get_tensors() as views:
            self._region = [region_tensor(views[s.name], s.dtype) for s in self.averager.specs]
        self._host = _HostRegistration(self.averager, self.params)
        self._staging = [self._host.staging_for(slot.offset, r) for slot, r in zip(self.averager.slots, self._region)]

    def _agent(self) -> DecentralizedAverager:
        assert self.averager is not None, "only the process group's rank 0 talks to the agent"
        return self.averager

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
        replicas = self._replicas
        if replicas is None:
            return self._step(weight, gather, timeout, wait)
        if wait:
            result = replicas.outcome(lambda: self._step(weight, gather, timeout, True))
            if result.averaged:
                replicas.params(self.params)
            return result
        if replicas.leader:
            return self._step(weight, gather, timeout, False)
        self._follower_round = Future()
        self._follower_round.set_running_or_notify_cancel()
        return self._follower_round

    def _step(self, weight: Optional[float], gather: Any, timeout: Optional[float],
              wait: bool) -> Union[StepResult, "Future[StepResult]"]:
        averager = self._agent()
        with torch.no_grad(), averager.get_tensors():
            for p, r, s in zip(self.params, self._region, self._staging):
                self._host.copy(r, p.detach(), s)
            _sync(self.params)
            if not wait:
                self._sent = [r.clone() for r in self._region]
        if wait:
            result = averager.step(weight=weight, gather=gather, timeout=timeout)
            if result.averaged:
                with torch.no_grad():
                    self._copy_into_params()
            return result
        self._round = _RoundInFlight(averager, weight, gather, timeout)
        return self._round.future

    @property
    def round_in_flight(self) -> bool:
        """True from ``step(wait=False)`` until the round is landed (or dropped), whether or not the agent is done."""
        return self._round is not None or self._follower_round is not None

    def land(self) -> Optional[StepResult]:
        """Waits for the round in flight, if any, and applies it; returns its result, or None when none was in flight.

        When the round averaged, each parameter becomes ``p + (mean − sent)``: ``p`` its current value (local
        steps taken since ``step(wait=False)`` included), ``mean`` the group's weighted mean the agent wrote into
        the region, ``sent`` the snapshot sent. The correction ``mean − sent`` is computed in float32 on the CPU
        from the region's values, then added in float32 on the parameter's device and cast back to the
        parameter's dtype: float32 parameters get two float32 roundings (the difference, the sum); float16 and
        bfloat16 parameters get one rounding to nearest even of ``float32(p) + (mean − sent)`` (the mean itself is
        the agent's, already rounded to the dtype). With no local step taken meanwhile this is the mean exactly
        where mean and sent are within a factor of two of each other (the difference is then exact), else within
        one float32 rounding of it.
        Parts the group kept local (``raw["partsKeptLocal"]``) hold the values sent, so their correction is zero.

        When the round did not average (``averaged`` False) the parameters stay as trained. When it raised (the
        agent refused or could not be reached), the parameters stay as trained and the error is raised here; the
        round counts as landed either way.
        """
        replicas = self._replicas
        if replicas is None or not self.round_in_flight:
            return self._land()
        follower_round, self._follower_round = self._follower_round, None
        try:
            result = replicas.outcome(self._land)
        except BaseException as err:
            if follower_round is not None:
                follower_round.set_exception(err)
            raise
        if result is not None and result.averaged:
            replicas.params(self.params)
        if follower_round is not None:
            follower_round.set_result(cast(StepResult, result))
        return result

    def _land(self) -> Optional[StepResult]:
        round_ = self._round
        if round_ is None:
            return None
        try:
            result = round_.result()
            if result.averaged:
                self._apply_correction()
            return result
        finally:
            self._round, self._sent = None, []

    def _apply_correction(self) -> None:
        with torch.no_grad(), self._agent().get_tensors():
            for p, r, sent in zip(self.params, self._region, self._sent):
                correction = r.float() - sent.float()
                correction = correction.to(p.device)
                if p.dtype == torch.float32:
                    p.data.add_(correction)
                else:
                    p.data.copy_(p.data.float().add_(correction))
            _sync(self.params)

    def _drop(self) -> None:
        """Waits for the agent's step to end without applying the round or raising its error."""
        if self._round is not None:
            self._round.drop()
            self._round, self._sent = None, []
        if self._follower_round is not None:
            self._follower_round.set_exception(RuntimeError("the round was dropped, not landed"))
            self._follower_round = None

    def load_state_from_peers(self) -> str:
        """Copies the agent's state into the parameters unless it is ``initial``; returns the origin.

        A round in flight is dropped, not landed: this waits for the agent's step to end, then the agent's state
        replaces the parameters (its error, if the round raised one, is not raised).
        """
        self._drop()
        if self._replicas is None:
            return self._load_state()
        origin = self._replicas.outcome(self._load_state)
        if origin != "initial":
            self._replicas.params(self.params)
        return origin

    def _load_state(self) -> str:
        origin = self._agent().load_state_from_peers()
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
        """See :attr:`DecentralizedAverager.complete` (with a process group: rank 0's answer, a collective)."""
        if self._replicas is None:
            return self._agent().complete
        return self._replicas.outcome(lambda: self._agent().complete)

    def finish(self) -> Dict[str, Any]:
        """This trainer is done: lands the round in flight (:meth:`land`), then :meth:`DecentralizedAverager.finish`.

        When that round raised, its error is raised here before the agent is told (the round counts as landed:
        call ``finish()`` again).
        """
        self.land()
        if self._replicas is None:
            return self._agent().finish()
        return self._replicas.outcome(lambda: self._agent().finish())

    def close(self) -> None:
        """Lands the round in flight, if any (its error becomes a RuntimeWarning), then unmaps and deletes the region.

        With a process group this is not a collective: rank 0 lands its round for itself (call :meth:`land` on
        every rank first to keep the replicas equal), the other ranks only forget theirs."""
        if self._replicas is not None:
            self._follower_round = None
        if self.averager is None:
            return
        if self._round is not None:
            try:
                self._land()
            except Exception as err:  # noqa: BLE001 - close() must not fail on the last round's error
                warnings.warn(f"the round in flight at close() did not average: {err}", RuntimeWarning, stacklevel=2)
        self._host.close()
        self._region.clear()
        self.averager.close()


_Outcome = TypeVar("_Outcome")
"""What an outer step returns: :class:`StepResult`, or ``Future[StepResult]`` with ``overlap=True``."""


class DiLoCoOptimizer(Generic[_Outcome]):
    """DiLoCo: ``local_steps`` inner steps, then one outer Nesterov step on the swarm's averaged pseudo-gradient.

    The agent holds, per parameter, the outer parameters ``outer/<name>`` (θ) and, with ``average_momentum=True``
    (default), the outer momentum ``momentum/<name>`` (m), float32. Each outer step computes the pseudo-gradient
    Δ = θ − θ_local and the step m' = μ·m + Δ, θ' = θ − lr·(Δ + μ·m') (torch's SGD with ``nesterov=True``, in
    float32), and the group averages, weighted by the samples since the last outer step: the pseudo-gradients
    alone, every member then stepping with their mean, where every member holds the same θ and m (the default
    ``average_pseudo_gradients``, below), else θ' and m'. Either way the mean θ goes into the model. Members of
    one group leave with bit-identical θ (and m, when averaged), and without overlap the model holds θ (cast to
    the parameters' dtype), so their models are bit-identical too; alone (no group within ``timeout``) a trainer
    keeps its own θ', m'. Needs the agent's averagingAlpha to be 1.

    ``average_momentum=False`` registers θ alone: each outer step moves 1× the parameters instead of 2×, and each
    trainer keeps its own m (never averaged, never published: a newcomer downloads θ only and starts with m = 0).
    Every trainer of a swarm must use the same setting (the registered tensors differ).

    ``overlap=True`` (Streaming DiLoCo's overlapped outer step) hides the round behind the next inner steps: the
    outer step computes θ', m' as above, starts the agent's round in a background thread, loads this trainer's
    own θ' into the model and returns a ``Future[StepResult]`` at once. Inner steps go on from θ'. The round
    *lands* at the first :meth:`step` after the agent is done (a non-blocking check after that call's inner
    step), or, blocking, at :meth:`land`, the next outer step, :meth:`state_dict`, :meth:`outer_parameters`,
    :attr:`outer_params_hash`, :meth:`finish` or :meth:`close`. Landing an averaged round sets θ to the group's
    mean θ (bit-identical on every member, as without overlap), m to the mean m (or keeps this trainer's own m'
    with ``average_momentum=False``), and moves the model by ``θ − θ'``, keeping the inner progress δ = p − θ'
    made since the outer step: the model becomes θ + δ, so the members' models differ by their own δ. The next
    Δ = θ − θ_local then counts every inner step exactly once. See :meth:`land` for the rounding and the
    failure cases.

    ``fragments=P`` (Streaming DiLoCo's fragments; default 1, every outer step over all parameters) splits the
    parameters into P contiguous fragments of about equal element count (:func:`fragment_bounds`) and gives each
    its own outer steps: fragment f's comes at the inner steps s (counted from 1) with
    ``(s − offset_f) % local_steps == 0``, ``offset_f = f·local_steps // P``, so one fragment syncs every
    local_steps / P inner steps and each every local_steps. Such an outer step is the one above restricted to the
    fragment: Nesterov on its own θ and m, a round averaging only its ``outer/`` (and ``momentum/``) tensors with
    peers averaging the same fragment (the agent's subset steps, ``names``), θ into its parameters alone, weighted
    by the samples since that fragment's last outer step; the other fragments' θ, m and parameters are not
    touched. Each round moves 1/P of the bytes of a whole outer step. With ``overlap=True`` one round is in
    flight at a time: the next fragment's outer step lands it first. ``local_steps`` must be at least P.

    ``average_pseudo_gradients`` (default: True, unless ``average_momentum=False``; DiLoCo as published: the swarm
    averages the pseudo-gradients, 1× the parameters per outer step instead of θ' and m', 2×) registers the
    pseudo-gradients ``pseudo_gradient/<name>``
    beside θ and m and has the agent take the outer step (:class:`averaging_swarm.OuterStep`, the same float32
    arithmetic bit for bit): a group whose members hold one θ and m (they left the same rounds together) averages
    Δ alone and every member steps with the mean, so θ and m stay bit-identical; any other group (a newcomer, a
    member that missed a round, Moshpit groups that mix earlier groups) steps with each member's own Δ and averages
    θ' and m' as with ``average_pseudo_gradients=False``, after which its members agree. ``StepResult.outer`` says
    which. Costs one more float32 copy of the parameters in the region and in the agent (False saves it, and every
    round then moves θ' and m'); needs ``average_momentum=True``. Every trainer of a swarm must use the same setting
    (the registered tensors differ).

    ``process_group`` (data-parallel trainers, e.g. torchrun with DDP: the ranks that hold replicas of the model)
    makes the group's rank 0 the only process that talks to the agent and holds θ and m (``averager`` is None on
    the other ranks). Outer steps, landings (also the check after each inner step while a round is in flight),
    ``load_state_from_peers`` (at construction too), ``outer_params_hash``, ``outer_parameters``, ``state_dict``,
    ``complete`` and ``finish`` are then collectives: every rank calls them in the same order and leaves with
    rank 0's parameters and result, or raises its error. The other ranks' overlapped futures complete when the
    round lands. The pod's bytes on the wire are one trainer's, however many ranks it has.
    """

    @overload
    def __init__(self: "DiLoCoOptimizer[StepResult]", named_parameters: Iterable[Tuple[str, torch.Tensor]],
                 inner_optimizer: torch.optim.Optimizer, local_steps: int = ..., outer_lr: float = ...,
                 outer_momentum: float = ..., timeout: Optional[float] = ..., url: Optional[str] = ...,
                 shm_dir: Optional[str] = ..., transport: str = ..., average_momentum: bool = ..., *,
                 overlap: Literal[False] = ..., fragments: int = ..., process_group: Any = ...,
                 average_pseudo_gradients: Optional[bool] = ...) -> None: ...

    @overload
    def __init__(self: "DiLoCoOptimizer[Future[StepResult]]", named_parameters: Iterable[Tuple[str, torch.Tensor]],
                 inner_optimizer: torch.optim.Optimizer, local_steps: int = ..., outer_lr: float = ...,
                 outer_momentum: float = ..., timeout: Optional[float] = ..., url: Optional[str] = ...,
                 shm_dir: Optional[str] = ..., transport: str = ..., average_momentum: bool = ..., *,
                 overlap: Literal[True], fragments: int = ..., process_group: Any = ...,
                 average_pseudo_gradients: Optional[bool] = ...) -> None: ...

    @overload
    def __init__(self: "DiLoCoOptimizer[Union[StepResult, Future[StepResult]]]",
                 named_parameters: Iterable[Tuple[str, torch.Tensor]], inner_optimizer: torch.optim.Optimizer,
                 local_steps: int = ..., outer_lr: float = ..., outer_momentum: float = ...,
                 timeout: Optional[float] = ..., url: Optional[str] = ..., shm_dir: Optional[str] = ...,
                 transport: str = ..., average_momentum: bool = ..., *, overlap: bool,
                 fragments: int = ..., process_group: Any = ...,
                 average_pseudo_gradients: Optional[bool] = ...) -> None: ...

    def __init__(self, named_parameters: Iterable[Tuple[str, torch.Tensor]], inner_optimizer: torch.optim.Optimizer,
                 local_steps: int = 500, outer_lr: float = 0.7, outer_momentum: float = 0.9,
                 timeout: Optional[float] = None, url: Optional[str] = None, shm_dir: Optional[str] = None,
                 transport: str = "shm", average_momentum: bool = True, *, overlap: bool = False,
                 fragments: int = 1, process_group: Any = None, average_pseudo_gradients: Optional[bool] = None):
        if local_steps < 1:
            raise ValueError(f"local_steps is {local_steps}; it must be at least 1")
        self.names, self.params = _named(named_parameters)
        if not (isinstance(fragments, int) and 1 <= fragments <= min(len(self.params), local_steps)):
            raise ValueError(f"fragments is {fragments!r}; it must be an integer from 1 to the number of parameters "
                             f"({len(self.params)}) and to local_steps ({local_steps})")
        self.fragments = fragments
        """Streaming DiLoCo's P: the parameters split into this many fragments, each with its own outer steps."""
        self.fragment_bounds = fragment_bounds([p.numel() for p in self.params], fragments)
        """Fragment f holds the parameters ``[start, end)`` of ``fragment_bounds[f]``, in the order given."""
        self.fragment_offsets = [f * local_steps // fragments for f in range(fragments)]
        """Fragment f's outer steps come at the inner steps s with (s − offset) % local_steps == 0."""
        self.inner_optimizer = inner_optimizer
        self.local_steps = local_steps
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum
        self.timeout = timeout
        self.average_momentum = average_momentum
        """Whether m is averaged with θ (2× the parameters per outer step) or kept by each trainer (1×)."""
        if average_pseudo_gradients is None:
            average_pseudo_gradients = average_momentum
        if average_pseudo_gradients and not average_momentum:
            raise ValueError("average_pseudo_gradients=True keeps m in the agent beside θ, so that a group can average "
                             "θ' and m' when its members' states differ: it needs average_momentum=True")
        self.average_pseudo_gradients = average_pseudo_gradients
        """Whether the agent takes the outer step and groups holding one θ, m average the pseudo-gradients alone."""
        self.overlap = overlap
        """Whether outer steps return a Future at once and their rounds land during the next inner steps."""
        shapes = {n: tuple(p.shape) for n, p in zip(self.names, self.params)}
        tensors: Dict[str, Tuple[Tuple[int, ...], str]] = {f"outer/{n}": (s, "float32") for n, s in shapes.items()}
        if average_momentum:
            tensors.update({f"momentum/{n}": (s, "float32") for n, s in shapes.items()})
        if average_pseudo_gradients:
            tensors.update({f"pseudo_gradient/{n}": (s, "float32") for n, s in shapes.items()})
        # The registered tensors each fragment's rounds average (None: all of them, an ordinary round).
        self._fragment_names: List[Optional[List[str]]] = [None] if fragments == 1 else [
            [f"outer/{n}" for n in self.names[a:b]] + ([f"momentum/{n}" for n in self.names[a:b]] if average_momentum else [])
            for a, b in self.fragment_bounds]
        # With the agent taking the outer step: each fragment's round names its pseudo-gradients, θ and m.
        self._fragment_outer: List[Optional[OuterStep]] = [None] * fragments
        if average_pseudo_gradients:
            self._fragment_names = [[f"pseudo_gradient/{n}" for n in self.names[a:b]] for a, b in self.fragment_bounds]
            self._fragment_outer = [OuterStep(params=[f"outer/{n}" for n in self.names[a:b]],
                                              buffers=[f"momentum/{n}" for n in self.names[a:b]],
                                              lr=outer_lr, momentum=outer_momentum, nesterov=True)
                                    for a, b in self.fragment_bounds]
        self._replicas: Optional[Replicas] = replicas_for(process_group, self.names, self.params)
        self._follower_round: "Optional[Future[StepResult]]" = None
        """On a rank other than the group's 0: the future of the overlapped round in flight there."""
        self.averager: Optional[DecentralizedAverager] = None
        """The agent's averager; None on a process group's ranks other than 0 (which hold no θ or m either)."""
        self._theta: List[np.ndarray] = []
        self._momentum: List[np.ndarray] = []
        self._gradient: List[np.ndarray] = []
        """With average_pseudo_gradients: the region's Δ of each parameter (the agent's mean after a round)."""
        if self._replicas is None or self._replicas.leader:
            self.averager = DecentralizedAverager(tensors, url=url, shm_dir=shm_dir, transport=transport)
            with self.averager.get_tensors() as views:
                self._theta = [views[f"outer/{n}"] for n in self.names]
                self._momentum = (
                    [views[f"momentum/{n}"] for n in self.names] if average_momentum
                    else [np.zeros(shapes[n], dtype=np.float32) for n in self.names])
                if average_pseudo_gradients:
                    self._gradient = [views[f"pseudo_gradient/{n}"] for n in self.names]
        self._pinned = [torch.empty(tuple(p.shape), dtype=torch.float32, pin_memory=True) if p.is_cuda else None
                        for p in self.params]
        self.local_step = 0
        """Inner steps since construction (or the loaded state dict)."""
        self.outer_step_count = 0
        """Outer steps taken (with overlap: started, whether or not their round has landed)."""
        self.last_result: Optional[StepResult] = None
        """The last outer round's result (with overlap: the last round landed)."""
        self._samples = 0
        """Samples since the last progress report (the last outer step of any fragment)."""
        self._fragment_samples = [0] * fragments
        """Samples since each fragment's last outer step: its weight in the next one."""
        self._losses: List[float] = []
        self._reported_error = False
        self._round: Optional[_RoundInFlight] = None
        self._round_fragment = 0
        self._sent_theta: List[np.ndarray] = []
        """Copies of θ' as sent by the round in flight (and of m', when averaged): restored when it does not average."""
        self._sent_momentum: List[np.ndarray] = []
        self._round_report: Tuple[int, List[float]] = (0, [])
        self.origin = self.load_state_from_peers()

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        """The inner optimizer's parameter groups (what learning-rate schedulers change)."""
        return self.inner_optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, samples: Optional[int] = None, loss: Optional[float] = None) -> Optional[_Outcome]:
        """One inner step; every ``local_steps``-th call also runs the outer step and returns what it returns
        (with ``fragments=P``: the call that makes ``(local_step − offset_f) % local_steps == 0`` runs fragment f's).


        ``samples`` (default 1, so that weights count inner steps) weights this trainer in the outer average;
        ``loss`` is averaged over the outer step's inner steps and reported to the agent. With ``overlap=True``
        a call that is not an outer step lands the round in flight once the agent is done with it (after this
        call's inner step; its error, if the round raised one, is raised here, the inner step taken).
        """
        self.inner_optimizer.step()
        self.local_step += 1
        n = 1 if samples is None else int(samples)
        self._samples += n
        for f in range(self.fragments):
            self._fragment_samples[f] += n
        if loss is not None:
            self._losses.append(float(loss))
        due = self._due_fragment()
        if due is not None:
            return self.outer_step(due)
        if self.round_in_flight and self._round_done():
            self.land()
        return None

    def _round_done(self) -> bool:
        """Whether the agent is done with the round in flight (with a process group: rank 0's answer)."""
        done = self._round is not None and self._round.done()
        return done if self._replicas is None else self._replicas.flag(done)

    def _agent(self) -> DecentralizedAverager:
        assert self.averager is not None, "only the process group's rank 0 talks to the agent"
        return self.averager

    @property
    def _leads(self) -> bool:
        """Whether this process holds θ, m and the agent (one process, or the process group's rank 0)."""
        return self.averager is not None

    def _due_fragment(self) -> Optional[int]:
        for f, offset in enumerate(self.fragment_offsets):
            if (self.local_step - offset) % self.local_steps == 0:
                return f
        return None

    @torch.no_grad()
    def outer_step(self, fragment: Optional[int] = None) -> _Outcome:
        """Nesterov on the pseudo-gradient, the swarm's weighted mean of θ (and m, when averaged), θ into the model.

        With ``fragments=P`` > 1 all of this concerns one fragment's parameters, θ and m alone: ``fragment``
        (default: the one due at this inner step; a ValueError when none is). Its weight is the samples since
        that fragment's last outer step.

        Without overlap: returns the round's :class:`StepResult` once the model holds θ. With ``overlap=True``:
        lands the round still in flight first (blocking; if that round raised, its error is raised here and this
        outer step is not taken: call ``outer_step()`` again to take it), then computes θ', m', starts the
        round, loads θ' into the model and returns the round's ``Future[StepResult]`` at once. The future
        cannot be cancelled and its result alone changes nothing: the round lands as the class docstring says.
        """
        if fragment is None:
            fragment = 0 if self.fragments == 1 else self._due_fragment()
            if fragment is None:
                raise ValueError(f"no fragment is due at inner step {self.local_step} (offsets {self.fragment_offsets} "
                                 f"modulo {self.local_steps}); name one: outer_step(fragment=f)")
        if not 0 <= fragment < self.fragments:
            raise ValueError(f"fragment is {fragment}; this optimizer has fragments 0 to {self.fragments - 1}")
        part = range(*self.fragment_bounds[fragment])
        names = self._fragment_names[fragment]
        weight = self._fragment_samples[fragment]
        if not self.overlap:
            if self._replicas is None:
                result = self._outer_round(part, names, weight)
            else:
                result = self._replicas.outcome(lambda: self._outer_round(part, names, weight))
                self._replicas.params([self.params[i] for i in part])  # θ, or rank 0's own θ' when alone
            self.outer_step_count += 1
            self.last_result = result
            self._samples, self._losses = 0, []
            self._fragment_samples[fragment] = 0
            return cast(_Outcome, result)
        self.land()
        if self._leads and self.average_pseudo_gradients:
            self._gradient_into_region(part, keep_sent=True)
            self._theta_into_model(part, self._sent_theta)  # this trainer's own θ'; the agent steps θ in the region
        elif self._leads:
            self._nesterov_into_region(keep_sent=True, part=part)
            self._theta_into_model(part)  # this trainer's own θ', before the agent owns the region
        if self._replicas is not None:
            self._replicas.params([self.params[i] for i in part])
        self._round_report = (self._samples, self._losses)
        self._samples, self._losses = 0, []
        self._fragment_samples[fragment] = 0
        self._round_fragment = fragment
        self.outer_step_count += 1
        if self._leads:
            self._round = _RoundInFlight(self._agent(), max(weight, 1), {"samples": weight}, self.timeout, names,
                                         self._fragment_outer[fragment])
            return cast(_Outcome, self._round.future)
        self._follower_round = Future()
        self._follower_round.set_running_or_notify_cancel()
        return cast(_Outcome, self._follower_round)

    def _outer_round(self, part: range, names: Optional[List[str]], weight: int) -> StepResult:
        """A blocking outer step's work with the agent: θ', m' (or Δ, the agent stepping), the round, θ into the
        model, the progress report."""
        outer = self._fragment_outer[self._fragment_of(part)]
        if outer is not None:
            self._gradient_into_region(part, keep_sent=False)
        else:
            self._nesterov_into_region(keep_sent=False, part=part)
        result = self._agent().step(weight=max(weight, 1), timeout=self.timeout, gather={"samples": weight}, names=names,
                                    outer=outer)
        self._theta_into_model(part)
        self._report(self._samples, self._losses)
        return result

    @property
    def round_in_flight(self) -> bool:
        """True from an overlapped outer step until its round lands (or is dropped), whether or not the agent is done."""
        return self._round is not None or self._follower_round is not None

    @torch.no_grad()
    def land(self) -> Optional[StepResult]:
        """Waits for the overlapped round in flight, if any, and applies it; returns its result (None when none).

        Averaged: θ becomes the group's mean θ (bit-identical on every member) and m the mean m (with
        ``average_momentum=False`` this trainer keeps its own m'). The model keeps the inner progress made since
        the outer step: each parameter becomes ``θ + δ`` with ``δ = p − θ'``, ``p`` its value now and ``θ'`` this
        trainer's θ' as it was loaded into the model (rounded to the parameter's dtype), both computed in float32
        on the parameter's device, then rounded to the parameter's dtype. δ is exact in float32 whenever p and θ'
        are within a factor of two of each other (Sterbenz's lemma: the usual case, an inner step's progress
        being small against the weights), and then a float32 parameter holds θ + δ correctly rounded (one
        rounding); elsewhere within two float32 roundings. Where δ is 0 (no inner step since the outer step, or
        an element the inner steps left alone) the parameter gets θ itself, bit for bit as without overlap.
        Parts the group kept local hold θ', so for them θ − θ' is zero. A progress report goes to the agent (the
        outer step's samples and mean loss, the hash of the landed θ).

        Not averaged (no group within ``timeout``): θ and m stay this trainer's own θ', m' (written back from
        this trainer's copies) and the model stays as trained, as a lone trainer without overlap. Raised (the
        agent refused the round or could not be reached): the same, and the error is raised here; the round
        counts as landed either way (no report is sent for it).

        With a process group: rank 0 lands as above, and every rank leaves with its parameters and result.
        """
        if self._replicas is None or not self.round_in_flight:
            return self._land()
        follower_round, self._follower_round = self._follower_round, None
        part = range(*self.fragment_bounds[self._round_fragment])
        try:
            result = self._replicas.outcome(self._land)
        except BaseException as err:
            if follower_round is not None:
                follower_round.set_exception(err)
            raise
        if result is not None and result.averaged:
            self._replicas.params([self.params[i] for i in part])
        self.last_result = result
        if follower_round is not None:
            follower_round.set_result(cast(StepResult, result))
        return result

    def _land(self) -> Optional[StepResult]:
        round_ = self._round
        if round_ is None:
            return None
        sent_theta, sent_momentum = self._sent_theta, self._sent_momentum
        self._round, self._sent_theta, self._sent_momentum = None, [], []
        part = range(*self.fragment_bounds[self._round_fragment])
        try:
            result = round_.result()
        except BaseException:
            self._restore(sent_theta, sent_momentum, part)
            raise
        if not result.averaged:
            self._restore(sent_theta, sent_momentum, part)
        else:
            with self._agent().get_tensors():
                for i, sent in zip(part, sent_theta):
                    _land_outer(self.params[i], self._theta[i], sent)
            _sync(self.params)
        self.last_result = result
        self._report(*self._round_report)
        return result

    def _drop(self) -> None:
        """Waits for the agent's step in flight to end, applying nothing and raising nothing."""
        if self._round is not None:
            self._round.drop()
            self._round, self._sent_theta, self._sent_momentum = None, [], []
        if self._follower_round is not None:
            self._follower_round.set_exception(RuntimeError("the outer round was dropped, not landed"))
            self._follower_round = None

    def _restore(self, sent_theta: List[np.ndarray], sent_momentum: List[np.ndarray], part: range) -> None:
        """θ and m of the fragment's parameters (``part``) become the copies sent. Not where the agent takes the
        outer step: θ and m are the agent's then, and the region holds what it last wrote back (θ' after a step
        alone, θ and m as they were when the agent refused the step)."""
        if self.average_pseudo_gradients:
            return
        with self._agent().get_tensors():
            for i, sent in zip(part, sent_theta):
                self._theta[i][...] = sent
            for i, sent in zip(part, sent_momentum):
                self._momentum[i][...] = sent

    @torch.no_grad()
    def load_state_from_peers(self) -> str:
        """Takes θ and m from the agent (a live peer's for a newcomer) and θ into the model; returns the origin.

        When the agent holds nothing yet (``initial``) θ becomes the model's parameters, m zeros, and the agent
        is given them so that peers downloading state get real parameters. With ``average_momentum=False`` the
        agent holds θ alone: m is this trainer's own and is left as it is (zeros for a newcomer, which starts
        from the swarm's θ with m = 0), except at ``initial``, where it is zeroed. An overlapped round in flight
        is dropped, not landed: this waits for the agent's step to end, then the agent's state replaces θ, m
        and the model (the round's error, if any, is not raised).
        """
        self._drop()
        if self._replicas is None:
            return self._load_state()
        origin = self._replicas.outcome(self._load_state)
        self._replicas.params(self.params)  # also where the ranks started from different parameters
        return origin

    def _load_state(self) -> str:
        averager = self._agent()
        origin = averager.load_state_from_peers()
        if origin == "initial":
            with averager.get_tensors():
                for p, pinned, theta, m in zip(self.params, self._pinned, self._theta, self._momentum):
                    theta[...] = self._local_float32(p, pinned)
                    m[...] = 0
            averager.publish_state()
        else:
            self._theta_into_model()
        return origin

    @property
    def outer_params_hash(self) -> str:
        """16 hex digits: the start of blake2b-512 over θ's float32 bytes, parameter by parameter.

        Lands the overlapped round in flight first (:meth:`land`, blocking; its error is raised here)."""
        self.land()
        return self._theta_hash() if self._replicas is None else self._replicas.outcome(self._theta_hash)

    def _theta_hash(self) -> str:
        h = hashlib.blake2b()
        for theta in self._theta:
            h.update(theta.tobytes())
        return h.hexdigest()[:16]

    def outer_parameters(self) -> Dict[str, torch.Tensor]:
        """Copies of θ, by parameter name; lands the overlapped round in flight first (:meth:`land`, blocking).

        With a process group every rank gets rank 0's (a collective)."""
        self.land()
        return dict(zip(self.names, self._copies(self._theta)))

    def _copies(self, arrays: List[np.ndarray]) -> List[torch.Tensor]:
        """float32 CPU copies of θ or m (with a process group: rank 0's, on every rank)."""
        own = [torch.from_numpy(a.copy()) for a in arrays] if self._leads else None
        if self._replicas is None:
            return cast(List[torch.Tensor], own)
        return self._replicas.tensors(own, [tuple(p.shape) for p in self.params])

    def state_dict(self) -> Dict[str, Any]:
        """The inner optimizer's state, the counters, θ (``outer``) and m (``momentum``), copies by parameter name.

        Lands the overlapped round in flight first (:meth:`land`, blocking; its error is raised here)."""
        self.land()
        return {
            "inner_optimizer": self.inner_optimizer.state_dict(),
            "local_step": self.local_step,
            "outer_step_count": self.outer_step_count,
            "samples": self._samples,
            "losses": list(self._losses),
            "outer": self.outer_parameters(),
            "momentum": dict(zip(self.names, self._copies(self._momentum))),
            **({"fragment_samples": list(self._fragment_samples)} if self.fragments > 1 else {}),
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a checkpoint and gives its θ and m to the agent (the model's parameters are the caller's).

        With ``average_momentum=False`` the agent gets θ and m stays in this trainer. State dicts are the same
        either way, so a checkpoint of one setting loads into the other. An overlapped round in flight is
        dropped (as by :meth:`load_state_from_peers`): the checkpoint replaces θ and m.
        """
        self._drop()
        self.inner_optimizer.load_state_dict(state["inner_optimizer"])
        self.local_step = int(state["local_step"])
        self.outer_step_count = int(state.get("outer_step_count", 0))
        self._samples = int(state.get("samples", 0))
        saved = state.get("fragment_samples")
        self._fragment_samples = ([int(x) for x in saved] if isinstance(saved, list) and len(saved) == self.fragments
                                  else [self._samples] * self.fragments)
        self._losses = [float(x) for x in state.get("losses", [])]
        if self.averager is None:
            return  # θ and m live on the process group's rank 0
        with self.averager.get_tensors():
            for n, theta, m in zip(self.names, self._theta, self._momentum):
                theta[...] = state["outer"][n].detach().cpu().float().numpy()
                m[...] = state["momentum"][n].detach().cpu().float().numpy()
        self.averager.publish_state()

    @property
    def complete(self) -> bool:
        """See :attr:`DecentralizedAverager.complete`: check it at start, a restarted trainer of a finished run exits.

        With a process group: rank 0's answer (a collective)."""
        if self._replicas is None:
            return self._agent().complete
        return self._replicas.outcome(lambda: self._agent().complete)

    def finish(self) -> Dict[str, Any]:
        """This trainer is done: see :meth:`DecentralizedAverager.finish`. Call it after the last outer step.

        Lands the overlapped round in flight first (:meth:`land`); when that round raised, its error is raised
        here before the agent is told (the round counts as landed: call ``finish()`` again).
        """
        self.land()
        if self._replicas is None:
            return self._agent().finish()
        return self._replicas.outcome(lambda: self._agent().finish())

    def close(self) -> None:
        """Lands the overlapped round in flight, if any (its error becomes a RuntimeWarning), then unmaps the region.

        With a process group this is not a collective: rank 0 lands its round for itself (call :meth:`land` on
        every rank first to keep the replicas equal), the other ranks only forget theirs."""
        self._follower_round = None
        if self.averager is None:
            return
        if self._round is not None:
            try:
                self._land()
            except Exception as err:  # noqa: BLE001 - close() must not fail on the last round's error
                warnings.warn(f"the outer round in flight at close() did not average: {err}", RuntimeWarning, stacklevel=2)
        self._theta.clear()
        self._momentum.clear()
        self.averager.close()

    def _nesterov_into_region(self, keep_sent: bool, part: range) -> None:
        """θ, m of the parameters in ``part`` (m in this trainer with average_momentum=False) become θ', m';
        keep_sent copies them."""
        mu, lr = np.float32(self.outer_momentum), np.float32(self.outer_lr)
        with self._agent().get_tensors():
            for i in part:
                local = self._local_float32(self.params[i], self._pinned[i])
                nesterov_update(self._theta[i], self._momentum[i], local, lr, mu)
            if keep_sent:
                self._sent_theta = [self._theta[i].copy() for i in part]
                self._sent_momentum = [self._momentum[i].copy() for i in part] if self.average_momentum else []

    def _gradient_into_region(self, part: range, keep_sent: bool) -> None:
        """Δ = θ − p (float32) of the parameters in ``part`` into the region, for the agent to step θ, m with;
        keep_sent also computes this trainer's own θ', m' into copies (for the model while the round is in flight)."""
        mu, lr = np.float32(self.outer_momentum), np.float32(self.outer_lr)
        sent_theta: List[np.ndarray] = []
        sent_momentum: List[np.ndarray] = []
        with self._agent().get_tensors():
            for i in part:
                local = self._local_float32(self.params[i], self._pinned[i])
                np.subtract(self._theta[i], local, out=self._gradient[i])
                if keep_sent:
                    theta, m = self._theta[i].copy(), self._momentum[i].copy()
                    nesterov_update(theta, m, local, lr, mu)
                    sent_theta.append(theta)
                    sent_momentum.append(m)
        self._sent_theta, self._sent_momentum = sent_theta, sent_momentum

    def _fragment_of(self, part: range) -> int:
        return next(f for f, (a, b) in enumerate(self.fragment_bounds) if a == part.start and b == part.stop)

    def _local_float32(self, p: torch.Tensor, pinned: Optional[torch.Tensor]) -> np.ndarray:
        if pinned is not None:
            pinned.copy_(p.detach(), non_blocking=True)
            torch.cuda.current_stream(p.device).synchronize()
            return pinned.numpy()
        return p.detach().to(torch.float32).numpy()

    def _theta_into_model(self, part: Optional[range] = None, source: Optional[List[np.ndarray]] = None) -> None:
        """θ into the parameters in ``part`` (default: all); ``source``: arrays to load instead, one per parameter of part."""
        for k, i in enumerate(range(len(self.params)) if part is None else part):
            p, pinned, theta = self.params[i], self._pinned[i], self._theta[i] if source is None else source[k]
            src = torch.from_numpy(theta)
            if pinned is not None:
                pinned.copy_(src)
                p.data.copy_(pinned, non_blocking=True)
            else:
                p.data.copy_(src)
        _sync(self.params)

    def _report(self, samples: int, losses: List[float]) -> None:
        loss = sum(losses) / len(losses) if losses else None
        try:
            self._agent().client.report(loss=loss, samples=samples, params_hash=self._theta_hash())
        except AgentError as err:
            if not self._reported_error:
                warnings.warn(f"the agent refused a progress report: {err}", RuntimeWarning, stacklevel=3)
                self._reported_error = True


def fragment_bounds(counts: List[int], fragments: int) -> List[Tuple[int, int]]:
    """Streaming DiLoCo's split: ``fragments`` contiguous runs ``[start, end)`` of the parameters (in the order
    given) of about equal element count. Cut k (k = 1 … P−1) falls where the running element count comes nearest
    k·N/P (ties: the earlier cut), each fragment keeping at least one parameter: a parameter is never split, so a
    model with one huge tensor gets unequal fragments."""
    n = len(counts)
    if not 1 <= fragments <= n:
        raise ValueError(f"cannot split {n} parameters into {fragments} fragments")
    running = [0]
    for c in counts:
        running.append(running[-1] + int(c))
    total = running[-1]
    cuts = [0]
    for k in range(1, fragments):
        target = total * k / fragments
        cuts.append(min(range(cuts[-1] + 1, n - (fragments - k) + 1), key=lambda i: (abs(running[i] - target), i)))
    cuts.append(n)
    return [(cuts[k], cuts[k + 1]) for k in range(fragments)]


def nesterov_update(theta: np.ndarray, m: np.ndarray, local: np.ndarray, lr: np.float32, mu: np.float32) -> None:
    """In place, float32, in this order: Δ = θ − local; m = μ·m + Δ; θ = θ − lr·(Δ + μ·m) (SGD, nesterov=True)."""
    delta = theta - local
    m *= mu
    m += delta
    update = m * mu
    update += delta
    update *= lr
    theta -= update
