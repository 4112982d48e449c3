"""A trainer outlives its agent's restart (a crashed agent container comes back in the same pod, the trainer's running).

The agent's process is killed (or told to stop) and started again a second later with the same environment, as the
kubelet restarts a container; the trainer's next call waits for it, registers again and goes on, with nothing lost.
"""
from __future__ import annotations

import signal
import threading

import numpy as np
import pytest

from averaging_swarm import AgentError, DecentralizedAverager

from helpers import dyadic, in_threads, weighted_mean32

torch = pytest.importorskip("torch")

from averaging_swarm.torch import DiLoCoOptimizer  # noqa: E402


def restart_later(agent, how: int, delay: float = 1.0) -> threading.Thread:
    """Stops the agent's process now (SIGKILL, or SIGTERM and its exit) and starts a new one ``delay`` s after."""
    assert agent.proc is not None
    agent.proc.send_signal(how)
    agent.proc.wait(timeout=30)
    restarter = threading.Timer(delay, agent.start)
    restarter.start()
    return restarter


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_a_trainer_rides_through_its_agents_restart_and_averages_exactly_again(start_swarm, how):
    swarm = start_swarm(2)
    rng = np.random.default_rng(11)
    a = DecentralizedAverager({"w": dyadic(rng, (5, 3))}, url=swarm[0].url, shm_dir=swarm[0].shm_dir)
    b = DecentralizedAverager({"w": dyadic(rng, (5, 3))}, url=swarm[1].url, shm_dir=swarm[1].shm_dir)
    first = in_threads(lambda: a.step(weight=1, timeout=30), lambda: b.step(weight=3, timeout=30))
    assert all(r.averaged for r in first), [r.error for r in first]

    values = [dyadic(rng, (5, 3)), dyadic(rng, (5, 3))]
    for averager, v in zip((a, b), values):
        with averager.get_tensors() as t:
            t["w"][...] = v
    old_peer = b.client.status()["peerId"]
    restarter = restart_later(swarm[1], how)
    try:
        results = in_threads(lambda: a.step(weight=1, timeout=60), lambda: b.step(weight=3, timeout=60))
    finally:
        restarter.join()
    assert all(r.averaged and r.group_size == 2 for r in results), [r.error for r in results]
    assert b.reconnects == 1 and a.reconnects == 0
    status = b.client.status()
    assert status["peerId"] != old_peer, "a new agent process answers"
    assert status["origin"] == "averaged"
    expected = weighted_mean32(values, [1, 3])
    for averager in (a, b):
        with averager.get_tensors() as t:
            np.testing.assert_array_equal(t["w"], expected)
    a.close()
    b.close()


def test_a_trainer_that_starts_before_its_agent_waits_for_it(start_swarm):
    swarm = start_swarm(1)
    restarter = restart_later(swarm[0], signal.SIGKILL, delay=1.5)  # down now, as an agent still starting in its pod
    try:
        averager = DecentralizedAverager({"w": np.full(3, 2.0, np.float32)}, url=swarm[0].url, shm_dir=swarm[0].shm_dir)
    finally:
        restarter.join()
    assert averager.registration["created"] is True
    assert averager.load_state_from_peers() == "initial"
    with pytest.raises(AgentError, match="could not be reached"):
        DecentralizedAverager({"w": np.ones(3, np.float32)}, url="http://127.0.0.1:9", shm_dir=swarm[0].shm_dir, reconnect_timeout=0)
    averager.close()


def test_an_agent_that_does_not_come_back_fails_the_call_in_one_sentence(start_swarm):
    swarm = start_swarm(1)
    averager = DecentralizedAverager({"w": np.ones(3, np.float32)}, url=swarm[0].url, shm_dir=swarm[0].shm_dir,
                                     reconnect_timeout=1.5)
    assert swarm[0].proc is not None
    swarm[0].proc.kill()
    swarm[0].proc.wait(timeout=30)
    with pytest.raises(AgentError, match=r"did not come back within 1.5 s \(reconnect_timeout\)") as info:
        averager.step(timeout=5)
    assert "\n" not in str(info.value)
    with averager.get_tensors() as t:
        np.testing.assert_array_equal(t["w"], np.ones(3, np.float32))
    averager.close()


def inner_steps(opt: DiLoCoOptimizer, model: torch.nn.Module, seed: int, steps: int) -> dict:
    """Inner steps short of the outer step (local_steps is larger); returns the local parameters they leave."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 4, generator=g) + seed
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    for _ in range(steps):
        torch.nn.functional.mse_loss(model(x), y).backward()
        assert opt.step(samples=64) is None
        opt.zero_grad()
    return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def test_a_diloco_trainer_keeps_its_inner_steps_through_an_agent_restart_and_the_group_steps_with_the_exact_mean(start_swarm):
    swarm = start_swarm(2)
    torch.manual_seed(5)
    models = [torch.nn.Linear(4, 1) for _ in range(2)]
    opts = [DiLoCoOptimizer(m.named_parameters(), torch.optim.SGD(m.parameters(), lr=0.01), local_steps=1000,
                            timeout=60, outer_lr=0.7, outer_momentum=0.9, url=a.url, shm_dir=a.shm_dir)
            for m, a in zip(models, swarm.agents)]
    for outer in range(2):  # the second round averages pseudo-gradients: both hold one θ and m
        in_threads(*[lambda o=o, m=m, s=s: inner_steps(o, m, s + 10 * outer, 3) for s, (o, m) in enumerate(zip(opts, models))])
        results = in_threads(*[lambda o=o: o.outer_step() for o in opts])
        assert all(r.averaged for r in results), [r.error for r in results]
    assert results[0].outer == "pseudo-gradients"
    theta, momentum = opts[0].outer_parameters(), opts[0].state_dict()["momentum"]

    # Trainer 1's agent dies during its inner steps and comes back; the trainer never stops.
    restarter = restart_later(swarm[1], signal.SIGKILL)
    try:
        local = in_threads(*[lambda o=o, m=m, s=s: inner_steps(o, m, s + 20, 3) for s, (o, m) in enumerate(zip(opts, models))])
        results = in_threads(*[lambda o=o: o.outer_step() for o in opts])
    finally:
        restarter.join()
    assert all(r.averaged and r.group_size == 2 for r in results), [r.error for r in results]
    assert opts[1].averager is not None and opts[1].averager.reconnects == 1
    # The new agent took θ, m and the shared outer state from its peer, so the group averaged Δ alone, and every
    # member stepped the θ, m of before with the mean of both trainers' inner steps (none lost to the restart).
    assert {r.outer for r in results} == {"pseudo-gradients"}
    assert len({o.outer_params_hash for o in opts}) == 1
    mu, lr = np.float32(0.9), np.float32(0.7)
    after_theta, after_m = opts[1].outer_parameters(), opts[1].state_dict()["momentum"]
    for name in theta:
        t0, m0 = theta[name].numpy(), momentum[name].numpy()
        mean = weighted_mean32([t0 - loc[name] for loc in local], [192, 192])
        np.testing.assert_allclose(opts[1]._gradient[opts[1].names.index(name)], mean, rtol=1e-6, atol=1e-7)
        mean = opts[1]._gradient[opts[1].names.index(name)].copy()
        m1 = m0 * mu
        m1 += mean
        update = m1 * mu
        update += mean
        update *= lr
        np.testing.assert_array_equal(after_m[name].numpy(), m1, err_msg=name)
        np.testing.assert_array_equal(after_theta[name].numpy(), t0 - update, err_msg=name)
        assert torch.equal(dict(models[1].named_parameters())[name].detach(), after_theta[name])
    for o in opts:
        o.close()
