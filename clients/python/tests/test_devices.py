"""averaging_swarm.torch with parameters on a CUDA device, and overlapped DiLoCo in float16 and bfloat16.

The ``cuda`` tests are deselected by default (pyproject's addopts) and run on a machine with a GPU:
``python -m pytest -m cuda clients/python/tests`` (see clients/python/README.md). The CPU variant of the
half-precision DiLoCo test runs with the rest of the suite.
"""
from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from averaging_swarm.layout import bfloat16_to_float32, float32_to_bfloat16  # noqa: E402
from averaging_swarm.torch import DiLoCoOptimizer, ParameterAverager  # noqa: E402

from helpers import dyadic, in_threads, weighted_mean32  # noqa: E402
from test_torch import nesterov, rounded, small_dyadic, theta_m  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def on_device(params: list, device: str) -> list:
    return [(n, torch.nn.Parameter(p.detach().to(device))) for n, p in params]


def mixed(seed: int, device: str) -> list:
    """float32, float16 and bfloat16 parameters holding dyadic values each dtype stores exactly."""
    rng = np.random.default_rng(seed)
    w = torch.from_numpy(dyadic(rng, (64, 33)))
    h = torch.from_numpy(dyadic(rng, (129,)).astype(np.float16))
    e = torch.from_numpy(bfloat16_to_float32(float32_to_bfloat16(dyadic(rng, (17, 5))))).to(torch.bfloat16)
    return on_device([("w", w), ("half", h), ("emb", e)], device)


def as32_any(p: torch.Tensor) -> np.ndarray:
    return p.detach().float().cpu().numpy().copy()


def train_on(model: list, rng: np.random.Generator) -> dict:
    """A local step in each parameter's own dtype, on its device (not dyadic: the sums round); returns p in float32."""
    with torch.no_grad():
        for _, p in model:
            delta = (rng.standard_normal(tuple(p.shape)) * 0.01).astype(np.float32)
            p.add_(torch.from_numpy(delta).to(p.device).to(p.dtype))
    return {n: as32_any(p) for n, p in model}


def progress_by_hand(model: list, rng: np.random.Generator) -> dict:
    """Inner progress added directly in each parameter's dtype (multiples of 2^-10 in [-1/16, 1/16)): nothing lands
    meanwhile, as opt.step() would land a round the agent is done with. Returns p in float32."""
    with torch.no_grad():
        for _, p in model:
            delta = (rng.integers(-64, 64, size=tuple(p.shape)) / 1024).astype(np.float32)
            p.add_(torch.from_numpy(delta).to(p.device).to(p.dtype))
    return {n: as32_any(p) for n, p in model}


@pytest.mark.cuda
@pytest.mark.parametrize("host_memory", ["registered", "staged"])
def test_parameter_averager_averages_cuda_parameters_in_place_and_overlapped(start_swarm, monkeypatch, host_memory):
    """CUDA parameters through the region: page-locked in place (cudaHostRegister) or through a pinned staging buffer."""
    if host_memory == "staged":
        def refuse() -> None:
            raise RuntimeError("cudaHostRegister refused (simulated)")
        monkeypatch.setattr(torch.cuda, "cudart", refuse)
    swarm = start_swarm(2)
    models = [mixed(21, "cuda"), mixed(22, "cuda")]
    weights = [1, 3]
    before = [{n: as32_any(p) for n, p in m} for m in models]
    ptrs = [[p.data_ptr() for _, p in m] for m in models]
    avgs = [ParameterAverager(m, url=a.url, shm_dir=a.shm_dir) for m, a in zip(models, swarm.agents)]
    try:
        for a in avgs:
            if host_memory == "registered":
                assert a._host.registered_ptr is not None and a._host.staging is None, "the region is page-locked"
            else:
                assert a._host.registered_ptr is None and a._host.staging is not None, "copies go through staging"
        results = in_threads(*[lambda a=a, w=w: a.step(weight=w, timeout=30) for a, w in zip(avgs, weights)])
        assert all(r.averaged and r.group_size == 2 for r in results), [r.error for r in results]
        for m, p0 in zip(models, ptrs):
            assert [p.data_ptr() for _, p in m] == p0, "parameters were updated in place"
            for name, p in m:
                assert p.is_cuda and p.grad is None
                mean = rounded(weighted_mean32([before[0][name], before[1][name]], weights), p.dtype)
                np.testing.assert_array_equal(as32_any(p), mean, err_msg=f"{host_memory} {name}")

        # Overlapped: the snapshot goes out, the GPU trains on, land() adds mean − sent in the parameters' dtypes.
        rng = np.random.default_rng(5)
        sent = [{n: as32_any(p) for n, p in m} for m in models]
        futures = [a.step(weight=w, timeout=30, wait=False) for a, w in zip(avgs, weights)]
        assert all(isinstance(f, Future) for f in futures)
        trained = [train_on(m, rng) for m in models]
        landed = [a.land() for a in avgs]
        assert all(r is not None and r.averaged for r in landed), [r and r.error for r in landed]
        for i, m in enumerate(models):
            for name, p in m:
                mean32 = weighted_mean32([sent[0][name], sent[1][name]], weights)
                expected = rounded(trained[i][name] + (rounded(mean32, p.dtype) - sent[i][name]), p.dtype)
                np.testing.assert_array_equal(as32_any(p), expected, err_msg=f"landed {host_memory} {i} {name}")
    finally:
        for a in avgs:
            a.close()


