"""A trainer killed mid-step, and bad input: the agent answers 4xx in one sentence and keeps serving."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from averaging_swarm import AgentClient, AgentError, DecentralizedAverager
from averaging_swarm.client import encode_frame
from averaging_swarm.layout import MAGIC, TensorSpec, float32_to_bfloat16, region_layout

from helpers import in_threads, weighted_mean32

TRAINER = textwrap.dedent("""
    import sys, numpy as np
    from averaging_swarm import DecentralizedAverager
    avg = DecentralizedAverager({"w": np.arange(12, dtype=np.float32).reshape(4, 3) / 4, "b": np.full(3, 2.5, np.float32)},
                                url=sys.argv[1], shm_dir=sys.argv[2])
    print("registered", flush=True)
    avg.step(weight=1, timeout=float(sys.argv[3]))
    print("step returned", flush=True)
""")


def test_a_trainer_killed_mid_step_leaves_the_agent_serving_and_its_restart_resumes(start_swarm):
    swarm = start_swarm(2)
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, swarm[0].url, swarm[0].shm_dir, "5"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "registered"
        time.sleep(1.0)  # the step is in flight: the other agent's trainer never steps, so no group forms
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    client = AgentClient(swarm[0].url)
    assert client.status()["registered"] is True

    # The restarted trainer registers the same tensors with a new region and resumes from the agent's state.
    restarted = DecentralizedAverager({"w": np.zeros((4, 3), np.float32), "b": np.zeros(3, np.float32)},
                                      url=swarm[0].url, shm_dir=swarm[0].shm_dir)
    assert restarted.registration["created"] is False
    assert restarted.load_state_from_peers() == "trainer"
    with restarted.get_tensors() as t:
        np.testing.assert_array_equal(t["w"], np.arange(12, dtype=np.float32).reshape(4, 3) / 4)
        np.testing.assert_array_equal(t["b"], np.full(3, 2.5, np.float32))
        mine = {n: a.copy() for n, a in t.items()}
    other = DecentralizedAverager({"w": np.ones((4, 3), np.float32), "b": np.ones(3, np.float32)},
                                  url=swarm[1].url, shm_dir=swarm[1].shm_dir)
    results = in_threads(lambda: restarted.step(weight=1, timeout=30), lambda: other.step(weight=1, timeout=30))
    assert all(r.averaged for r in results), [r.error for r in results]
    with restarted.get_tensors() as t:
        np.testing.assert_array_equal(t["w"], weighted_mean32([mine["w"], np.ones((4, 3), np.float32)], [1, 1]))
    restarted.close()
    other.close()


def test_bad_input_is_a_4xx_in_one_sentence_and_the_agent_keeps_serving(start_swarm):
    swarm = start_swarm(1)
    agent = swarm[0]
    client = AgentClient(agent.url)
    specs = [TensorSpec("w", (4, 3)), TensorSpec("bf", (5,), "bfloat16")]
    _, size = region_layout(specs)

    def refused(call, status: int, match: str) -> AgentError:
        with pytest.raises(AgentError, match=match) as info:
            call()
        assert info.value.status == status, str(info.value)
        assert "\n" not in str(info.value) and str(info.value).strip()
        assert client.status()["peerId"], "the agent still answers"
        return info.value

    refused(lambda: client.register(specs, region="missing.avs"), 400, "missing.avs")
    refused(lambda: client.register(specs, region="../escape.avs"), 400, ".")
    small = os.path.join(agent.shm_dir, "small.avs")
    with open(small, "wb") as f:
        f.write(MAGIC + bytes(56))
    refused(lambda: client.register(specs, region="small.avs"), 400, "small.avs")
    no_magic = os.path.join(agent.shm_dir, "nomagic.avs")
    with open(no_magic, "wb") as f:
        f.write(bytes(size))
    refused(lambda: client.register(specs, region="nomagic.avs"), 400, "nomagic.avs")

    avg = DecentralizedAverager({"w": np.full((4, 3), 0.5, np.float32), "bf": ((5,), "bfloat16")}, url=agent.url, shm_dir=agent.shm_dir)
    with avg.get_tensors() as t:
        t["bf"][...] = float32_to_bfloat16(np.full(5, 1.5, np.float32))
    avg.publish_state()
    refused(lambda: client.register([TensorSpec("w", (3, 4)), specs[1]]), 409, ".")
    refused(lambda: client.register([specs[0], TensorSpec("bf", (5,), "float16")]), 409, ".")

    with avg.get_tensors() as t:
        t["w"][1, 2] = np.nan
    err = refused(lambda: avg.step(weight=1, timeout=5), 400, "w")
    assert "5" in str(err) or "[1, 2]" in str(err) or "1,2" in str(err), f"names the index: {err}"
    with avg.get_tensors() as t:
        t["w"][1, 2] = 0.5
        t["bf"][3] = float32_to_bfloat16(np.array([np.inf], np.float32))[0]
    refused(lambda: avg.step(weight=1, timeout=5), 400, "bf")
    assert avg.load_state_from_peers() == "trainer", "the refused steps left the agent's state alone"
    with avg.get_tensors() as t:
        np.testing.assert_array_equal(t["w"], np.full((4, 3), 0.5, np.float32))
        np.testing.assert_array_equal(t["bf"], float32_to_bfloat16(np.full(5, 1.5, np.float32)))

    # Binary bodies of the wrong length (a wrong shape) say how many bytes were expected.
    short = encode_frame({"weight": 1}, [np.zeros(11, np.float32).tobytes(), bytes(10)])
    refused(lambda: client.request("POST", "/v1/step", frame=short), 400, str(12 * 4 + 5 * 2))
    refused(lambda: client.report(params_hash="xyz"), 400, ".")
    client.report(loss=0.25, samples=10, params_hash="0123456789abcdef")
    assert client.status()["registered"] is True
    avg.close()
