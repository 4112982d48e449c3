"""The control API of the agent (docs/trainer-api.md) over loopback HTTP, standard library only."""
from __future__ import annotations

import http.client
import json
import logging
import os
import struct
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .layout import TensorSpec


log = logging.getLogger("averaging_swarm")

#: Seconds between two progress lines while ``register`` waits for the agent's state download.
REGISTER_PROGRESS_SECONDS = 10.0
#: Seconds between two attempts to reach an agent that is starting: a refused loopback connection costs
#: next to nothing, and every tenth of a second here is a restarted agent's way back into rounds.
AGENT_POLL_SECONDS = 0.05
#: A request ``timeout`` that waits as long as the agent takes (it bounds its own work).
WAIT_FOR_AGENT = -1.0

BINARY_TYPE = "application/vnd.avs.tensors"
Buffer = Union[bytes, bytearray, memoryview]


class AgentError(Exception):
    """The agent refused a request (``status`` is its HTTP status) or could not be used (``status`` is None).

    ``code`` names the refusals a client acts on: ``not-registered`` (the agent holds no tensors: it restarted),
    ``shutting-down`` (it is stopping; a restarted agent takes its place in the pod)."""

    def __init__(self, message: str, status: Optional[int] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.code = code

    @property
    def agent_lost(self) -> bool:
        """The agent could not be reached, or answered as one that restarted since the tensors were registered."""
        return self.status is None or self.code in ("not-registered", "shutting-down")


@dataclass
class StepResult:
    """The summary of one averaging round."""
    averaged: bool
    """False when no group formed in time: the tensors then hold the values sent and ``error`` says why."""
    group_size: int
    peers: List[str]
    gathered: Dict[str, Any]
    """Each member's ``gather`` value, by peer id."""
    divergence: float
    """Relative distance between the values sent and the values received."""
    error: Optional[str] = None
    matchmaking_ms: Optional[float] = None
    allreduce_ms: Optional[float] = None
    copy_ms: Optional[float] = None
    """Time the agent spent moving tensors between the trainer's region or body and its own copy."""
    round: int = 0
    """Rounds behind the agent's state (restored or downloaded rounds count)."""
    complete: bool = False
    """The swarm's run is complete (``spec.completion``): steps no longer average; save and exit."""
    delta: bool = False
    """The round carried each member's change since the state the group shared, not its values (a lossy codec's
    error is then relative to the change): see docs/trainer-api.md."""
    outer: Optional[str] = None
    """An outer step's round (``step(outer=...)``): ``"pseudo-gradients"`` when the group held the same θ and m and
    averaged the pseudo-gradients alone, ``"parameters"`` when it averaged θ' and m'; None otherwise."""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
    """The agent's whole answer (groupId, partsKeptLocal, unreachedPeers, generation, bytesCopied, ...)."""

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "StepResult":
        return cls(
            averaged=bool(body.get("averaged", False)),
            group_size=int(body.get("groupSize", 1)),
            peers=list(body.get("peers", [])),
            gathered=dict(body.get("gathered", {})),
            divergence=float(body.get("divergence", 0.0)),
            error=body.get("error"),
            matchmaking_ms=body.get("matchmakingMs"),
            allreduce_ms=body.get("allreduceMs"),
            copy_ms=body.get("copyMs"),
            round=int(body.get("round", 0)),
            complete=bool(body.get("complete", False)),
            delta=bool(body.get("delta", False)),
            outer=body.get("outer"),
            raw={k: v for k, v in body.items() if k != "tensors"},
        )


def encode_frame(control: Mapping[str, Any], tensors: Iterable[Buffer] = ()) -> List[Buffer]:
    """The ``application/vnd.avs.tensors`` body as pieces: u32 n (little-endian), n bytes of JSON, the tensors' bytes."""
    head = json.dumps(control, separators=(",", ":")).encode()
    return [struct.pack("<I", len(head)), head, *tensors]


def decode_frame(body: Buffer) -> Tuple[Dict[str, Any], memoryview]:
    """The JSON summary and the tensor bytes of an ``application/vnd.avs.tensors`` body."""
    view = memoryview(body)
    if len(view) < 4:
        raise AgentError(f"the agent's binary answer has {len(view)} bytes, fewer than its 4-byte header")
    (n,) = struct.unpack_from("<I", view, 0)
    if 4 + n > len(view):
        raise AgentError(f"the agent's binary answer announces {n} bytes of JSON but holds {len(view) - 4}")
    return json.loads(bytes(view[4:4 + n])), view[4 + n:]


class AgentClient:
    """Control calls to one agent: register, step, state, status, report.

    ``url`` defaults to ``http://127.0.0.1:$AVS_SIDECAR_PORT`` (port 9401 when unset); ``timeout`` is the
    HTTP timeout in seconds, added to a step's own timeout.
    """

    def __init__(self, url: Optional[str] = None, timeout: float = 600.0):
        if url is None:
            url = "http://127.0.0.1:" + os.environ.get("AVS_SIDECAR_PORT", "9401")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def register(self, tensors: Sequence[TensorSpec], region: Optional[str] = None) -> Dict[str, Any]:
        """Declares the tensors (same names, shapes, dtypes and order on every peer) and the region file, if any.

        A newcomer's agent first downloads the swarm's state from a peer (4 GB for 1B float32
        parameters: minutes on a slow link). This waits as long as that takes (the agent bounds the
        download itself) and logs the agent's progress every ``REGISTER_PROGRESS_SECONDS``."""
        body: Dict[str, Any] = {"tensors": [t.to_json() for t in tensors]}
        if region is not None:
            body["region"] = region
        done = threading.Event()
        watcher = threading.Thread(target=self._report_loading, args=(done,), name="averaging-swarm-register", daemon=True)
        watcher.start()
        try:
            return self.request("POST", "/v1/register", body, timeout=WAIT_FOR_AGENT)[0]
        finally:
            done.set()

    def _report_loading(self, done: threading.Event) -> None:
        while not done.wait(REGISTER_PROGRESS_SECONDS):
            try:
                loading = self.status().get("loading")
            except AgentError:
                continue
            if loading and not done.is_set():
                log.info("waiting for the agent: %s", loading.get("message"))

    def step(self, weight: Optional[float] = None, gather: Any = None, timeout: Optional[float] = None,
             names: Optional[Sequence[str]] = None, outer: Optional[OuterStep] = None) -> StepResult:
        """One averaging round over the registered region: the agent reads it, averages and writes the result back.

        ``names``: average these registered tensors only (docs/trainer-api.md), with peers averaging the same ones.
        ``outer``: an outer step over ``names`` as the pseudo-gradients (:class:`OuterStep`)."""
        return StepResult.from_json(self.request("POST", "/v1/step", step_control(weight, gather, timeout, names, outer),
                                                 timeout=(timeout or 0) + self.timeout)[0])

    def state(self) -> Dict[str, Any]:
        """``GET /v1/state``: with a region, the agent writes its tensors into it; ``origin`` says where they came from."""
        return self.request("GET", "/v1/state")[0]

    def publish_state(self) -> Dict[str, Any]:
        """``POST /v1/state``: the agent takes the region's values as its own (origin ``trainer``)."""
        return self.request("POST", "/v1/state", {})[0]

    def status(self) -> Dict[str, Any]:
        return self.request("GET", "/v1/status")[0]

    def report(self, loss: Optional[float] = None, samples: Optional[int] = None, params_hash: Optional[str] = None) -> None:
        """Progress for the agent's metrics: the loss, samples since the last report, a hash of the parameters."""
        body: Dict[str, Any] = {}
        if loss is not None:
            body["loss"] = float(loss)
        if samples is not None:
            body["samples"] = int(samples)
        if params_hash is not None:
            body["paramsHash"] = params_hash
        self.request("POST", "/v1/report", body)

    def finish(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """``POST /v1/finish``: this trainer is done. With ``spec.completion.onTrainerExit`` the agent's run ends at its
        newest averaged round; the answer comes once the final checkpoint is durable (``complete``, ``round``,
        ``checkpointRound``). Without it, the agent goes on serving its state and ``complete`` stays false."""
        return self.request("POST", "/v1/finish", {}, timeout=timeout)[0]

    def request(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None, *,
                frame: Optional[Sequence[Buffer]] = None, accept_binary: bool = False,
                timeout: Optional[float] = None) -> Tuple[Dict[str, Any], Optional[memoryview]]:
        """One call: a JSON body or a binary ``frame``; returns the JSON answer and, for binary answers, the tensor bytes."""
        headers = {}
        data: Any = None
        if frame is not None:
            data = frame
            headers["content-type"] = BINARY_TYPE
            headers["content-length"] = str(sum(len(memoryview(p).cast("B")) for p in frame))
        elif body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        if accept_binary:
            headers["accept"] = BINARY_TYPE
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=None if timeout == WAIT_FOR_AGENT else (timeout or self.timeout)) as res:
                payload = res.read()
                if res.headers.get_content_type() == BINARY_TYPE:
                    return decode_frame(payload)
                return (json.loads(payload) if payload else {}), None
        except urllib.error.HTTPError as err:
            message, code = _error_of(err.code, err.read())
            raise AgentError(message, err.code, code) from None
        except http.client.HTTPException as err:  # the agent went away mid-answer (IncompleteRead, BadStatusLine)
            raise AgentError(f"the agent at {self.url} could not be reached: {type(err).__name__}") from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise AgentError(f"the agent at {self.url} could not be reached: {reason}") from None


@dataclass(frozen=True)
class OuterStep:
    """DiLoCo's outer step, taken by the agent in a step (``step(names=Δ, outer=OuterStep(...))``).

    The step's ``names`` are the pseudo-gradients Δ; ``params`` and ``buffers`` name the outer parameters θ and
    their momentum buffers m, pairwise with ``names`` (same shapes). The agent steps θ and m as torch's SGD with
    these ``lr``, ``momentum`` and ``nesterov`` would (float32, bit for bit as numpy's float32). A group whose
    members hold the same θ and m (they left the same rounds together) averages Δ alone and every member steps with
    the mean, so their θ and m stay bit-identical with 1× the parameters on the wire; any other group's members step
    with their own Δ and average θ' and m' (2×), after which they agree. Found a group or not, the step is taken.
    """
    params: Sequence[str]
    buffers: Sequence[str]
    lr: float
    momentum: float = 0.0
    nesterov: bool = False

    def to_json(self) -> Dict[str, Any]:
        return {"params": [str(n) for n in self.params], "buffers": [str(n) for n in self.buffers],
                "lr": float(self.lr), "momentum": float(self.momentum), "nesterov": bool(self.nesterov)}


def step_control(weight: Optional[float], gather: Any, timeout: Optional[float],
                 names: Optional[Sequence[str]] = None, outer: Optional[OuterStep] = None) -> Dict[str, Any]:
    control: Dict[str, Any] = {}
    if outer is not None:
        control["outer"] = outer.to_json()
    if names is not None:
        if isinstance(names, str):
            raise TypeError("names must be a sequence of tensor names, not one string")
        control["names"] = [str(n) for n in names]
    if weight is not None:
        control["weight"] = float(weight)
    if gather is not None:
        control["gather"] = gather
    if timeout is not None:
        control["timeout"] = float(timeout)
    return control


def _error_of(status: int, text: bytes) -> Tuple[str, Optional[str]]:
    """The agent's one-sentence error and its ``code``, if any."""
    try:
        body = json.loads(text)
        code = body.get("code")
        return str(body["error"]), (str(code) if code is not None else None)
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"the agent answered {status} without a JSON error", None