def half_model(seed: int, device: str) -> list:
    """θ0 of multiples of 2^-8 in [-1, 1): float32, float16 and bfloat16 hold them exactly."""
    rng = np.random.default_rng(seed)
    w = torch.from_numpy(small_dyadic(rng, (8, 5)))
    h = torch.from_numpy(small_dyadic(rng, (33,))).to(torch.float16)
    e = torch.from_numpy(small_dyadic(rng, (6, 7))).to(torch.bfloat16)
    return on_device([("w", w), ("half", h), ("emb", e)], device)


def sgd_step(opt: DiLoCoOptimizer, model: list, rng: np.random.Generator, samples: int) -> None:
    """One inner step through opt.step() on a known gradient, in the parameter's dtype and device."""
    for n, p in model:
        p.grad = torch.from_numpy(small_dyadic(rng, tuple(p.shape))).to(p.device).to(p.dtype)
    assert opt.step(samples=samples) is None
    opt.zero_grad()


def landed_half(trained: np.ndarray, theta: np.ndarray, sent: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """What DiLoCoOptimizer.land() computes, in numpy float32: δ = trained − θ' as loaded (rounded to the dtype),
    then θ + δ, rounded once to the dtype."""
    delta = trained - rounded(sent, dtype)
    return rounded((delta + theta).astype(np.float32), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_overlapped_diloco_lands_float16_and_bfloat16_parameters_within_one_rounding(start_swarm, device):
    swarm = start_swarm(2)
    models = [half_model(51, device), half_model(51, device)]  # the same θ0 on both
    opts = [DiLoCoOptimizer(m, torch.optim.SGD([p for _, p in m], lr=1 / 16), local_steps=10**6, outer_lr=0.5,
                            outer_momentum=0.5, url=a.url, shm_dir=a.shm_dir, overlap=True, timeout=30)
            for m, a in zip(models, swarm.agents)]
    rng = np.random.default_rng(17)
    try:
        theta0 = {n: as32_any(p) for n, p in models[0]}
        zeros = {n: np.zeros_like(v) for n, v in theta0.items()}
        for _ in range(2):
            for o, m, k in zip(opts, models, (1, 3)):
                sgd_step(o, m, rng, k)
        weights = [2, 6]
        sent = [nesterov(theta0, zeros, {n: as32_any(p) for n, p in m}) for m in models]
        futures = [o.outer_step() for o in opts]
        assert all(isinstance(f, Future) for f in futures)
        for m, (theta1, _) in zip(models, sent):
            for n, p in m:
                assert p.device.type == device
                np.testing.assert_array_equal(as32_any(p), rounded(theta1[n], p.dtype), err_msg=f"θ' in the model ({n})")

        # Inner progress while the rounds run, then land: θ_mean + δ in float32, rounded once to the dtype.
        trained = [progress_by_hand(m, rng) for m in models]
        results = [o.land() for o in opts]
        assert all(r is not None and r.averaged and r.group_size == 2 for r in results), [r and r.error for r in results]
        mean_theta = {n: weighted_mean32([sent[0][0][n], sent[1][0][n]], weights) for n in theta0}
        mean_m = {n: weighted_mean32([sent[0][1][n], sent[1][1][n]], weights) for n in theta0}
        assert opts[0].outer_params_hash == opts[1].outer_params_hash
        for i, (o, m) in enumerate(zip(opts, models)):
            theta, momentum = theta_m(o)
            for n, p in m:
                np.testing.assert_array_equal(theta[n], mean_theta[n], err_msg=f"θ is the weighted mean ({i} {n})")
                np.testing.assert_array_equal(momentum[n], mean_m[n], err_msg=f"m is the weighted mean ({i} {n})")
                got = as32_any(p)
                np.testing.assert_array_equal(got, landed_half(trained[i][n], mean_theta[n], sent[i][0][n], p.dtype),
                                              err_msg=f"land() in {p.dtype} ({i} {n})")
                # Within half an ulp of the dtype (plus float32's rounding of the sum) of θ_mean + δ, δ exact here:
                exact = mean_theta[n].astype(np.float64) + (trained[i][n] - rounded(sent[i][0][n], p.dtype))
                half_ulp = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[p.dtype]
                bound = (half_ulp + 2.0 ** -24) * np.abs(exact) + (2.0 ** -25 if p.dtype == torch.float16 else 0)
                assert np.all(np.abs(got - exact) <= bound + 1e-12), (n, np.max(np.abs(got - exact)))

        # A second outer step from there (no sample since: weights 1 and 1), landed with no inner step between:
        # the members agree on θ bit for bit and the model holds θ in its dtype.
        local2 = [{n: as32_any(p) for n, p in m} for m in models]
        sent2 = [nesterov(mean_theta, mean_m, local2[i]) for i in range(2)]
        for o in opts:
            o.outer_step()
        results2 = [o.land() for o in opts]
        assert all(r is not None and r.averaged for r in results2), [r and r.error for r in results2]
        mean2 = {n: weighted_mean32([sent2[0][0][n], sent2[1][0][n]], [1, 1]) for n in theta0}
        for o, m in zip(opts, models):
            theta, _ = theta_m(o)
            for n, p in m:
                np.testing.assert_array_equal(theta[n], mean2[n])
                np.testing.assert_array_equal(as32_any(p), rounded(mean2[n], p.dtype), err_msg=f"no inner step: θ ({n})")
    finally:
        for o in opts:
            o.close()
