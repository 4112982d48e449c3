"""DecentralizedAverager: the trainer's tensors in a shared-memory region (or a local buffer sent as binary)."""
from __future__ import annotations

import contextlib
import itertools
import logging
import mmap
import os
import re
import struct
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from .client import AGENT_POLL_SECONDS, REGISTER_PROGRESS_SECONDS, AgentClient, AgentError, OuterStep, StepResult, encode_frame, step_control
from .layout import DTYPES, GENERATION_OFFSET, HEADER_BYTES, MAGIC, SEQ_OFFSET, Slot, TensorSpec, region_layout

TensorLike = Union[np.ndarray, Tuple[Sequence[int], str]]
"""A tensor to average: an array (float32 or float16, its values are the initial ones) or ``(shape, dtype name)``."""

_names = itertools.count()
_REGION_NAME = re.compile(r"^trainer-(\d+)(?:-\d+)?\.avs$")
_T = TypeVar("_T")
log = logging.getLogger("averaging_swarm")

#: Seconds a call waits for a lost agent to come back (a container restart; Kubernetes' crash back-off reaches 300 s).
RECONNECT_TIMEOUT = 600.0


def _spec(name: str, value: TensorLike) -> Tuple[TensorSpec, Optional[np.ndarray]]:
    if isinstance(value, np.ndarray):
        dtype = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}.get(value.dtype)
        if dtype is None:
            raise TypeError(f"tensor {name!r} is {value.dtype}; give float32 or float16 arrays, or (shape, 'bfloat16') for bfloat16")
        return TensorSpec(name, tuple(int(d) for d in value.shape), dtype), value
    shape, dtype = value
    if dtype not in DTYPES:
        raise TypeError(f"tensor {name!r} has dtype {dtype!r}; the agent stores float32, float16 or bfloat16")
    return TensorSpec(name, tuple(int(d) for d in shape), dtype), None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DecentralizedAverager:
    """Averages a fixed set of named tensors with the swarm through the pod's agent.

    ``transport="shm"`` (default) creates ``trainer-<pid>.avs`` in ``shm_dir`` (default ``$AVS_SHM_DIR``) and
    hands the agent only control calls; ``transport="binary"`` keeps the tensors in this process and sends
    them in ``application/vnd.avs.tensors`` bodies. Either way :meth:`get_tensors` gives numpy views of the
    values, and :meth:`step` leaves the group's weighted mean in them.

    The agent may start after the trainer (a pod starts its containers together): the constructor waits up to
    ``reconnect_timeout`` seconds for its API. The trainer outlives its agent's restarts (a crashed agent container
    comes back in the same pod): a call that finds the agent gone, or back without our tensors, waits up to
    ``reconnect_timeout`` seconds for it, registers the same tensors and region again and runs once more. The agent
    then holds the swarm's state if a peer or a checkpoint gave it one, else ours; our tensors are left as they were.
    ``reconnect_timeout=0`` waits for nothing: the first failed call raises.
    """

    def __init__(self, tensors: Mapping[str, TensorLike], url: Optional[str] = None, shm_dir: Optional[str] = None,
                 transport: str = "shm", client: Optional[AgentClient] = None, reconnect_timeout: float = RECONNECT_TIMEOUT):
        if transport not in ("shm", "binary"):
            raise ValueError(f"transport is {transport!r}; use 'shm' or 'binary'")
        if not tensors:
            raise ValueError("give at least one tensor to average")
        pairs = [_spec(name, value) for name, value in tensors.items()]
        self.specs: List[TensorSpec] = [s for s, _ in pairs]
        self.slots, self.region_bytes = region_layout(self.specs)
        self.transport = transport
        self.client = client or AgentClient(url)
        self.reconnect_timeout = reconnect_timeout
        self.reconnects = 0
        """How many times the agent was found restarted and registered with again."""
        self.region_path: Optional[str] = None
        self._writing = False
        if transport == "shm":
            folder = shm_dir if shm_dir is not None else os.environ.get("AVS_SHM_DIR")
            if not folder:
                raise ValueError("shared memory needs a folder: set AVS_SHM_DIR or pass shm_dir (or use transport='binary')")
            self.region_path = self._create_region(folder)
            with open(self.region_path, "r+b") as f:
                self._buffer = mmap.mmap(f.fileno(), self.region_bytes)
        else:
            self._buffer = mmap.mmap(-1, self.region_bytes)
            self._buffer[0:len(MAGIC)] = MAGIC
        self._header = np.frombuffer(self._buffer, dtype="<u8", count=3)
        self._views: Dict[str, np.ndarray] = {
            spec.name: np.frombuffer(self._buffer, dtype=DTYPES[spec.dtype], count=spec.count, offset=slot.offset).reshape(spec.shape)
            for spec, slot in zip(self.specs, self.slots)
        }
        with self.get_tensors() as views:
            for spec, initial in pairs:
                if initial is not None:
                    views[spec.name][...] = initial
        try:
            # In a pod the trainer and the agent start together: wait for the agent's API as for a restarted agent.
            self._register_when_up(None)
        except BaseException:
            self.close()
            raise

    def _register(self) -> None:
        self.registration = self.client.register(self.specs, os.path.basename(self.region_path) if self.region_path else None)
        if self.region_path is not None:
            self._check_layout(self.registration.get("region"))

    def _register_when_up(self, lost: Optional[AgentError]) -> str:
        """Registers, waiting up to ``reconnect_timeout`` while the agent cannot be reached or is stopping
        (``lost``: why the agent went away, None at the start); returns the agent's state's origin."""
        started = time.monotonic()
        deadline = started + max(self.reconnect_timeout, 0)
        if lost is not None:
            log.warning("lost the agent (%s); waiting up to %g s for it to come back", lost, self.reconnect_timeout)
        note = started + REGISTER_PROGRESS_SECONDS
        while True:
            try:
                self._register()
                return str(self.client.status().get("origin", "initial"))
            except AgentError as err:
                if not (err.status is None or err.status >= 500):
                    raise
                now = time.monotonic()
                if now > deadline:
                    if lost is None and self.reconnect_timeout <= 0:
                        raise
                    raise AgentError(f"the agent at {self.client.url} did not {'come back' if lost else 'answer'} within "
                                     f"{self.reconnect_timeout:g} s (reconnect_timeout): {err}") from None
                if now > note:
                    log.info("still waiting for the agent at %s (%.0f s): %s", self.client.url, now - started, err)
                    note = now + REGISTER_PROGRESS_SECONDS
                time.sleep(AGENT_POLL_SECONDS)

    def _call(self, call: Callable[[], _T]) -> _T:
        """Runs one call to the agent; if the agent was lost (see the class docstring), reattaches and runs it once more."""
        try:
            return call()
        except AgentError as err:
            if not err.agent_lost or self.reconnect_timeout <= 0:
                raise
            cause = err
        self._reattach(cause)
        return call()

    def _reattach(self, cause: AgentError) -> None:
        """Waits for the agent to answer again, registers our tensors and region with it, and gives it our tensors
        when it has no state of its own (no peer or checkpoint offered one)."""
        started = time.monotonic()
        origin = self._register_when_up(cause)
        torn = self._header is not None and int(self._header[SEQ_OFFSET // 8]) % 2 == 1 and not self._writing
        if torn:
            # The agent died while writing into the region: each value is the old or the new one. We are its only writer now.
            self._header[SEQ_OFFSET // 8] += 1
            log.warning("the agent died while writing into the region: its tensors hold part of that write")
        if self.registration.get("created", True) and origin == "initial":
            self._publish()
        self.reconnects += 1
        log.warning("the agent is back after %.1f s; registered again (its state: %s)", time.monotonic() - started,
                    "ours" if origin == "initial" else f"from {origin}")

    def _create_region(self, folder: str) -> str:
        if not os.path.isdir(folder):
            raise ValueError(f"the shared-memory folder {folder} does not exist")
        for entry in os.listdir(folder):  # files of trainers that died without close()
            match = _REGION_NAME.match(entry)
            if match and int(match.group(1)) != os.getpid() and not _pid_alive(int(match.group(1))):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, entry))
        n = next(_names)
        path = os.path.join(folder, f"trainer-{os.getpid()}{'' if n == 0 else f'-{n}'}.avs")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, self.region_bytes)
            os.pwrite(fd, MAGIC, 0)
        finally:
            os.close(fd)
        return path

    def _check_layout(self, region: Any) -> None:
        if not isinstance(region, dict):
            raise AgentError("the agent did not answer register with the region's layout; it may predate the shared-memory API")
        theirs = [Slot(o["name"], o.get("dtype", "float32"), int(o["offset"]), int(o["bytes"])) for o in region.get("offsets", [])]
        if theirs != self.slots or int(region.get("bytes", -1)) != self.region_bytes:
            raise AgentError(f"the agent lays the region out as {region} but this client computed {self.region_bytes} bytes with {self.slots}")

    @property
    def generation(self) -> int:
        """The number of the agent's last write into the region."""
        return int(self._header[GENERATION_OFFSET // 8])

    @contextlib.contextmanager
    def get_tensors(self) -> Iterator[Dict[str, np.ndarray]]:
        """Views of the tensors (bfloat16 ones as uint16 bits) to read or write between steps; holds the seqlock (seq odd) inside."""
        if self._writing:
            raise RuntimeError("get_tensors() is already open; nest no calls")
        seq = SEQ_OFFSET // 8
        self._header[seq] += 1
        self._writing = True
        try:
            yield self._views
        finally:
            self._writing = False
            self._header[seq] += 1

    def step(self, weight: Optional[float] = None, gather: Any = None, timeout: Optional[float] = None,
             names: Optional[Sequence[str]] = None, outer: Optional[OuterStep] = None) -> StepResult:
        """One averaging round; the tensors then hold the group's weighted mean, or the values sent when ``averaged`` is False.

        ``names`` (default: all): average these registered tensors only, with peers that average the same ones
        (a *subset*: Streaming DiLoCo's fragments). The other tensors are left exactly as they are: the agent
        neither reads nor writes them (shared memory), or sends them back as they came (binary). Empty, unknown
        or repeated names: :class:`AgentError` (400), nothing averaged.

        ``outer`` (:class:`OuterStep`): DiLoCo's outer step, taken by the agent: ``names`` hold this trainer's
        pseudo-gradients, the agent steps the θ and m that ``outer`` names (found a group or not) and they come back
        with ``names`` (the pseudo-gradients as averaged, or as sent). ``result.outer`` says what the group averaged.
        """
        self._check_idle("step()")
        if self.transport == "shm":
            return self._call(lambda: self.client.step(weight, gather, timeout, names, outer))

        def binary_step() -> StepResult:
            body, tensors = self.client.request("POST", "/v1/step", frame=encode_frame(step_control(weight, gather, timeout, names, outer), self._payload()),
                                                timeout=(timeout or 0) + self.client.timeout)
            self._receive(tensors)
            return StepResult.from_json(body)
        return self._call(binary_step)

    def load_state_from_peers(self) -> str:
        """Loads the agent's tensors (a live peer's state for a newcomer) into ours; returns their origin.

        ``origin`` is ``initial`` (nothing yet: the tensors are then the agent's zeros), ``peers``, ``checkpoint``, ``trainer`` or ``averaged``.
        """
        self._check_idle("load_state_from_peers()")
        if self.transport == "shm":
            return str(self._call(self.client.state)["origin"])

        def binary_state() -> str:
            body, tensors = self.client.request("GET", "/v1/state", accept_binary=True)
            self._receive(tensors)
            return str(body["origin"])
        return self._call(binary_state)

    def publish_state(self) -> None:
        """Makes our current tensors the agent's state (origin ``trainer``), the one peers download."""
        self._check_idle("publish_state()")
        self._call(self._publish)

    def _publish(self) -> None:
        if self.transport == "shm":
            self.client.publish_state()
        else:
            self.client.request("POST", "/v1/state", frame=encode_frame({}, self._payload()))

    @property
    def complete(self) -> bool:
        """Whether the swarm's run has ended for this agent (completion reached, or ``finish()`` taken). A trainer
        that a cluster restarts after it finished sees True at once and should exit 0 rather than train again."""
        return bool(self._call(self.client.status).get("complete", False))

    def finish(self) -> Dict[str, Any]:
        """Tells the agent this trainer is done (``POST /v1/finish``). With ``spec.completion.onTrainerExit`` the
        agent's run ends at its newest averaged round and this returns once the final checkpoint is durable."""
        return self._call(self.client.finish)

    def close(self) -> None:
        """Unmaps and deletes the region file; the agent refuses steps until a new averager registers."""
        views = getattr(self, "_views", None)
        if views is not None:
            views.clear()
        self._header = None  # type: ignore[assignment]
        buffer = getattr(self, "_buffer", None)
        if buffer is not None:
            with contextlib.suppress(BufferError):  # views handed out still hold it: the mapping goes with them
                buffer.close()
        if self.region_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.region_path)
            self.region_path = None

    def __enter__(self) -> "DecentralizedAverager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_idle(self, what: str) -> None:
        if self._writing:
            raise RuntimeError(f"{what} was called inside get_tensors(); leave the with block first")

    def _payload(self) -> List[memoryview]:
        whole = memoryview(self._buffer)
        return [whole[s.offset:s.offset + s.bytes] for s in self.slots]

    def _receive(self, tensors: Optional[memoryview]) -> None:
        expected = sum(s.bytes for s in self.slots)
        if tensors is None or len(tensors) != expected:
            raise AgentError(f"the agent's binary answer holds {0 if tensors is None else len(tensors)} tensor bytes, not {expected}")
        with self.get_tensors():
            at = 0
            for s in self.slots:
                self._buffer[s.offset:s.offset + s.bytes] = tensors[at:at + s.bytes]
                at += s.bytes
