"""averaging_swarm.torch against real agents: in-place parameter averaging and DiLoCo."""
from __future__ import annotations

import os
import time
from concurrent.futures import Future

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from averaging_swarm import AgentError  # noqa: E402
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


def test_diloco_with_float16_sends_changes_from_its_second_outer_step_and_members_stay_bit_identical(start_swarm):
    swarm = start_swarm(2, AVS_COMPRESSION="float16")
    torch.manual_seed(1)
    models = [torch.nn.Linear(4, 1) for _ in range(2)]
    # θ' and m' travel (average_pseudo_gradients=False): as changes since the round before.
    opts = [diloco(m, a, local_steps=2, timeout=30, average_pseudo_gradients=False) for m, a in zip(models, swarm.agents)]
    for outer in range(3):
        runs = in_threads(*[lambda o=o, m=m, s=s: train(o, m, s, 2) for s, (o, m) in enumerate(zip(opts, models))])
        for results in runs:
            assert len(results) == 1 and results[0].averaged, results[0].error
            # The first round has no base the pair shares; every later one does: the one before.
            assert results[0].delta == (outer > 0), f"outer step {outer}: delta {results[0].delta}"
        assert len({o.outer_params_hash for o in opts}) == 1, f"outer step {outer}: θ differs"
        momenta = [o.state_dict()["momentum"] for o in opts]
        for name in momenta[0]:
            assert torch.equal(momenta[0][name], momenta[1][name])
    for o in opts:
        o.close()


def test_a_diloco_newcomer_holds_its_donors_outer_state_and_joins_pseudo_gradient_rounds_at_once(start_swarm):
    swarm = start_swarm(3, AVS_MIN_GROUP_SIZE="2")
    torch.manual_seed(5)
    models = [torch.nn.Linear(4, 1) for _ in range(3)]
    first = [diloco(m, a, local_steps=2, timeout=30) for m, a in zip(models[:2], swarm.agents[:2])]
    for outer in range(2):
        runs = in_threads(*[lambda o=o, m=m, s=s: train(o, m, s, 2) for s, (o, m) in enumerate(zip(first, models))])
        assert [r[0].outer for r in runs] == ["parameters" if outer == 0 else "pseudo-gradients"] * 2
    # The third trainer starts now: its agent downloads a member's θ, m, and the state its rounds shared.
    newcomer = diloco(models[2], swarm.agents[2], local_steps=2, timeout=30)
    assert newcomer.origin == "peers"
    assert newcomer.outer_params_hash == first[0].outer_params_hash
    opts = first + [newcomer]
    runs = in_threads(*[lambda o=o, m=m, s=s: train(o, m, s, 2) for s, (o, m) in enumerate(zip(opts, models))])
    assert all(r[0].averaged and r[0].group_size == 3 for r in runs), [(r[0].error, r[0].group_size) for r in runs]
    assert [r[0].outer for r in runs] == ["pseudo-gradients"] * 3, "no θ', m' round for the newcomer"
    assert len({o.outer_params_hash for o in opts}) == 1
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


# ---------------------------------------------------------------------------------------------------------------
# Overlapped parameter averaging: step(wait=False), land()


def mixed_params(seed: int) -> list:
    """float32, float16 and bfloat16 parameters holding dyadic values their dtype stores exactly."""
    rng = np.random.default_rng(seed)
    w = torch.nn.Parameter(torch.from_numpy(dyadic(rng, (4, 3))))
    b = torch.nn.Parameter(torch.from_numpy(dyadic(rng, (3,))))
    h = torch.nn.Parameter(torch.from_numpy(dyadic(rng, (5,)).astype(np.float16)))
    e = torch.nn.Parameter(torch.from_numpy(bfloat16_to_float32(float32_to_bfloat16(dyadic(rng, (7,))))).to(torch.bfloat16))
    return [("w", w), ("b", b), ("half", h), ("emb", e)]


def as32(p: torch.Tensor) -> np.ndarray:
    return p.detach().float().numpy().copy()


