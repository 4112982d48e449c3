"""Real agents as processes (``node dist/agent-bundle/main.js``, the one file the agent image runs; workload sidecar), one shared-memory folder each."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Set

import pytest

REPO = Path(__file__).resolve().parents[3]
AGENT_MAIN = REPO / "dist" / "agent-bundle" / "main.js"
NODE = REPO / "node_modules" / ".bin" / "node"


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_handed_out: Set[int] = set()


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now, from below the kernel's ephemeral range (and below 30000).

    A port chosen by binding port 0 comes from the ephemeral range, and any outbound connection may take
    it as its local port before the agent binds it: the agents dial each other while starting, and one
    bound its sidecar port after such a dial had taken it ("the sidecar port 127.0.0.1:39847 is already
    in use", clean-clone CI of 70e5283). The kernel never picks a local port below that range by itself.
    """
    high = min(_ephemeral_low(), 30000)
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(20000, high)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free TCP port from 20000 to {high} on 127.0.0.1 after 500 tries")


@dataclass
class Agent:
    index: int
    env: Dict[str, str]
    shm_dir: str
    log_path: str
    proc: Optional[subprocess.Popen] = None
    peer_id: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.env['AVS_SIDECAR_PORT']}"

    @property
    def address(self) -> str:
        return f"/ip4/127.0.0.1/tcp/{self.env['AVS_P2P_PORT']}/p2p/{self.peer_id}"

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def start(self) -> None:
        out = open(self.log_path, "ab")
        node = str(NODE) if NODE.exists() else shutil.which("node") or "node"
        self.proc = subprocess.Popen([node, str(AGENT_MAIN)], env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        out.close()

    def wait_for_peer_id(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            for line in self.log().splitlines():
                if '"agent started"' in line:
                    self.peer_id = json.loads(line)["peerId"]
                    return
            self._check_alive()
            time.sleep(0.05)
        raise TimeoutError(f"agent {self.index} logged no peer id:\n{self.log()[-3000:]}")

    def wait_for_api(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/v1/status", timeout=1) as res:
                    if res.status == 200:
                        return
            except OSError:
                pass
            self._check_alive()
            time.sleep(0.1)
        raise TimeoutError(f"agent {self.index}'s API did not answer:\n{self.log()[-3000:]}")

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"agent {self.index} exited with {self.proc.returncode}:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=8)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Swarm:
    agents: List[Agent] = field(default_factory=list)

    def __getitem__(self, i: int) -> Agent:
        return self.agents[i]

    def __len__(self) -> int:
        return len(self.agents)


StartSwarm = Callable[..., Swarm]


@pytest.fixture
def start_swarm(tmp_path: Path) -> Iterator[StartSwarm]:
    """``start_swarm(n, **env)``: n agents bootstrapped off the first, groups of n by default; stopped after the test."""
    if not AGENT_MAIN.exists():
        pytest.fail(f"{AGENT_MAIN} is missing: run `npm run build` in {REPO} first")
    started: List[Agent] = []
    folders: List[str] = []

    def start(n: int, **overrides: str) -> Swarm:
        prefix = f"pytest-{uuid.uuid4().hex[:8]}"
        shm_root = "/dev/shm" if os.path.isdir("/dev/shm") else None
        agents: List[Agent] = []
        for i in range(n):
            shm_dir = tempfile.mkdtemp(prefix=f"avs-{prefix}-{i}-", dir=shm_root)
            folders.append(shm_dir)
            env = {k: v for k, v in os.environ.items() if not k.startswith("AVS_")}
            env.update({
                "AVS_SWARM": "pytest", "AVS_POD_NAME": f"agent-{i}", "AVS_PREFIX": prefix, "AVS_WORKLOAD": "sidecar",
                "AVS_POD_IP": "127.0.0.1", "AVS_SIDECAR_PORT": str(_free_port()), "AVS_P2P_PORT": str(_free_port()),
                "AVS_METRICS_PORT": str(_free_port()), "AVS_SHM_DIR": shm_dir, "AVS_AVERAGING_EXPIRATION": "3s",
                "AVS_REQUEST_TIMEOUT": "1500ms", "AVS_ALLREDUCE_TIMEOUT": "30s", "AVS_TARGET_GROUP_SIZE": str(max(n, 2)),
                "AVS_MIN_GROUP_SIZE": str(max(n, 2)), "AVS_LOG_LEVEL": "info",
            })
            env.update(overrides)
            agents.append(Agent(i, env, shm_dir, str(tmp_path / f"agent-{i}.log")))
        started.extend(agents)
        deadline = time.monotonic() + 60
        agents[0].start()
        agents[0].wait_for_peer_id(deadline)
        for a in agents[1:]:
            a.env["AVS_BOOTSTRAP_PEERS"] = agents[0].address
            a.start()
        for a in agents:
            a.wait_for_api(deadline)
        return Swarm(agents)

    yield start
    for a in started:
        a.stop()
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
