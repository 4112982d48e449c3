"""Pure unit tests: no agent needed."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from averaging_swarm.client import AgentClient, AgentError, StepResult, decode_frame, encode_frame
from averaging_swarm.layout import HEADER_BYTES, Slot, TensorSpec, bfloat16_to_float32, float32_to_bfloat16, region_layout


def test_region_layout_aligns_every_tensor_to_64_bytes_after_the_header():
    slots, size = region_layout([TensorSpec("w", (10, 3)), TensorSpec("one", (1,), "bfloat16"),
                                 TensorSpec("h", (7,), "float16"), TensorSpec("big", (16,))])
    assert slots == [Slot("w", "float32", 64, 120), Slot("one", "bfloat16", 192, 2),
                     Slot("h", "float16", 256, 14), Slot("big", "float32", 320, 64)]
    assert size == 384
    assert region_layout([TensorSpec("x", (1,))]) == ([Slot("x", "float32", HEADER_BYTES, 4)], 128)


def test_bfloat16_rounds_to_nearest_even_and_widens_exactly():
    # 1 + 2^-8 is halfway between two bfloat16 values: ties go to the even one (1.0); just above rounds up.
    values = np.array([1.0, 1 + 2 ** -8, 1 + 2 ** -8 + 2 ** -20, 1 + 3 * 2 ** -8, -2.5, 0.0, -0.0, np.inf, -np.inf, 3.4e38], np.float32)
    bits = float32_to_bfloat16(values)
    assert bits.dtype == np.uint16
    back = bfloat16_to_float32(bits)
    np.testing.assert_array_equal(back[:7], np.array([1.0, 1.0, 1 + 2 ** -7, 1 + 4 * 2 ** -8, -2.5, 0.0, -0.0], np.float32))
    assert np.signbit(back[6])
    assert back[7] == np.inf and back[8] == -np.inf
    assert back[9] == np.inf, "above bfloat16's largest value (about 3.39e38) rounds to infinity, as torch does"
    assert np.isnan(bfloat16_to_float32(float32_to_bfloat16(np.array([np.nan], np.float32))))[0]
    every = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
    finite = every[(every & 0x7F80) != 0x7F80]
    np.testing.assert_array_equal(float32_to_bfloat16(bfloat16_to_float32(finite)), finite)


def test_bfloat16_matches_torch_rounding():
    torch = pytest.importorskip("torch")
    values = np.random.default_rng(0).normal(scale=100, size=10_000).astype(np.float32)
    expected = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(float32_to_bfloat16(values), expected)


def test_binary_frame_round_trips_the_control_json_and_tensor_bytes():
    a = np.arange(5, dtype=np.float32)
    pieces = encode_frame({"weight": 2.0, "gather": {"x": 1}}, [memoryview(a).cast("B")])
    body = b"".join(bytes(p) for p in pieces)
    (n,) = struct.unpack_from("<I", body)
    assert json.loads(body[4:4 + n]) == {"weight": 2.0, "gather": {"x": 1}}
    control, tensors = decode_frame(body)
    assert control == {"weight": 2.0, "gather": {"x": 1}}
    np.testing.assert_array_equal(np.frombuffer(tensors, np.float32), a)
    with pytest.raises(AgentError, match="announces 100 bytes"):
        decode_frame(struct.pack("<I", 100) + b"{}")


def test_step_result_reads_the_agent_summary():
    r = StepResult.from_json({"averaged": True, "groupSize": 3, "peers": ["a", "b", "c"], "gathered": {"a": 1},
                              "divergence": 0.5, "matchmakingMs": 12, "allreduceMs": 3.5, "copyMs": 0.25, "generation": 4})
    assert (r.averaged, r.group_size, r.peers, r.matchmaking_ms, r.allreduce_ms, r.copy_ms) == (True, 3, ["a", "b", "c"], 12, 3.5, 0.25)
    assert r.raw["generation"] == 4 and r.error is None


def test_an_unreachable_agent_is_one_agent_error():
    with pytest.raises(AgentError, match="could not be reached") as info:
        AgentClient("http://127.0.0.1:9", timeout=2).status()
    assert info.value.status is None


def test_shm_transport_without_a_folder_says_so(monkeypatch):
    from averaging_swarm import DecentralizedAverager
    monkeypatch.delenv("AVS_SHM_DIR", raising=False)
    with pytest.raises(ValueError, match="set AVS_SHM_DIR or pass shm_dir"):
        DecentralizedAverager({"w": np.zeros(3, np.float32)}, url="http://127.0.0.1:9")


def test_nesterov_update_equals_torch_sgd_nesterov():
    torch = pytest.importorskip("torch")
    from averaging_swarm.torch import nesterov_update
    rng = np.random.default_rng(1)
    # Dyadic numbers with few bits: every product and sum is exact, so any evaluation order (and FMA) agrees bit for bit.
    theta0 = (rng.integers(-64, 64, size=257) / 16).astype(np.float32)
    local = (rng.integers(-64, 64, size=257) / 16).astype(np.float32)
    m0 = (rng.integers(-64, 64, size=257) / 16).astype(np.float32)
    lr, mu = 0.5, 0.75
    theta, m = theta0.copy(), m0.copy()
    nesterov_update(theta, m, local, np.float32(lr), np.float32(mu))

    p = torch.nn.Parameter(torch.from_numpy(theta0.copy()))
    sgd = torch.optim.SGD([p], lr=lr, momentum=mu, nesterov=True)
    sgd.state[p]["momentum_buffer"] = torch.from_numpy(m0.copy())
    p.grad = torch.from_numpy(theta0 - local)  # the outer gradient: θ − θ_local
    sgd.step()
    np.testing.assert_array_equal(theta, p.detach().numpy())
    np.testing.assert_array_equal(m, sgd.state[p]["momentum_buffer"].numpy())

    # Arbitrary values: equal up to rounding (torch may fuse multiply-adds).
    theta0, local, m0 = (rng.normal(size=1000).astype(np.float32) for _ in range(3))
    theta, m = theta0.copy(), m0.copy()
    nesterov_update(theta, m, local, np.float32(0.7), np.float32(0.9))
    p = torch.nn.Parameter(torch.from_numpy(theta0.copy()))
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)
    sgd.state[p]["momentum_buffer"] = torch.from_numpy(m0.copy())
    p.grad = torch.from_numpy(theta0 - local)
    sgd.step()
    np.testing.assert_allclose(theta, p.detach().numpy(), rtol=0, atol=1e-5)
