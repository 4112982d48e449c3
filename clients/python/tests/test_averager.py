"""DecentralizedAverager against real agents: exact means over shared memory and binary bodies."""
from __future__ import annotations

import numpy as np
import pytest

from averaging_swarm import AgentError, DecentralizedAverager
from averaging_swarm.layout import bfloat16_to_float32, float32_to_bfloat16

from helpers import dyadic, in_threads, weighted_mean32

SHAPES = {"w": (10, 3), "one": (1,), "odd": (1001,), "bf": (5, 13), "half": (9,)}
DTYPES = {"w": "float32", "one": "float32", "odd": "float32", "bf": "bfloat16", "half": "float16"}


def values_for(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in SHAPES.items():
        v = dyadic(rng, shape)
        if DTYPES[name] == "bfloat16":
            v = bfloat16_to_float32(float32_to_bfloat16(v))  # values a bfloat16 holds exactly
        if DTYPES[name] == "float16":
            v = v.astype(np.float16).astype(np.float32)
        out[name] = v
    return out


def write(averager: DecentralizedAverager, values: dict) -> None:
    with averager.get_tensors() as t:
        for name, v in values.items():
            t[name][...] = float32_to_bfloat16(v) if DTYPES[name] == "bfloat16" else v


def read(averager: DecentralizedAverager) -> dict:
    with averager.get_tensors() as t:
        return {n: bfloat16_to_float32(a) if DTYPES[n] == "bfloat16" else a.astype(np.float32) for n, a in t.items()}


def stored(name: str, mean32: np.ndarray) -> np.ndarray:
    """The float32 mean as the tensor's dtype stores it (round to nearest even), widened back."""
    if DTYPES[name] == "bfloat16":
        return bfloat16_to_float32(float32_to_bfloat16(mean32))
    if DTYPES[name] == "float16":
        return mean32.astype(np.float16).astype(np.float32)
    return mean32


def make(url: str, transport: str = "shm", shm_dir: str = None) -> DecentralizedAverager:
    return DecentralizedAverager({n: (s, DTYPES[n]) for n, s in SHAPES.items()}, url=url, shm_dir=shm_dir, transport=transport)


def test_three_trainers_get_the_exact_weighted_mean_over_shared_memory_twice_in_a_row(start_swarm):
    swarm = start_swarm(3)
    averagers = [make(a.url, shm_dir=a.shm_dir) for a in swarm.agents]
    assert averagers[0].registration["region"]["bytes"] == averagers[0].region_bytes
    weights = [1, 2, 5]
    for round_ in range(2):
        inputs = [values_for(10 * round_ + i) for i in range(3)]
        for avg, vals in zip(averagers, inputs):
            write(avg, vals)
        results = in_threads(*[lambda a=a, w=w, i=i: a.step(weight=w, gather={"i": i}, timeout=30)
                               for i, (a, w) in enumerate(zip(averagers, weights))])
        for r in results:
            assert r.averaged, r.error
            assert r.group_size == 3
            assert sorted(g["i"] for g in r.gathered.values()) == [0, 1, 2]
            assert r.copy_ms is not None
        for avg in averagers:
            got = read(avg)
            for name in SHAPES:
                expected = stored(name, weighted_mean32([v[name] for v in inputs], weights))
                np.testing.assert_array_equal(got[name], expected, err_msg=f"round {round_} tensor {name}")
            assert avg.generation >= round_ + 1
    for avg in averagers:
        avg.close()


def test_binary_and_shared_memory_trainers_average_exactly_together(start_swarm):
    swarm = start_swarm(2)
    shm = make(swarm[0].url, shm_dir=swarm[0].shm_dir)
    binary = make(swarm[1].url, transport="binary")
    assert binary.region_path is None
    inputs = [values_for(7), values_for(8)]
    write(shm, inputs[0])
    write(binary, inputs[1])
    results = in_threads(lambda: shm.step(weight=3, timeout=30), lambda: binary.step(weight=1, timeout=30))
    assert all(r.averaged for r in results), [r.error for r in results]
    for avg in (shm, binary):
        got = read(avg)
        for name in SHAPES:
            np.testing.assert_array_equal(got[name], stored(name, weighted_mean32([v[name] for v in inputs], [3, 1])), err_msg=name)
    # The binary state download returns the same bytes.
    write(binary, values_for(99))
    assert binary.load_state_from_peers() == "averaged"
    for name in SHAPES:
        np.testing.assert_array_equal(read(binary)[name], read(shm)[name])
    shm.close()
    binary.close()


def test_a_step_over_named_tensors_averages_those_alone_over_shared_memory_and_binary_bodies(start_swarm):
    swarm = start_swarm(2)
    shm = make(swarm[0].url, shm_dir=swarm[0].shm_dir)
    binary = make(swarm[1].url, transport="binary")
    inputs = [values_for(17), values_for(18)]
    write(shm, inputs[0])
    write(binary, inputs[1])
    names = ["bf", "odd"]
    results = in_threads(lambda: shm.step(weight=3, timeout=30, names=names),
                         lambda: binary.step(weight=1, timeout=30, names=list(reversed(names))))
    assert all(r.averaged for r in results), [r.error for r in results]
    for avg, mine in zip((shm, binary), inputs):
        got = read(avg)
        for name in SHAPES:
            want = stored(name, weighted_mean32([v[name] for v in inputs], [3, 1])) if name in names else mine[name]
            np.testing.assert_array_equal(got[name], want, err_msg=name)
    with pytest.raises(AgentError, match="not a registered tensor") as refused:
        shm.step(timeout=1, names=["w", "nope"])
    assert refused.value.status == 400
    shm.close()
    binary.close()


def test_alpha_below_one_moves_each_trainer_part_way_to_the_mean(start_swarm):
    alpha = 0.3
    swarm = start_swarm(2, AVS_AVERAGING_ALPHA=str(alpha))
    averagers = [make(a.url, shm_dir=a.shm_dir) for a in swarm.agents]
    inputs = [values_for(3), values_for(4)]
    for avg, vals in zip(averagers, inputs):
        write(avg, vals)
    weights = [1, 3]
    results = in_threads(*[lambda a=a, w=w: a.step(weight=w, timeout=30) for a, w in zip(averagers, weights)])
    assert all(r.averaged for r in results), [r.error for r in results]
    for avg, mine in zip(averagers, inputs):
        got = read(avg)
        for name in SHAPES:
            mean = weighted_mean32([v[name] for v in inputs], weights).astype(np.float64)
            local = mine[name].astype(np.float64)
            # The agent's float32 copy: local += alpha * (mean - local), in double, stored as float32; then the dtype.
            expected = stored(name, (local + alpha * (mean - local)).astype(np.float32))
            np.testing.assert_array_equal(got[name], expected, err_msg=name)
    for avg in averagers:
        avg.close()


def test_get_tensors_holds_the_seqlock(start_swarm):
    swarm = start_swarm(1)
    avg = DecentralizedAverager({"w": np.ones(4, np.float32)}, url=swarm[0].url, shm_dir=swarm[0].shm_dir)
    seq = lambda: int(np.frombuffer(open(avg.region_path, "rb").read(16), "<u8")[1])  # noqa: E731
    before = seq()
    assert before % 2 == 0
    with avg.get_tensors() as t:
        assert seq() == before + 1
        np.testing.assert_array_equal(t["w"], np.ones(4, np.float32))
        with pytest.raises(RuntimeError, match="inside get_tensors"):
            avg.step()
    assert seq() == before + 2
    avg.close()


def test_a_run_with_completion_ends_complete_and_its_final_checkpoint_loads_with_safetensors(start_swarm, tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file
    import json
    folder = tmp_path / "checkpoints"
    swarm = start_swarm(2, AVS_CHECKPOINT_DIR=str(folder), AVS_CHECKPOINT_EVERY="1", AVS_COMPLETION_ROUNDS="2")
    averagers = [make(a.url, shm_dir=a.shm_dir) for a in swarm.agents]
    for round_ in range(2):
        inputs = [values_for(50 + 10 * round_ + i) for i in range(2)]
        for avg, vals in zip(averagers, inputs):
            write(avg, vals)
        results = in_threads(*[lambda a=a: a.step(timeout=30) for a in averagers])
        for r in results:
            assert r.averaged, r.error
            assert r.round == round_ + 1
            assert r.complete is (round_ == 1), f"complete only after the last round (round {r.round})"
    # The final checkpoint is the trainers' last mean, in their dtypes, readable without our code.
    latest = json.loads((folder / "pytest" / "latest").read_text())
    assert latest["round"] == 2
    saved = load_file(str(folder / "pytest" / latest["data"]))
    torch_dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    for name, values in read(averagers[0]).items():
        assert saved[name].dtype == torch_dtypes[DTYPES[name]], name
        np.testing.assert_array_equal(saved[name].float().numpy(), values, err_msg=name)
    # A step after completion averages no more and says why.
    after = averagers[0].step(timeout=5)
    assert not after.averaged and after.complete
    assert "complete" in (after.error or "")
    for avg in averagers:
        avg.close()


def test_finish_ends_the_run_when_the_swarm_ends_on_trainer_exit_and_is_harmless_otherwise(start_swarm, tmp_path):
    folder = tmp_path / "checkpoints"
    swarm = start_swarm(2, AVS_CHECKPOINT_DIR=str(folder), AVS_CHECKPOINT_EVERY="100", AVS_COMPLETION_ON_TRAINER_EXIT="true")
    averagers = [make(a.url, shm_dir=a.shm_dir) for a in swarm.agents]
    inputs = [values_for(70 + i) for i in range(2)]
    for avg, vals in zip(averagers, inputs):
        write(avg, vals)
    results = in_threads(*[lambda a=a: a.step(timeout=30) for a in averagers])
    assert all(r.averaged for r in results), [r.error for r in results]
    answers = in_threads(*[lambda a=a: a.finish() for a in averagers])
    for answer in answers:
        assert answer["complete"] is True
        assert answer["checkpointRound"] == results[0].round, answer
    # The final round is durable although no interval checkpoint was due (every 100 rounds).
    assert (folder / "pytest" / f"round-{results[0].round}.json").exists()
    assert averagers[0].step(timeout=5).complete
    for avg in averagers:
        avg.close()
    # A trainer restarted after it finished (a cluster restarts a container that exited 0) sees it at once.
    with make(swarm[0].url, shm_dir=swarm[0].shm_dir) as again:
        assert again.complete
        assert again.registration["complete"] is True
    plain = start_swarm(1)
    with make(plain[0].url, shm_dir=plain[0].shm_dir) as lone:
        assert not lone.complete
        answer = lone.finish()
        assert answer["complete"] is False
        assert "onTrainerExit" in answer["message"]


def test_a_newcomer_waits_for_the_swarms_state_however_long_and_logs_the_download(start_swarm, monkeypatch, caplog):
    """A 64 MiB state: register waits for the download (no client-side bound) and logs the agent's progress."""
    import logging
    from averaging_swarm import client as client_module
    swarm = start_swarm(2)
    shapes = {"w": ((4096, 4096), "float32")}
    first = DecentralizedAverager(shapes, url=swarm[0].url, shm_dir=swarm[0].shm_dir)
    with first.get_tensors() as t:
        t["w"][...] = np.arange(4096 * 4096, dtype=np.float32).reshape(4096, 4096)
    first.publish_state()  # the agent serves the trainer's values as the swarm's state
    monkeypatch.setattr(client_module, "REGISTER_PROGRESS_SECONDS", 0.02)
    with caplog.at_level(logging.INFO, logger="averaging_swarm"):
        newcomer = DecentralizedAverager(shapes, url=swarm[1].url, shm_dir=swarm[1].shm_dir)
    assert newcomer.load_state_from_peers() == "peers"
    with newcomer.get_tensors() as t:
        np.testing.assert_array_equal(t["w"].reshape(-1), np.arange(4096 * 4096, dtype=np.float32))
    lines = [r.getMessage() for r in caplog.records if r.name == "averaging_swarm"]
    assert any(l.startswith("waiting for the agent: downloading the swarm's state from ") and " of 64.0 MiB (" in l for l in lines), lines
    first.close()
    newcomer.close()
