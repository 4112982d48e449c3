"""averaging_swarm.torch against real agents: in-place parameter averaging and DiLoCo."""
from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from averaging_swarm.layout import bfloat16_to_float32, float32_to_bfloat16  # noqa: E402
from averaging_swarm.torch import DiLoCoOptimizer, ParameterAverager, nesterov_update  # noqa: E402

from helpers import dyadic, in_threads, weighted_mean32  # noqa: E402


def params_for(seed: int) -> list:
    rng = np.random.default_rng(seed)
    w = torch.nn.Parameter(torch.from_numpy(dyadic(rng, (4, 3))))
    b = torch.nn.Parameter(torch.from_numpy(dyadic(rng, (3,))))
    e = torch.nn.Parameter(torch.from_numpy(bfloat16_to_float32(float32_to_bfloat16(dyadic(rng, (7,))))).to(torch.bfloat16))
    return [("w", w), ("b", b), ("emb", e)]


def test_parameter_averager_averages_float32_and_bfloat16_parameters_in_place(start_swarm):
    swarm = start_swarm(2)
    models = [params_for(1), params_for(2)]
    before = [{n: p.detach().float().numpy().copy() for n, p in m} for m in models]
    ptrs = [[p.data_ptr() for _, p in m] for m in models]
    avgs = [ParameterAverager(m, url=a.url, shm_dir=a.shm_dir) for m, a in zip(models, swarm.agents)]
    results = in_threads(lambda: avgs[0].step(weight=1, timeout=30), lambda: avgs[1].step(weight=3, timeout=30))
    assert all(r.averaged for r in results), [r.error for r in results]
    for m, p0 in zip(models, ptrs):
        assert [p.data_ptr() for _, p in m] == p0, "parameters were updated in place"
        for name, p in m:
            mean = weighted_mean32([before[0][name], before[1][name]], [1, 3])
            if p.dtype == torch.bfloat16:
                mean = bfloat16_to_float32(float32_to_bfloat16(mean))
            np.testing.assert_array_equal(p.detach().float().numpy(), mean, err_msg=name)
            assert p.grad is None
    for a in avgs:
        a.close()


def regression(seed: int, n: int = 64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g) + seed
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    return x, y


def train(opt: DiLoCoOptimizer, model: torch.nn.Module, seed: int, steps: int) -> list:
    x, y = regression(seed)
    results = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        r = opt.step(samples=len(x) * (seed + 1), loss=loss.item())
        opt.zero_grad()
        if r is not None:
            results.append(r)
    return results


def diloco(model: torch.nn.Module, agent, **kw) -> DiLoCoOptimizer:
    return DiLoCoOptimizer(model.named_parameters(), torch.optim.SGD(model.parameters(), lr=0.01),
                           url=agent.url, shm_dir=agent.shm_dir, **kw)


def test_diloco_trainers_in_one_group_leave_each_outer_step_with_bit_identical_outer_parameters(start_swarm):
    swarm = start_swarm(3)
    torch.manual_seed(0)
    models = [torch.nn.Linear(4, 1) for _ in range(3)]  # different initial weights: the first outer step makes them one
    opts = [diloco(m, a, local_steps=3, timeout=30) for m, a in zip(models, swarm.agents)]
    for outer in range(2):
        runs = in_threads(*[lambda o=o, m=m, s=s: train(o, m, s, 3) for s, (o, m) in enumerate(zip(opts, models))])
        for results in runs:
            assert len(results) == 1 and results[0].averaged, results[0].error
            assert results[0].group_size == 3
        hashes = {o.outer_params_hash for o in opts}
        assert len(hashes) == 1, f"outer step {outer}: {hashes}"
        assert len(next(iter(hashes))) == 16
        thetas = [b"".join(t.numpy().tobytes() for t in o.outer_parameters().values()) for o in opts]
        assert thetas[0] == thetas[1] == thetas[2]
        for m, o in zip(models, opts):
            for name, p in m.named_parameters():
                assert torch.equal(p.detach(), o.outer_parameters()[name]), "the model holds θ"
        momenta = [o.state_dict()["momentum"] for o in opts]
        for name in momenta[0]:
            assert torch.equal(momenta[0][name], momenta[1][name]) and torch.equal(momenta[0][name], momenta[2][name])
    for o in opts:
        o.close()


def test_diloco_alone_falls_back_to_its_own_pseudo_gradient_within_the_timeout(start_swarm):
    swarm = start_swarm(1)  # groups need 2: no group can form
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 1)
    opt = diloco(model, swarm[0], local_steps=2, timeout=3, outer_lr=0.5, outer_momentum=0.75)
    assert opt.origin == "initial"
    theta = {n: t.numpy().copy() for n, t in opt.outer_parameters().items()}
    momentum = {n: np.zeros_like(t) for n, t in theta.items()}
    train(opt, model, 0, 1)
    x, y = regression(0)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.inner_optimizer.step()
    local = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    opt.inner_optimizer.zero_grad()
    for n in theta:
        nesterov_update(theta[n], momentum[n], local[n], np.float32(0.5), np.float32(0.75))
    # The second inner step was taken by hand above; the outer step runs now.
    opt.local_step += 1
    started = time.monotonic()
    result = opt.outer_step()
    took = time.monotonic() - started
    assert not result.averaged and result.error
    assert took < 3 + 2.5, f"the outer step took {took:.1f} s with timeout 3"
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), theta[n])
        np.testing.assert_array_equal(opt.state_dict()["momentum"][n].numpy(), momentum[n])
    opt.close()


def test_a_diloco_newcomer_starts_from_the_swarms_outer_parameters_and_momentum(start_swarm):
    swarm = start_swarm(2)
    torch.manual_seed(2)
    first_model = torch.nn.Linear(4, 1)
    first = diloco(first_model, swarm[0], local_steps=2, timeout=2)
    results = train(first, first_model, 0, 2)  # alone: the fallback leaves θ', m' (m' nonzero)
    assert len(results) == 1 and not results[0].averaged
    state = first.state_dict()
    assert any(bool(m.abs().sum() > 0) for m in state["momentum"].values())

    torch.manual_seed(3)
    newcomer_model = torch.nn.Linear(4, 1)
    newcomer = diloco(newcomer_model, swarm[1], local_steps=2, timeout=2)
    assert newcomer.origin == "peers"
    assert newcomer.outer_params_hash == first.outer_params_hash
    for name, p in newcomer_model.named_parameters():
        assert torch.equal(p.detach(), state["outer"][name])
        assert torch.equal(newcomer.state_dict()["momentum"][name], state["momentum"][name])
    first.close()
    newcomer.close()