def rounded(values: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float32 values rounded to nearest even in the parameter's dtype, widened back to float32."""
    if dtype == torch.bfloat16:
        return bfloat16_to_float32(float32_to_bfloat16(values))
    if dtype == torch.float16:
        return values.astype(np.float16).astype(np.float32)
    return values.astype(np.float32)


def local_steps(models: list, rng: np.random.Generator, dyadic_steps: bool) -> list:
    """Adds a known delta to every parameter in its own dtype (as an optimizer step would); returns the new values."""
    with torch.no_grad():
        for model in models:
            for _, p in model:
                if dyadic_steps:
                    delta = rng.integers(-64, 64, size=tuple(p.shape)) / 1024
                else:
                    delta = rng.standard_normal(tuple(p.shape)) * 0.01  # not dyadic: the float32 sums round
                p.add_(torch.from_numpy(delta.astype(np.float32)).to(p.dtype))
    return [{n: as32(p) for n, p in model} for model in models]


def landed(trained: np.ndarray, mean32: np.ndarray, sent: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """What land() computes, in numpy float32: trained + (the mean as stored − sent), rounded once to the dtype."""
    return rounded(trained + (rounded(mean32, dtype) - sent), dtype)


def test_an_overlapped_round_keeps_the_local_steps_taken_meanwhile_and_the_next_step_lands_it_first(start_swarm):
    swarm = start_swarm(2)
    models = [mixed_params(11), mixed_params(12)]
    weights = [1, 3]
    avgs = [ParameterAverager(m, url=a.url, shm_dir=a.shm_dir) for m, a in zip(models, swarm.agents)]
    rng = np.random.default_rng(99)
    try:
        # Round 1: both trainers send a snapshot and train on while the agents average it.
        assert not any(a.round_in_flight for a in avgs)
        assert all(a.land() is None for a in avgs)
        sent = [{n: as32(p) for n, p in m} for m in models]
        futures = [a.step(weight=w, timeout=30, wait=False) for a, w in zip(avgs, weights)]
        assert all(isinstance(f, Future) for f in futures)
        assert all(a.round_in_flight for a in avgs)
        assert not any(f.cancel() for f in futures), "a round in flight cannot be cancelled"
        trained = local_steps(models, rng, dyadic_steps=False)
        results = [a.land() for a in avgs]
        assert all(r is not None and r.averaged for r in results), [r and r.error for r in results]
        assert [r.group_size for r in results] == [2, 2]
        assert results[0] is futures[0].result() and results[1] is futures[1].result()
        assert not any(a.round_in_flight for a in avgs)
        assert all(a.land() is None for a in avgs), "landed once"
        for i, m in enumerate(models):
            for name, p in m:
                mean32 = weighted_mean32([sent[0][name], sent[1][name]], weights)
                expected = landed(trained[i][name], mean32, sent[i][name], p.dtype)
                np.testing.assert_array_equal(as32(p), expected, err_msg=f"trainer {i} {name}")
                # That is the mean of the snapshots plus this trainer's own local delta, up to the dtype's rounding:
                exact = mean32.astype(np.float64) + (trained[i][name].astype(np.float64) - sent[i][name])
                if p.dtype == torch.float32:
                    np.testing.assert_allclose(as32(p), exact, rtol=2e-6, atol=1e-6, err_msg=name)
                else:
                    half_ulp = 2.0 ** (-8 if p.dtype == torch.bfloat16 else -11)
                    bound = half_ulp * (np.abs(mean32) + np.abs(as32(p))) + 1e-6
                    assert np.all(np.abs(as32(p) - exact) <= bound), (name, as32(p), exact)
                assert p.grad is None

        # Round 2 in flight, then a plain step(): it lands round 2 first, then averages the landed values.
        sent2 = [{n: as32(p) for n, p in m} for m in models]
        futures2 = [a.step(weight=w, timeout=30, wait=False) for a, w in zip(avgs, weights)]
        trained2 = local_steps(models, rng, dyadic_steps=True)
        results3 = in_threads(*[lambda a=a, w=w: a.step(weight=w, timeout=30) for a, w in zip(avgs, weights)])
        assert all(f.done() and f.result().averaged for f in futures2), [f.result().error for f in futures2]
        assert all(r.averaged for r in results3), [r.error for r in results3]
        assert not any(a.round_in_flight for a in avgs)
        for name, p in models[0]:
            mean2 = weighted_mean32([sent2[0][name], sent2[1][name]], weights)
            landed2 = [landed(trained2[i][name], mean2, sent2[i][name], p.dtype) for i in range(2)]
            if p.dtype == torch.float32:  # dyadic local steps: the correction is exact, mean2 + local delta
                for i in range(2):
                    np.testing.assert_array_equal(landed2[i], mean2 + (trained2[i][name] - sent2[i][name]))
            mean3 = rounded(weighted_mean32(landed2, weights), p.dtype)
            for i, m in enumerate(models):
                np.testing.assert_array_equal(as32(dict(m)[name]), mean3, err_msg=f"trainer {i} {name}")

        # Round 4 in flight: load_state_from_peers() drops it (the state replaces the parameters); close() lands it.
        sent4 = [{n: as32(p) for n, p in m} for m in models]
        for a, w in zip(avgs, weights):
            a.step(weight=w, timeout=30, wait=False)
        trained4 = local_steps(models, rng, dyadic_steps=True)
        assert avgs[0].load_state_from_peers() == "averaged"
        assert not avgs[0].round_in_flight
        region = avgs[1].averager.region_path
        assert region is not None and os.path.exists(region)
        avgs[1].close()
        assert not avgs[1].round_in_flight and not os.path.exists(region)
        for name, p in models[0]:
            mean4 = weighted_mean32([sent4[0][name], sent4[1][name]], weights)
            np.testing.assert_array_equal(as32(p), rounded(mean4, p.dtype), err_msg=f"state {name}")
            np.testing.assert_array_equal(as32(dict(models[1])[name]), landed(trained4[1][name], mean4, sent4[1][name], p.dtype),
                                          err_msg=f"closed {name}")
    finally:
        for a in avgs:
            a.close()


def test_an_overlapped_round_that_finds_no_group_leaves_the_parameters_as_trained(start_swarm):
    swarm = start_swarm(1)  # groups need 2: no group can form
    model = mixed_params(21)
    avg = ParameterAverager(model, url=swarm[0].url, shm_dir=swarm[0].shm_dir)
    rng = np.random.default_rng(5)
    try:
        future = avg.step(weight=1, timeout=2, wait=False)
        trained = local_steps([model], rng, dyadic_steps=False)[0]
        result = avg.land()
        assert result is future.result() and not result.averaged and result.error
        for name, p in model:
            np.testing.assert_array_equal(as32(p), trained[name], err_msg=name)

        # A round the agent refuses (a NaN sent): land() leaves the parameters as trained and raises the error.
        w = dict(model)["w"]
        with torch.no_grad():
            w[0, 0] = float("nan")
        future = avg.step(weight=1, timeout=2, wait=False)
        with torch.no_grad():
            w[0, 0] = 0.5  # training goes on (and repairs the NaN)
        trained = {n: as32(p) for n, p in model}
        with pytest.raises(AgentError):
            avg.land()
        assert isinstance(future.exception(), AgentError)
        assert not avg.round_in_flight and avg.land() is None
        for name, p in model:
            np.testing.assert_array_equal(as32(p), trained[name], err_msg=name)

        # finish() lands the round in flight before telling the agent this trainer is done.
        avg.step(weight=1, timeout=2, wait=False)
        trained = local_steps([model], rng, dyadic_steps=False)[0]
        done = avg.finish()
        assert "complete" in done
        assert not avg.round_in_flight
        for name, p in model:
            np.testing.assert_array_equal(as32(p), trained[name], err_msg=name)

        # close() with a refused round in flight: the error becomes a warning and the region goes.
        with torch.no_grad():
            w[0, 0] = float("nan")
        avg.step(weight=1, timeout=2, wait=False)
        region = avg.averager.region_path
        with pytest.warns(RuntimeWarning, match="round in flight"):
            avg.close()
        assert region is not None and not os.path.exists(region)
    finally:
        avg.close()


# ---------------------------------------------------------------------------------------------------------------
# DiLoCo with each trainer's own momentum: average_momentum=False


def inner_steps(opt: DiLoCoOptimizer, model: torch.nn.Module, seed: int, steps: int, samples: int) -> None:
    x, y = regression(seed)
    for _ in range(steps):
        torch.nn.functional.mse_loss(model(x), y).backward()
        assert opt.step(samples=samples) is None
        opt.zero_grad()


def outer_state(opt: DiLoCoOptimizer, model: torch.nn.Module) -> tuple:
    """θ, m and the model's (local) parameters, float32 copies by name."""
    theta = {n: t.numpy() for n, t in opt.outer_parameters().items()}
    momentum = {n: t.numpy() for n, t in opt.state_dict()["momentum"].items()}
    local = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    return theta, momentum, local


def test_diloco_with_local_momentum_averages_only_the_outer_parameters_and_keeps_each_trainers_momentum(start_swarm):
    swarm = start_swarm(2)
    models = []
    for _ in range(2):
        torch.manual_seed(7)  # the same initial θ on both, whichever of them publishes it
        models.append(torch.nn.Linear(4, 1))
    lr, mu = np.float32(0.7), np.float32(0.9)
    opts = [diloco(m, a, local_steps=10**6, timeout=30, average_momentum=False) for m, a in zip(models, swarm.agents)]
    try:
        n_params = sum(p.numel() for p in models[0].parameters())
        for o in opts:
            assert not o.average_momentum
            assert [s.name for s in o.averager.specs] == ["outer/weight", "outer/bias"]
            assert sum(s.nbytes for s in o.averager.specs) == 4 * n_params, "1x the parameters in float32, not 2x"
        global_m = {}
        for outer, samples in enumerate([(64, 192), (320, 32)]):  # the second step weighs the trainers differently
            for o, m, seed, k in zip(opts, models, (0, 1), samples):
                inner_steps(o, m, seed, 3, k)
            weights = [3 * k for k in samples]
            before = [outer_state(o, m) for o, m in zip(opts, models)]
            new_theta, new_m = [], []
            for theta, momentum, local in before:
                t = {n: v.copy() for n, v in theta.items()}
                mm = {n: v.copy() for n, v in momentum.items()}
                for n in t:
                    nesterov_update(t[n], mm[n], local[n], lr, mu)
                new_theta.append(t)
                new_m.append(mm)
            results = in_threads(*[o.outer_step for o in opts])
            assert all(r.averaged and r.group_size == 2 for r in results), [r.error for r in results]
            assert opts[0].outer_params_hash == opts[1].outer_params_hash
            for name in new_theta[0]:
                mean = weighted_mean32([new_theta[0][name], new_theta[1][name]], weights)
                for i, (o, m) in enumerate(zip(opts, models)):
                    np.testing.assert_array_equal(o.outer_parameters()[name].numpy(), mean, err_msg=f"θ {outer} {i} {name}")
                    np.testing.assert_array_equal(dict(m.named_parameters())[name].detach().numpy(), mean)
                    np.testing.assert_array_equal(o.state_dict()["momentum"][name].numpy(), new_m[i][name],
                                                  err_msg=f"each trainer keeps its own m ({outer} {i} {name})")
                assert not np.array_equal(new_m[0][name], new_m[1][name]), "the members' momenta differ"
                theta = before[0][0][name]
                np.testing.assert_array_equal(theta, before[1][0][name])  # one θ entering each step
                delta = weighted_mean32([theta - before[i][2][name] for i in range(2)], weights)  # mean pseudo-gradient
                if outer == 0:
                    # Fresh momentum (m = 0 on both): the mean of the members' θ' is the global Nesterov step on the
                    # mean pseudo-gradient, up to float32 rounding.
                    global_m[name] = delta
                    np.testing.assert_allclose(mean, theta - lr * (delta + mu * global_m[name]), rtol=1e-5, atol=1e-6)
                else:
                    # The members' momenta differ and are weighed differently than when they were made: the step is the
                    # Nesterov step with the mean of their momenta under this step's weights, not the averaged-momentum
                    # (global) one.
                    global_m[name] = mu * global_m[name] + delta
                    averaged_momentum = theta - lr * (delta + mu * global_m[name])
                    assert np.abs(mean - averaged_momentum).max() > 1e-3, (mean, averaged_momentum)
                    mean_m = weighted_mean32([before[i][1][name] for i in range(2)], weights)
                    np.testing.assert_allclose(mean, theta - lr * (delta + mu * (mu * mean_m + delta)), rtol=1e-5, atol=1e-6)
    finally:
        for o in opts:
            o.close()


def test_a_local_momentum_newcomer_downloads_the_outer_parameters_only_and_starts_its_momentum_at_zero(start_swarm):
    swarm = start_swarm(2)
    torch.manual_seed(2)
    first_model = torch.nn.Linear(4, 1)
    first = diloco(first_model, swarm[0], local_steps=2, timeout=2, average_momentum=False)
    results = train(first, first_model, 0, 2)  # alone: the fallback leaves θ', m' (m' nonzero)
    assert len(results) == 1 and not results[0].averaged
    state = first.state_dict()
    assert all(bool(m.abs().sum() > 0) for m in state["momentum"].values())

    torch.manual_seed(3)
    newcomer_model = torch.nn.Linear(4, 1)
    newcomer = diloco(newcomer_model, swarm[1], local_steps=2, timeout=2, average_momentum=False)
    try:
        assert newcomer.origin == "peers"
        assert newcomer.outer_params_hash == first.outer_params_hash
        for name, p in newcomer_model.named_parameters():
            assert torch.equal(p.detach(), state["outer"][name])
            assert torch.equal(newcomer.state_dict()["momentum"][name], torch.zeros_like(p))
        # A checkpoint restores θ and this trainer's m, and gives the agent θ.
        newcomer.load_state_dict(state)
        assert newcomer.outer_params_hash == first.outer_params_hash
        restored = newcomer.state_dict()
        for name in state["momentum"]:
            assert torch.equal(restored["momentum"][name], state["momentum"][name])
            assert torch.equal(restored["outer"][name], state["outer"][name])
        assert restored["local_step"] == state["local_step"] == 2
    finally:
        first.close()
        newcomer.close()


# ---------------------------------------------------------------------------------------------------------------
# Overlapped DiLoCo outer steps: DiLoCoOptimizer(overlap=True)


def small_dyadic(rng: np.random.Generator, shape) -> np.ndarray:
    """float32 multiples of 2^-8 in [-1, 1). With outer lr and μ 1/2, SGD lr 1/16 on such gradients, deltas that
    are multiples of 2^-10 and weights 1:3 or 1:1, every value of the first two outer steps below (θ', m', the
    means, the differences and sums of land()) is a multiple of 2^-18 below 2 in magnitude: float32 (24 bits)
    holds each exactly, so nothing rounds there."""
    return (rng.integers(-256, 256, size=tuple(shape)) / 256).astype(np.float32)


def dyadic_model(seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [("w", torch.nn.Parameter(torch.from_numpy(small_dyadic(rng, (4, 3))))),
            ("b", torch.nn.Parameter(torch.from_numpy(small_dyadic(rng, (3,)))))]


def overlapped(model: list, agent, **kw) -> DiLoCoOptimizer:
    """overlap=True, SGD lr 1/16 (p − g/16 rounds once at most), outer lr and μ 1/2; outer steps called by hand."""
    return DiLoCoOptimizer(model, torch.optim.SGD([p for _, p in model], lr=1 / 16), local_steps=10**6,
                           outer_lr=0.5, outer_momentum=0.5, url=agent.url, shm_dir=agent.shm_dir, overlap=True, **kw)


def known_sgd_step(opt: DiLoCoOptimizer, model: list, rng: np.random.Generator, samples: int) -> dict:
    """One inner step through opt.step() on a known dyadic gradient: p − g/16 exactly. Returns g by name."""
    grads = {n: small_dyadic(rng, tuple(p.shape)) for n, p in model}
    for n, p in model:
        p.grad = torch.from_numpy(grads[n].copy())
    assert opt.step(samples=samples) is None
    opt.zero_grad()
    return grads


def add_by_hand(model: list, rng: np.random.Generator) -> dict:
    """Inner progress δ added to the parameters directly (multiples of 2^-10 in [-1/16, 1/16)); returns δ by name."""
    deltas = {n: (rng.integers(-64, 64, size=tuple(p.shape)) / 1024).astype(np.float32) for n, p in model}
    with torch.no_grad():
        for n, p in model:
            p.add_(torch.from_numpy(deltas[n]))
    return deltas


def landed_outer(trained: np.ndarray, theta: np.ndarray, sent: np.ndarray) -> np.ndarray:
    """What DiLoCoOptimizer.land() computes for a float32 parameter, in numpy float32: θ + (trained − θ')."""
    return theta + (trained - sent)


def model32(model: list) -> dict:
    return {n: as32(p) for n, p in model}


def nesterov(theta: dict, momentum: dict, local: dict) -> tuple:
    """θ', m' from copies, as the optimizer computes them (outer lr and μ 1/2)."""
    t = {n: v.copy() for n, v in theta.items()}
    m = {n: v.copy() for n, v in momentum.items()}
    for n in t:
        nesterov_update(t[n], m[n], local[n], np.float32(0.5), np.float32(0.5))
    return t, m


def theta_m(opt: DiLoCoOptimizer) -> tuple:
    state = opt.state_dict()
    return ({n: t.numpy().copy() for n, t in state["outer"].items()},
            {n: t.numpy().copy() for n, t in state["momentum"].items()})


def test_overlapped_outer_steps_land_the_groups_theta_and_keep_each_trainers_inner_steps(start_swarm):
    swarm = start_swarm(2)
    models = [dyadic_model(31), dyadic_model(31)]  # the same θ0 on both, whichever of them publishes it
    # Every round averages θ' and m' (the expectations below are their weighted means, bit for bit).
    opts = [overlapped(m, a, timeout=30, average_pseudo_gradients=False) for m, a in zip(models, swarm.agents)]
    rng = np.random.default_rng(7)
    try:
        theta0 = {n: as32(p) for n, p in models[0]}
        zeros = {n: np.zeros_like(v) for n, v in theta0.items()}
        for o in opts:
            assert o.overlap and not o.round_in_flight and o.land() is None
            theta, momentum = theta_m(o)
            for n in theta0:
                np.testing.assert_array_equal(theta[n], theta0[n])
                np.testing.assert_array_equal(momentum[n], zeros[n])

        # Outer step 1 after two inner steps (samples 2 and 6): each model holds its own θ' at once.
        for _ in range(2):
            for o, m, k in zip(opts, models, (1, 3)):
                known_sgd_step(o, m, rng, k)
        weights = [2, 6]
        sent = [nesterov(theta0, zeros, model32(m)) for m in models]
        futures = [o.outer_step() for o in opts]
        assert all(isinstance(f, Future) for f in futures) and all(o.round_in_flight for o in opts)
        assert not any(f.cancel() for f in futures)
        assert [o.outer_step_count for o in opts] == [1, 1]
        for m, (theta1, _) in zip(models, sent):
            for n, p in m:
                np.testing.assert_array_equal(as32(p), theta1[n], err_msg=f"θ' in the model at once ({n})")

        # Inner progress δ while the rounds run (by hand: nothing lands before land()), then land.
        deltas = [add_by_hand(m, rng) for m in models]
        trained = [model32(m) for m in models]
        results = [o.land() for o in opts]
        assert all(r is not None and r.averaged and r.group_size == 2 for r in results), [r and r.error for r in results]
        assert results[0] is futures[0].result() and results[1] is futures[1].result()
        assert all(o.last_result is r for o, r in zip(opts, results))
        assert not any(o.round_in_flight for o in opts) and all(o.land() is None for o in opts)
        mean_theta = {n: weighted_mean32([sent[0][0][n], sent[1][0][n]], weights) for n in theta0}
        mean_m = {n: weighted_mean32([sent[0][1][n], sent[1][1][n]], weights) for n in theta0}
        assert opts[0].outer_params_hash == opts[1].outer_params_hash
        for i, (o, m) in enumerate(zip(opts, models)):
            theta, momentum = theta_m(o)
            for n, p in m:
                np.testing.assert_array_equal(theta[n], mean_theta[n], err_msg=f"θ is the weighted mean ({i} {n})")
                np.testing.assert_array_equal(momentum[n], mean_m[n], err_msg=f"m is the weighted mean ({i} {n})")
                # Every value here is dyadic and short: the difference and the sum are exact, so the model is
                # exactly θ_mean + δ (the float32 formula of land() gives the same bits).
                np.testing.assert_array_equal(as32(p), mean_theta[n] + deltas[i][n], err_msg=f"θ + δ ({i} {n})")
                np.testing.assert_array_equal(as32(p), landed_outer(trained[i][n], mean_theta[n], sent[i][0][n]))
        assert not np.array_equal(as32(dict(models[0])["w"]), as32(dict(models[1])["w"])), "each keeps its own δ"

        # Outer step 2: Δ = θ − θ_local = −δ, the inner progress counted once (no sample since: weights 1 and 1).
        local2 = [{n: mean_theta[n] + deltas[i][n] for n in theta0} for i in range(2)]
        for i in range(2):
            for n in theta0:
                np.testing.assert_array_equal(mean_theta[n] - local2[i][n], -deltas[i][n])
        sent2 = [nesterov(mean_theta, mean_m, local2[i]) for i in range(2)]
        futures2 = [o.outer_step() for o in opts]
        for i, m in enumerate(models):
            for n, p in m:
                np.testing.assert_array_equal(as32(p), sent2[i][0][n], err_msg=f"θ'' from Δ = −δ ({i} {n})")
        # The agent is done with both rounds (waiting on the futures lands nothing) ...
        assert all(f.result().averaged for f in futures2), [f.result().error for f in futures2]
        assert all(o.round_in_flight for o in opts)
        # ... so the next inner step lands them, after its own SGD step on a fixed loss (not dyadic: roundings).
        x, y = regression(0, n=16)
        grads, stepped = [], []
        for o, m, k in zip(opts, models, (1, 3)):
            w, b = dict(m)["w"], dict(m)["b"]
            torch.nn.functional.mse_loss(x @ w + b, y.expand(-1, 3)).backward()
            grads.append({n: p.grad.numpy().copy() for n, p in m})
            stepped.append({n: as32(p) for n, p in m})
            assert o.step(samples=k) is None
            o.zero_grad()
            assert not o.round_in_flight and o.last_result is futures2[opts.index(o)].result()
        mean2 = {n: weighted_mean32([sent2[0][0][n], sent2[1][0][n]], [1, 1]) for n in theta0}
        sterbenz_elements = []
        mean2_m = {n: weighted_mean32([sent2[0][1][n], sent2[1][1][n]], [1, 1]) for n in theta0}
        for i, (o, m) in enumerate(zip(opts, models)):
            theta, momentum = theta_m(o)
            for n, p in m:
                np.testing.assert_array_equal(theta[n], mean2[n])
                np.testing.assert_array_equal(momentum[n], mean2_m[n])
                trained_n = stepped[i][n] - grads[i][n] / np.float32(16)  # g/16 is exact: one rounding, as torch's SGD
                got, sent_n = as32(p), sent2[i][0][n]
                # Bit for bit what land() computes in float32: δ = trained − θ', then θ + δ ...
                np.testing.assert_array_equal(got, landed_outer(trained_n, mean2[n], sent_n), err_msg=f"{i} {n}")
                # ... which is θ + δ within two float32 roundings (unit roundoff 2^-24 each) ...
                exact = mean2[n].astype(np.float64) + (trained_n.astype(np.float64) - sent_n)
                delta32 = trained_n - sent_n
                bound = 2.0 ** -24 * (np.abs(delta32) + np.abs(got)) * 1.001
                assert np.all(np.abs(got - exact) <= bound), (n, got - exact, bound)
                # ... and θ + δ correctly rounded (one rounding) where trained and θ' are within a factor of two of
                # each other, so that δ is exact (Sterbenz's lemma).
                near = (np.sign(trained_n) == np.sign(sent_n)) & (np.abs(trained_n) <= 2 * np.abs(sent_n)) \
                    & (np.abs(sent_n) <= 2 * np.abs(trained_n))
                sterbenz_elements.append(int(near.sum()))
                np.testing.assert_array_equal(got[near], exact.astype(np.float32)[near], err_msg=f"one rounding {i} {n}")
        assert sum(sterbenz_elements) > 0

        # Outer step 3 (weights 1 and 3), then no inner step: load_state_from_peers() drops the round on trainer 0
        # (the swarm's state replaces θ, m and the model), finish() lands it on trainer 1: both models are θ exactly.
        local3 = [model32(m) for m in models]
        sent3 = [nesterov(mean2, mean2_m, local3[i]) for i in range(2)]
        for o in opts:
            o.outer_step()
        assert opts[0].load_state_from_peers() == "averaged"
        assert not opts[0].round_in_flight
        done = opts[1].finish()
        assert "complete" in done and not opts[1].round_in_flight
        mean3 = {n: weighted_mean32([sent3[0][0][n], sent3[1][0][n]], [1, 3]) for n in theta0}
        for i, (o, m) in enumerate(zip(opts, models)):
            for n, p in m:
                np.testing.assert_array_equal(o.outer_parameters()[n].numpy(), mean3[n])
                np.testing.assert_array_equal(as32(p), mean3[n], err_msg=f"no inner step since: the model is θ ({i} {n})")
    finally:
        for o in opts:
            o.close()


def overlapped_round_alone(opt: DiLoCoOptimizer, model: list, rng: np.random.Generator) -> tuple:
    """One overlapped outer step that finds no group, landed by the next inner step: θ and m are θ', m' (bit for bit
    as numpy computes them, whichever side took the step) and the model as trained. Returns (θ', m', result)."""
    assert opt.origin == "initial"
    theta0 = model32(model)
    zeros = {n: np.zeros_like(v) for n, v in theta0.items()}
    known_sgd_step(opt, model, rng, 5)
    theta1, m1 = nesterov(theta0, zeros, model32(model))
    future = opt.outer_step()
    assert isinstance(future, Future)
    deltas = add_by_hand(model, rng)
    result = future.result()
    assert not result.averaged and result.error and result.outer is None
    assert opt.round_in_flight, "the future's result alone lands nothing"
    grads = known_sgd_step(opt, model, rng, 5)  # the agent is done: this step lands the round
    assert not opt.round_in_flight and opt.last_result is result
    theta, momentum = theta_m(opt)
    for n, p in model:
        np.testing.assert_array_equal(theta[n], theta1[n], err_msg=f"θ stays θ' ({n})")
        np.testing.assert_array_equal(momentum[n], m1[n], err_msg=f"m stays m' ({n})")
        np.testing.assert_array_equal(as32(p), theta1[n] + deltas[n] - grads[n] / 16, err_msg=f"as trained ({n})")
    return theta1, m1, result


def test_an_overlapped_outer_step_alone_averaging_pseudo_gradients_keeps_theta_prime_and_a_refused_one_keeps_theta(
        start_swarm):
    swarm = start_swarm(1)  # groups need 2: no group can form
    model = dyadic_model(42)
    opt = overlapped(model, swarm[0], timeout=2)  # average_pseudo_gradients by default
    rng = np.random.default_rng(9)
    try:
        assert opt.average_pseudo_gradients
        # Alone, the agent steps θ, m with this trainer's own Δ.
        theta1, m1, _ = overlapped_round_alone(opt, model, rng)
        # A NaN in the model makes Δ NaN: the agent refuses the copy-in and steps nothing; θ, m stay as they were
        # (the agent's), and the model as trained.
        w = dict(model)["w"]
        with torch.no_grad():
            w[0, 0] = float("nan")
        future = opt.outer_step()
        assert isinstance(future.exception(), AgentError)
        with torch.no_grad():
            w[0, 0] = 0.25
        with pytest.raises(AgentError):
            opt.step(samples=5)
        theta, momentum = theta_m(opt)
        for n in theta1:
            np.testing.assert_array_equal(theta[n], theta1[n], err_msg=f"θ as before the refused step ({n})")
            np.testing.assert_array_equal(momentum[n], m1[n], err_msg=f"m as before ({n})")
        state = opt.averager.client.state()  # the agent's own tensors into the region: the same θ
        assert state["origin"] in ("trainer", "averaged")
        theta, _ = theta_m(opt)
        for n in theta1:
            np.testing.assert_array_equal(theta[n], theta1[n], err_msg=f"the agent holds θ as before ({n})")
    finally:
        opt.close()


@pytest.mark.parametrize("average_momentum", [True, False])
def test_an_overlapped_outer_step_alone_keeps_its_own_outer_parameters_and_momentum(start_swarm, average_momentum):
    swarm = start_swarm(1)  # groups need 2: no group can form
    model = dyadic_model(41)
    opt = overlapped(model, swarm[0], timeout=2, average_momentum=average_momentum, average_pseudo_gradients=False)
    rng = np.random.default_rng(8)
    try:
        theta1, m1, _ = overlapped_round_alone(opt, model, rng)

        # A round the agent refuses (a NaN in θ'): the inner step that lands it raises the error, the inner step
        # taken; θ and m stay θ', m' (NaN included) and the model as trained.
        w = dict(model)["w"]
        with torch.no_grad():
            w[0, 0] = float("nan")
        theta2, m2 = nesterov(theta1, m1, model32(model))
        future = opt.outer_step()
        assert isinstance(future.exception(), AgentError)
        with torch.no_grad():
            w[0, 0] = 0.25  # training goes on (and repairs the NaN)
        before = model32(model)
        grads = {n: small_dyadic(rng, tuple(p.shape)) for n, p in model}
        for n, p in model:
            p.grad = torch.from_numpy(grads[n].copy())
        steps = opt.local_step
        with pytest.raises(AgentError):
            opt.step(samples=5)
        opt.zero_grad()
        assert opt.local_step == steps + 1 and not opt.round_in_flight and opt.land() is None
        theta, momentum = theta_m(opt)
        for n, p in model:
            np.testing.assert_array_equal(theta[n], theta2[n], err_msg=f"θ stays θ' ({n})")
            np.testing.assert_array_equal(momentum[n], m2[n], err_msg=f"m stays m' ({n})")
            np.testing.assert_array_equal(as32(p), before[n] - grads[n] / 16, err_msg=f"as trained ({n})")
        assert np.isnan(theta["w"][0, 0]) and not np.isnan(theta["b"]).any()

        # close() with a refused round in flight: the error becomes a warning and the region goes.
        opt.outer_step()
        region = opt.averager.region_path
        with pytest.warns(RuntimeWarning, match="round in flight"):
            opt.close()
        assert region is not None and not os.path.exists(region)
    finally:
        opt.close()


# ---------------------------------------------------------------------------------------------------------------
# Streaming DiLoCo's fragments: fragments=P


def fragment_model(seed: int) -> list:
    """24 elements: w (12) is fragment 0, b and v (3 + 9) fragment 1 of fragments=2."""
    rng = np.random.default_rng(seed)
    return [("w", torch.nn.Parameter(torch.from_numpy(small_dyadic(rng, (4, 3))))),
            ("b", torch.nn.Parameter(torch.from_numpy(small_dyadic(rng, (3,))))),
            ("v", torch.nn.Parameter(torch.from_numpy(small_dyadic(rng, (9,)))))]


def fragmented(model: list, agent, **kw) -> DiLoCoOptimizer:
    """fragments=2, local_steps=4 (fragment 1 at inner steps 2, 6, ..., fragment 0 at 4, 8, ...), SGD lr 1/16,
    outer lr and μ 1/2: on small dyadic values every number below is exact in float32."""
    return DiLoCoOptimizer(model, torch.optim.SGD([p for _, p in model], lr=1 / 16), local_steps=4, outer_lr=0.5,
                           outer_momentum=0.5, url=agent.url, shm_dir=agent.shm_dir, fragments=2, timeout=30, **kw)


def run_inner_steps(opt: DiLoCoOptimizer, model: list, seed: int, samples: int, steps: int) -> list:
    """opt.step() on known dyadic gradients; per step: (model before, gradients, what step() returned)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        before = model32(model)
        grads = {n: small_dyadic(rng, tuple(p.shape)) for n, p in model}
        for n, p in model:
            p.grad = torch.from_numpy(grads[n].copy())
        out.append((before, grads, opt.step(samples=samples)))
        opt.zero_grad()
    return out


def test_fragment_bounds_and_fragment_settings():
    from averaging_swarm.torch import fragment_bounds
    assert fragment_bounds([12, 3, 9], 2) == [(0, 1), (1, 3)]
    assert fragment_bounds([12, 3, 9], 1) == [(0, 3)]
    assert fragment_bounds([1, 1, 1, 1, 1, 1], 3) == [(0, 2), (2, 4), (4, 6)]
    assert fragment_bounds([1000, 1, 1], 3) == [(0, 1), (1, 2), (2, 3)], "a parameter is never split"
    model = fragment_model(1)
    for bad, steps in ((0, 4), (4, 4), (3, 2)):  # none, more than the parameters, more than local_steps
        with pytest.raises(ValueError, match="fragments"):
            DiLoCoOptimizer(model, torch.optim.SGD([p for _, p in model], lr=0.1), local_steps=steps, fragments=bad,
                            url="http://127.0.0.1:9", shm_dir="/nonexistent")


def test_diloco_fragments_average_one_fragment_per_outer_step_and_leave_the_others_as_each_trainer_has_them(start_swarm):
    swarm = start_swarm(2)
    models = [fragment_model(51), fragment_model(51)]  # the same θ0 on both
    opts = [fragmented(m, a) for m, a in zip(models, swarm.agents)]
    try:
        assert [o.fragment_bounds for o in opts] == [[(0, 1), (1, 3)]] * 2
        assert opts[0].fragment_offsets == [0, 2]
        theta0 = model32(models[0])
        zeros = {n: np.zeros_like(v) for n, v in theta0.items()}
        runs = in_threads(*[lambda o=o, m=m, i=i: run_inner_steps(o, m, 60 + i, (1, 3)[i], 4)
                            for i, (o, m) in enumerate(zip(opts, models))])
        local = [[{n: before[n] - grads[n] / np.float32(16) for n in theta0} for before, grads, _ in run] for run in runs]
        for run in runs:
            assert [r is None for _, _, r in run] == [True, False, True, False], "outer steps at inner steps 2 and 4"
        # Inner step 2: fragment 1 (b, v) from θ0, m = 0, weighted by 2 steps × samples (2 and 6).
        frag1 = [nesterov({n: theta0[n] for n in "bv"}, {n: zeros[n] for n in "bv"}, {n: local[i][1][n] for n in "bv"})
                 for i in range(2)]
        # Inner step 4: fragment 0 (w) from θ0, m = 0, weighted by its 4 steps × samples (4 and 12).
        frag0 = [nesterov({"w": theta0["w"]}, {"w": zeros["w"]}, {"w": local[i][3]["w"]}) for i in range(2)]
        for i, run in enumerate(runs):
            r2, r4 = run[1][2], run[3][2]
            assert r2.averaged and r4.averaged and r2.group_size == r4.group_size == 2, (r2.error, r4.error)
            assert sorted(g["samples"] for g in r2.gathered.values()) == [2, 6]
            assert sorted(g["samples"] for g in r4.gathered.values()) == [4, 12]
        mean_theta = {n: weighted_mean32([frag1[0][0][n], frag1[1][0][n]], [2, 6]) for n in "bv"}
        mean_m = {n: weighted_mean32([frag1[0][1][n], frag1[1][1][n]], [2, 6]) for n in "bv"}
        mean_theta["w"] = weighted_mean32([frag0[0][0]["w"], frag0[1][0]["w"]], [4, 12])
        mean_m["w"] = weighted_mean32([frag0[0][1]["w"], frag0[1][1]["w"]], [4, 12])
        for i, run in enumerate(runs):
            # After inner step 2: w (fragment 0) is this trainer's own, untouched; b, v hold the group's θ.
            after2 = run[2][0]  # the model before inner step 3
            np.testing.assert_array_equal(after2["w"], local[i][1]["w"], err_msg=f"w untouched by fragment 1 ({i})")
            for n in "bv":
                np.testing.assert_array_equal(after2[n], mean_theta[n], err_msg=f"fragment 1's θ in the model ({i} {n})")
        assert opts[0].outer_params_hash == opts[1].outer_params_hash
        for i, (o, m) in enumerate(zip(opts, models)):
            theta, momentum = theta_m(o)
            for n in theta0:
                np.testing.assert_array_equal(theta[n], mean_theta[n], err_msg=f"θ ({i} {n})")
                np.testing.assert_array_equal(momentum[n], mean_m[n], err_msg=f"m ({i} {n})")
            got = model32(m)
            np.testing.assert_array_equal(got["w"], mean_theta["w"], err_msg=f"fragment 0's θ in the model ({i})")
            for n in "bv":
                np.testing.assert_array_equal(got[n], local[i][3][n], err_msg=f"b, v as this trainer trained them ({i} {n})")
            assert o.outer_step_count == 2
            assert o.state_dict()["fragment_samples"] == [0, 2 * (1, 3)[i]]
    finally:
        for o in opts:
            o.close()


def test_diloco_fragments_averaging_pseudo_gradients_track_each_fragments_shared_state(start_swarm):
    swarm = start_swarm(2)
    models = [fragment_model(53), fragment_model(54)]  # θ0 differs: each fragment's first round averages θ', m'
    opts = [fragmented(m, a, average_pseudo_gradients=True) for m, a in zip(models, swarm.agents)]
    try:
        runs = in_threads(*[lambda o=o, m=m, i=i: run_inner_steps(o, m, 70 + i, (1, 3)[i], 8)
                            for i, (o, m) in enumerate(zip(opts, models))])
        for run in runs:
            outcomes = [(r.outer, r.averaged) for _, _, r in run if r is not None]
            # Fragment 1 at inner steps 2 and 6, fragment 0 at 4 and 8: each fragment's state is its own.
            assert outcomes == [("parameters", True), ("parameters", True),
                                ("pseudo-gradients", True), ("pseudo-gradients", True)], outcomes
        assert opts[0].outer_params_hash == opts[1].outer_params_hash
        t0, m0 = theta_m(opts[0])
        t1, m1 = theta_m(opts[1])
        for n in t0:
            np.testing.assert_array_equal(t0[n], t1[n], err_msg=n)
            np.testing.assert_array_equal(m0[n], m1[n], err_msg=n)
    finally:
        for o in opts:
            o.close()


def test_overlapped_diloco_fragments_land_each_fragments_round_on_its_parameters_alone(start_swarm):
    swarm = start_swarm(2)
    models = [fragment_model(52), fragment_model(52)]
    opts = [fragmented(m, a, overlap=True) for m, a in zip(models, swarm.agents)]
    try:
        theta0 = model32(models[0])
        zeros = {n: np.zeros_like(v) for n, v in theta0.items()}
        runs = in_threads(*[lambda o=o, m=m, i=i: run_inner_steps(o, m, 70 + i, (1, 3)[i], 4)
                            for i, (o, m) in enumerate(zip(opts, models))])
        for run in runs:
            assert [isinstance(r, Future) for _, _, r in run] == [False, True, False, True]
        # Inner step 4 landed fragment 1's round (at the latest) before fragment 0's outer step; fragment 0's is in flight.
        assert all(o.round_in_flight for o in opts)
        results = [o.land() for o in opts]
        assert all(r is not None and r.averaged and r.group_size == 2 for r in results), [r and r.error for r in results]
        assert all(run[1][2].result().averaged for run in runs)
        local = [[{n: before[n] - grads[n] / np.float32(16) for n in theta0} for before, grads, _ in run] for run in runs]
        frag1 = [nesterov({n: theta0[n] for n in "bv"}, {n: zeros[n] for n in "bv"}, {n: local[i][1][n] for n in "bv"})
                 for i in range(2)]
        frag0 = [nesterov({"w": theta0["w"]}, {"w": zeros["w"]}, {"w": local[i][3]["w"]}) for i in range(2)]
        mean_theta = {n: weighted_mean32([frag1[0][0][n], frag1[1][0][n]], [2, 6]) for n in "bv"}
        mean_theta["w"] = weighted_mean32([frag0[0][0]["w"], frag0[1][0]["w"]], [4, 12])
        mean_m = {n: weighted_mean32([frag1[0][1][n], frag1[1][1][n]], [2, 6]) for n in "bv"}
        mean_m["w"] = weighted_mean32([frag0[0][1]["w"], frag0[1][1]["w"]], [4, 12])
        assert opts[0].outer_params_hash == opts[1].outer_params_hash
        for i, (o, m) in enumerate(zip(opts, models)):
            theta, momentum = theta_m(o)
            for n in theta0:
                np.testing.assert_array_equal(theta[n], mean_theta[n], err_msg=f"θ ({i} {n})")
                np.testing.assert_array_equal(momentum[n], mean_m[n], err_msg=f"m ({i} {n})")
            got = model32(m)
            # w: its round landed with no inner step since: exactly θ.
            np.testing.assert_array_equal(got["w"], mean_theta["w"], err_msg=f"w ({i})")
            # b, v: θ + δ, δ = the inner steps 3 and 4 taken from θ' (exact on these dyadic values), whenever it landed.
            for n in "bv":
                trained = frag1[i][0][n] - runs[i][2][1][n] / np.float32(16) - runs[i][3][1][n] / np.float32(16)
                np.testing.assert_array_equal(got[n], landed_outer(trained, mean_theta[n], frag1[i][0][n]), err_msg=f"{i} {n}")
    finally:
        for o in opts:
            o.close()


def _outer_step_by_hand(opt: DiLoCoOptimizer, model: torch.nn.Module, seed: int) -> dict:
    """The last inner step of an outer period taken by hand; returns the local parameters the outer step sees."""
    x, y = regression(seed)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.inner_optimizer.step()
    opt.inner_optimizer.zero_grad()
    opt.local_step += 1
    opt._samples += len(x) * (seed + 1)
    opt._fragment_samples[0] += len(x) * (seed + 1)
    return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def test_diloco_averaging_pseudo_gradients_steps_every_member_with_their_exact_mean(start_swarm):
    swarm = start_swarm(3)
    torch.manual_seed(0)
    models = [torch.nn.Linear(4, 1) for _ in range(3)]  # different initial weights: the first round averages θ', m'
    opts = [diloco(m, a, local_steps=3, timeout=30, outer_lr=0.7, outer_momentum=0.9, average_pseudo_gradients=True)
            for m, a in zip(models, swarm.agents)]
    weights = [64 * (s + 1) for s in range(3)]
    for outer in range(3):
        before = [(o.outer_parameters(), o.state_dict()["momentum"]) for o in opts]
        in_threads(*[lambda o=o, m=m, s=s: train(o, m, s, 2) for s, (o, m) in enumerate(zip(opts, models))])
        local = [_outer_step_by_hand(o, m, s) for s, (o, m) in enumerate(zip(opts, models))]
        results = in_threads(*[lambda o=o: o.outer_step() for o in opts])
        assert all(r.averaged and r.group_size == 3 for r in results), [r.error for r in results]
        assert {r.outer for r in results} == {"parameters" if outer == 0 else "pseudo-gradients"}, [r.outer for r in results]
        assert len({o.outer_params_hash for o in opts}) == 1, f"outer step {outer}: θ differs"
        theta = opts[0].outer_parameters()
        momentum = opts[0].state_dict()["momentum"]
        for o in opts[1:]:
            for name in momentum:
                assert torch.equal(o.state_dict()["momentum"][name], momentum[name]), f"outer step {outer}: m differs"
        if outer == 0:
            continue
        # One θ, m before the round: each member stepped them with the weighted mean of the pseudo-gradients.
        mu, lr = np.float32(0.9), np.float32(0.7)
        for name in theta:
            t0, m0 = before[0][0][name].numpy(), before[0][1][name].numpy()
            mean = opts[0]._gradient[opts[0].names.index(name)].copy()  # the agent's mean Δ, written back
            np.testing.assert_allclose(mean, weighted_mean32([t0 - loc[name] for loc in local], weights), rtol=1e-6, atol=1e-7)
            m1 = m0 * mu
            m1 += mean
            update = m1 * mu
            update += mean
            update *= lr
            np.testing.assert_array_equal(momentum[name].numpy(), m1, err_msg=name)
            np.testing.assert_array_equal(theta[name].numpy(), t0 - update, err_msg=name)
            for m in models:
                assert torch.equal(dict(m.named_parameters())[name].detach(), theta[name]), "the model holds θ"
    for o in opts:
        o.close()


def test_overlapped_diloco_averaging_pseudo_gradients_lands_one_theta_on_every_member(start_swarm):
    swarm = start_swarm(2)
    torch.manual_seed(4)
    models = [torch.nn.Linear(4, 1) for _ in range(2)]
    opts = [diloco(m, a, local_steps=2, timeout=30, overlap=True, average_pseudo_gradients=True)
            for m, a in zip(models, swarm.agents)]
    for outer in range(3):
        futures = in_threads(*[lambda o=o, m=m, s=s: train(o, m, s, 2) for s, (o, m) in enumerate(zip(opts, models))])
        landed = in_threads(*[lambda o=o: o.land() for o in opts])
        assert all(len(f) == 1 and isinstance(f[0], Future) for f in futures)
        assert all(r is not None and r.averaged for r in landed), [r and r.error for r in landed]
        assert {r.outer for r in landed} == {"parameters" if outer == 0 else "pseudo-gradients"}
        assert len({o.outer_params_hash for o in opts}) == 1, f"outer step {outer}: θ differs"
    for o in opts:
        o.close()


def test_average_pseudo_gradients_needs_the_momentum_in_the_agent(start_swarm):
    swarm = start_swarm(1)
    model = torch.nn.Linear(4, 1)
    with pytest.raises(ValueError, match="needs average_momentum=True"):
        diloco(model, swarm[0], average_momentum=False, average_pseudo_gradients=True)
