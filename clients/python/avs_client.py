"""Client of the AveragingSwarm agent's sidecar API, for trainers in Python.

Standard library plus numpy only, in one file: copy it next to your trainer. Tensors are numpy
float32 arrays; on the wire they are base64 of little-endian float32, and a PyTorch trainer converts
with ``t.detach().cpu().numpy()`` and ``torch.from_numpy(a)``.

    client = AvsClient()                      # http://127.0.0.1:$AVS_SIDECAR_PORT
    client.register({"w": (10, 3), "b": (3,)})
    result = client.step({"w": w, "b": b}, weight=samples_seen)
    if result.averaged:
        w, b = result.tensors["w"], result.tensors["b"]
"""
from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

Shape = Union[Sequence[int], Tuple[int, ...]]


class AvsError(Exception):
    """The agent refused a request; the message is its one-sentence reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class StepResult:
    averaged: bool
    """False when no group formed in time: tensors then hold the values sent, error says why."""
    tensors: Dict[str, np.ndarray]
    group_size: int
    peers: list
    gathered: Dict[str, Any]
    divergence: float
    error: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class State:
    origin: str
    """initial (never written), peers (downloaded from a live peer at register), trainer (a step that did not average) or averaged."""
    tensors: Dict[str, np.ndarray]


def encode(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")


def decode(text: str, shape: Shape) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32).reshape(tuple(shape))


class AvsClient:
    def __init__(self, base_url: Optional[str] = None, timeout: float = 600.0):
        """base_url defaults to http://127.0.0.1:$AVS_SIDECAR_PORT (9401 when unset)."""
        if base_url is None:
            base_url = "http://127.0.0.1:" + os.environ.get("AVS_SIDECAR_PORT", "9401")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.shapes: Dict[str, Tuple[int, ...]] = {}

    def register(self, tensors: Mapping[str, Shape]) -> bool:
        """Declares name -> shape once (order matters and must match on every peer); True when this call created the averager."""
        specs = [{"name": name, "shape": [int(d) for d in shape]} for name, shape in tensors.items()]
        body = self._call("POST", "/v1/register", {"tensors": specs})
        self.shapes = {t["name"]: tuple(t["shape"]) for t in body["tensors"]}
        return bool(body["created"])

    def step(self, tensors: Mapping[str, np.ndarray], weight: Optional[float] = None,
             gather: Any = None, timeout: Optional[float] = None) -> StepResult:
        """Hands in the current values and returns the group's mean (or the values sent, when averaged is False)."""
        request: Dict[str, Any] = {"tensors": {name: encode(a) for name, a in tensors.items()}}
        if weight is not None:
            request["weight"] = float(weight)
        if gather is not None:
            request["gather"] = gather
        if timeout is not None:
            request["timeout"] = float(timeout)
        body = self._call("POST", "/v1/step", request, (timeout or 0) + self.timeout)
        shapes = {name: np.shape(a) for name, a in tensors.items()}
        return StepResult(
            averaged=body["averaged"],
            tensors={name: decode(text, shapes[name]) for name, text in body["tensors"].items()},
            group_size=body["groupSize"],
            peers=body["peers"],
            gathered=body["gathered"],
            divergence=body["divergence"],
            error=body.get("error"),
            raw={k: v for k, v in body.items() if k != "tensors"},
        )

    def state(self) -> State:
        """The agent's current tensors; start from them when origin is not 'initial' (call register first)."""
        body = self._call("GET", "/v1/state")
        if not self.shapes:
            self.shapes = {t["name"]: tuple(t["shape"]) for t in self.status()["tensors"]}
        return State(body["origin"], {name: decode(text, self.shapes[name]) for name, text in body["tensors"].items()})

    def status(self) -> Dict[str, Any]:
        return self._call("GET", "/v1/status")

    def _call(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers={"content-type": "application/json"} if data is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as res:
                return json.loads(res.read())
        except urllib.error.HTTPError as err:
            text = err.read()
            try:
                message = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                message = f"the agent answered {err.code} with a body that is not a JSON error"
            raise AvsError(err.code, message) from None
