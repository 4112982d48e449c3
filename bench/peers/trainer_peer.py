"""A PyTorch trainer and its agent as one benchmark peer (bench/trainer-step.ts's table).

The peer starts its own agent (dist/agent/main.js, sidecar workload) as a child in its process group,
exactly as a pod runs the agent container beside the trainer, then times what a trainer waits for
in one averaging step through the package `averaging_swarm`:

  BENCH_TRAINER_PATH=shm     numpy arrays in the shared region, trained in place: step() alone
  BENCH_TRAINER_PATH=torch   a torch parameter outside the region: ParameterAverager.step() copies it
                             in, averages, copies the mean back
  BENCH_TRAINER_PATH=cuda    the same with the parameter on the GPU (device 0): copies between the GPU and
                             the page-locked region
  BENCH_TRAINER_PATH=binary  raw little-endian bytes in the HTTP bodies (no shared folder)
  BENCH_TRAINER_PATH=base64  the API before shared memory and binary bodies: base64 float32 inside JSON, both ways

Beside the step time it reports the agent's own round (matchmaking + all-reduce, from the reply),
the agent's copy time and bytes, and the peak RSS of agent and trainer apart.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_peer import post, run  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NODE = os.path.join(ROOT, "node_modules", ".bin", "node")
AGENT = os.path.join(ROOT, "dist", "agent", "main.js")
CHUNK = 1 << 22
JSON_MAX_ELEMENTS = 64 * 1024 * 1024  # the sidecar API's limit for base64 JSON (agent/workloads/sidecar/request-parsing.ts)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def fill(array: np.ndarray, rank: int) -> None:
    """Element i is rank + 1 + (i mod 1024)/1024, as every other benchmark peer (bench/lib/protocol.ts)."""
    ramp = (np.arange(1024, dtype=np.float32) / 1024).astype(np.float32)
    flat = array.reshape(-1)
    for start in range(0, flat.size, CHUNK):
        stop = min(start + CHUNK, flat.size)
        index = np.arange(start, stop) % 1024
        flat[start:stop] = ramp[index] + np.float32(rank + 1)


def max_abs_error(array: np.ndarray, ranks: list) -> float:
    offset = sum(r + 1 for r in ranks) / len(ranks)
    ramp = np.arange(1024, dtype=np.float64) / 1024
    flat = array.reshape(-1)
    worst = 0.0
    for start in range(0, flat.size, CHUNK):
        stop = min(start + CHUNK, flat.size)
        expected = ramp[np.arange(start, stop) % 1024] + offset
        error = float(np.max(np.abs(flat[start:stop].astype(np.float64) - expected)))
        if error != error:
            return float("inf")
        worst = max(worst, error)
    return worst


class Base64Trainer:
    """The path every trainer had before shared memory and binary bodies, kept here as the 'before' row."""

    def __init__(self, url: str, elements: int) -> None:
        if elements > JSON_MAX_ELEMENTS:
            raise RuntimeError(f"the API before binary bodies carried at most {JSON_MAX_ELEMENTS} values (base64 inside one JSON document) and refused to register {elements}")
        self.url = url
        self.values = np.zeros(elements, np.float32)
        self.call("/v1/register", {"tensors": [{"name": "x", "shape": [elements]}]})

    def call(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=None) as response:
            return json.loads(response.read())

    def step(self, gather) -> dict:
        reply = self.call("/v1/step", {"tensors": {"x": base64.b64encode(self.values.tobytes()).decode()}, "gather": gather, "timeout": 300})
        self.values = np.frombuffer(base64.b64decode(reply.pop("tensors")["x"]), dtype="<f4").copy()
        return reply


class TrainerPeer:
    def __init__(self, env) -> None:
        self.env = env
        self.path = os.environ.get("BENCH_TRAINER_PATH", "shm")
        self.p2p_port, self.sidecar_port, self.metrics_port = free_port(), free_port(), free_port()
        base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        self.shm_dir = tempfile.mkdtemp(prefix=f"avs-bench-{env.rank}-", dir=base)
        self.agent = None
        self.trainer = None
        self.group_ranks = [env.rank]
        self.agent_round_ms, self.copy_ms, self.bytes_copied, self.matchmaking_ms = [], [], [], []
        self.round_index = 0
        if env.rank == 0:
            self.start_agent(bootstrap="")
        self.address = self.multiaddr() if env.rank == 0 else ""

    def start_agent(self, bootstrap: str) -> None:
        e = self.env
        agent_env = dict(os.environ,
                         AVS_SWARM="bench", AVS_POD_NAME=f"trainer-bench-{e.rank}", AVS_PREFIX="bench",
                         AVS_POD_IP="127.0.0.1", AVS_P2P_PORT=str(self.p2p_port), AVS_METRICS_PORT=str(self.metrics_port),
                         AVS_WORKLOAD="sidecar", AVS_SIDECAR_PORT=str(self.sidecar_port), AVS_SHM_DIR=self.shm_dir,
                         AVS_TARGET_GROUP_SIZE=str(e.group_size), AVS_MIN_GROUP_SIZE=str(e.group_size),
                         AVS_AVERAGING_EXPIRATION="5s", AVS_REQUEST_TIMEOUT="2s", AVS_ALLREDUCE_TIMEOUT="600s",
                         AVS_PART_SIZE_BYTES=str(e.part_bytes), AVS_COMPRESSION=e.compression, AVS_LOG_LEVEL="warn")
        if bootstrap:
            agent_env["AVS_BOOTSTRAP_PEERS"] = bootstrap
        self.agent = subprocess.Popen([NODE, AGENT], env=agent_env, stdout=sys.stderr, stderr=sys.stderr)
        self.url = f"http://127.0.0.1:{self.sidecar_port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.agent.poll() is not None:
                raise RuntimeError(f"the agent exited with {self.agent.returncode} before its API listened")
            try:
                with urllib.request.urlopen(self.url + "/v1/status", timeout=2) as response:
                    self.peer_id = json.loads(response.read())["peerId"]
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the agent's sidecar API did not answer within 60 s")

    def multiaddr(self) -> str:
        return f"/ip4/127.0.0.1/tcp/{self.p2p_port}/p2p/{self.peer_id}"

    def connect(self, addrs) -> None:
        if self.env.rank != 0:
            self.start_agent(bootstrap=addrs[0])
        elements = self.env.elements
        if self.path == "base64":
            self.trainer = Base64Trainer(self.url, elements)
            return
        from averaging_swarm import DecentralizedAverager
        if self.path in ("torch", "cuda"):
            import torch
            from averaging_swarm.torch import ParameterAverager
            device = "cuda" if self.path == "cuda" else "cpu"
            self.param = torch.nn.Parameter(torch.zeros(elements, dtype=torch.float32, device=device))
            self.trainer = ParameterAverager([("x", self.param)], url=self.url, shm_dir=self.shm_dir)
        else:
            transport = "binary" if self.path == "binary" else "shm"
            self.trainer = DecentralizedAverager({"x": np.zeros(elements, np.float32)}, url=self.url,
                                                 shm_dir=self.shm_dir, transport=transport)

    def values(self) -> np.ndarray:
        if self.path == "base64":
            return self.trainer.values
        if self.path in ("torch", "cuda"):
            return self.param.detach().cpu().numpy()
        with self.trainer.get_tensors() as tensors:
            return tensors["x"]

    def prepare(self, round_index: int) -> None:
        self.round_index = round_index
        if self.path == "base64":
            fill(self.trainer.values, self.env.rank)
        elif self.path == "torch":
            import torch
            with torch.no_grad():
                fill(self.param.detach().numpy(), self.env.rank)
        elif self.path == "cuda":
            import torch
            host = np.empty(self.param.numel(), np.float32)
            fill(host, self.env.rank)
            with torch.no_grad():
                self.param.copy_(torch.from_numpy(host))
        else:
            with self.trainer.get_tensors() as tensors:
                fill(tensors["x"], self.env.rank)

    def all_reduce(self, round_index: int):
        if self.path == "base64":
            raw = self.trainer.step(self.env.rank)
        else:
            result = self.trainer.step(weight=1.0, gather=self.env.rank, timeout=300)
            raw = result.raw
        if not raw.get("averaged"):
            raise RuntimeError(f"the step did not average: {raw.get('error')}")
        if raw.get("partsKeptLocal", 0) > 0:
            raise RuntimeError(f"{raw['partsKeptLocal']} parts were not averaged")
        self.group_ranks = sorted(raw["gathered"].values())
        if round_index >= self.env.warmup:
            self.agent_round_ms.append(raw["matchmakingMs"] + raw["allreduceMs"])
            self.copy_ms.append(raw.get("copyMs", 0))
            self.matchmaking_ms.append(raw["matchmakingMs"])
            self.bytes_copied.append(raw.get("bytesCopied", 0))
        return raw["matchmakingMs"]

    def check(self) -> float:
        return max_abs_error(self.values(), self.group_ranks)

    def note(self) -> str:
        return {"shm": "numpy arrays in the shared region, trained in place",
                "torch": "torch parameter copied into the region and back by ParameterAverager",
                "cuda": "torch parameter on the GPU, copied into the page-locked region and back by ParameterAverager",
                "binary": "raw bytes in the HTTP bodies",
                "base64": "base64 float32 in JSON (the API before binary bodies)"}[self.path]

    def extra(self) -> dict:
        return {"agentRoundMs": self.agent_round_ms, "agentCopyMs": self.copy_ms, "agentBytesCopied": self.bytes_copied, "agentMatchmakingMs": self.matchmaking_ms,
                "agentPeakRssBytes": peak_rss(self.agent.pid), "trainerPeakRssBytes": peak_rss(os.getpid())}

    def close(self) -> None:
        if self.agent is not None:
            self.agent.terminate()
            try:
                self.agent.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.agent.kill()
        shutil.rmtree(self.shm_dir, ignore_errors=True)


if __name__ == "__main__":
    run(TrainerPeer)
