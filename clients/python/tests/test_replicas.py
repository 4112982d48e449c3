"""Data-parallel trainers (DDP over gloo, four processes as two pods of two ranks) against two real agents."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

pytest.importorskip("torch")

import averaging_swarm  # noqa: E402
from helpers import weighted_mean32  # noqa: E402

WORKER = Path(__file__).with_name("replica_worker.py")


def run_ranks(tmp_path: Path, swarm: Any, mode: str, device: str = "cpu") -> List[Dict[str, Any]]:
    """Starts the four ranks, waits for them all, and returns what each wrote (ranks 0–1 pod 0, 2–3 pod 1)."""
    init = tmp_path / "dist-init"
    # The ranks import the averaging_swarm this test imported (the source tree or the installed package).
    package_root = str(Path(averaging_swarm.__file__).resolve().parents[1])
    # gloo on loopback: a machine whose hostname resolves to no local address would leave its ranks unconnected.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
           "PYTHONPATH": os.pathsep.join(filter(None, [package_root, str(WORKER.parent), os.environ.get("PYTHONPATH")]))}
    procs = []
    for rank in range(4):
        log = open(tmp_path / f"rank-{rank}.log", "wb")
        procs.append(subprocess.Popen(
            [sys.executable, str(WORKER), "--rank", str(rank), "--init", str(init), "--mode", mode,
             "--urls", swarm[0].url, swarm[1].url, "--shm", swarm[0].shm_dir, swarm[1].shm_dir,
             "--out", str(tmp_path / f"rank-{rank}.json"), "--device", device], stdout=log, stderr=subprocess.STDOUT, env=env))
        log.close()
    try:
        codes = [p.wait(timeout=150) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    logs = "\n".join(f"--- rank {r}:\n{(tmp_path / f'rank-{r}.log').read_text(errors='replace')[-2000:]}" for r in range(4))
    assert codes == [0, 0, 0, 0], f"exit codes {codes}\n{logs}"
    return [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(4)]


def f32(values: List[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


@pytest.mark.parametrize("mode,device", [
    ("diloco", "cpu"), ("overlap", "cpu"),
    pytest.param("diloco", "cuda", marks=pytest.mark.cuda), pytest.param("overlap", "cuda", marks=pytest.mark.cuda)])
def test_diloco_with_a_process_group_averages_through_rank_0_and_leaves_every_replica_with_its_parameters(
        start_swarm, tmp_path, mode, device):
    swarm = start_swarm(2)
    ranks = run_ranks(tmp_path, swarm, mode, device)
    assert [r["leads"] for r in ranks] == [True, False, True, False], "only each pod's rank 0 talks to its agent"
    for pod in (0, 1):
        leader, follower = ranks[2 * pod], ranks[2 * pod + 1]
        assert follower["start"] == leader["start"], "the optimizer's state load gave rank 1 rank 0's parameters"
        assert follower["params"] == leader["params"], "the replicas left with bit-identical parameters"
        assert follower["averaged"] == leader["averaged"] == [True, True, True]
        assert follower["group_sizes"] == [2, 2, 2], "rank 1 got rank 0's results"
        assert follower["hash"] == leader["hash"] and follower["outer"] == leader["outer"]
        assert follower["complete"] is False
    # Both pods' leaders sent θ' each outer step; θ after it is their exact mean (equal weights: 3 inner steps).
    assert len(ranks[0]["sent"]) == len(ranks[2]["sent"]) == 3
    # Without overlap the model holds θ after the outer step; with it, the last round landed at the final land()
    # with no inner step since (δ = 0), so the model holds θ too.
    mean = weighted_mean32([f32(ranks[0]["sent"][-1]), f32(ranks[2]["sent"][-1])], [3, 3])
    for r in ranks:
        np.testing.assert_array_equal(f32(r["outer"]), mean)
        np.testing.assert_array_equal(f32(r["params"]), mean)
    if mode == "overlap":
        assert all(r["landed_at_end"] is True for r in ranks), "the last outer step's round landed at land() on every rank"


def test_diloco_averaging_pseudo_gradients_with_a_process_group_leaves_every_rank_of_both_pods_with_one_theta(
        start_swarm, tmp_path):
    swarm = start_swarm(2)
    ranks = run_ranks(tmp_path, swarm, "pseudo", "cpu")
    assert [r["leads"] for r in ranks] == [True, False, True, False]
    for r in ranks:
        assert r["averaged"] == [True, True, True]
        # The pods start apart; after the first round (θ', m') both hold one θ, m: Δ alone from then on.
        assert r["outer_kinds"] == ["parameters", "pseudo-gradients", "pseudo-gradients"], r["outer_kinds"]
        assert r["hash"] == ranks[0]["hash"] and r["outer"] == ranks[0]["outer"], "one θ on every rank of both pods"
        assert r["params"] == r["outer"], "the model holds θ after a blocking outer step"


def test_parameter_averager_with_a_process_group_gives_every_replica_the_group_mean(start_swarm, tmp_path):
    swarm = start_swarm(2)
    ranks = run_ranks(tmp_path, swarm, "averager")
    assert [r["leads"] for r in ranks] == [True, False, True, False]
    mean = weighted_mean32([f32(ranks[0]["sent"]), f32(ranks[2]["sent"])], [1, 1])
    for r in ranks:
        assert r["averaged"] is True and r["group_size"] == 2 and r["complete"] is False
        np.testing.assert_array_equal(f32(r["params"]), mean)
    assert ranks[1]["sent"] != ranks[0]["sent"] or ranks[3]["sent"] != ranks[2]["sent"], \
        "the replicas started apart (so the test shows they were made equal)"


def test_several_processes_without_a_process_group_are_refused_with_one_sentence(start_swarm, tmp_path):
    swarm = start_swarm(2)
    for r in run_ranks(tmp_path, swarm, "no-group"):
        assert "pass process_group=" in r["error"] and "torch.distributed runs 4 processes" in r["error"]


def test_ranks_of_a_process_group_that_hold_different_models_are_refused_on_every_rank(start_swarm, tmp_path):
    swarm = start_swarm(2)
    for r in run_ranks(tmp_path, swarm, "mismatch"):
        assert "the ranks of process_group hold different parameters" in r["error"], r


def test_the_parameters_of_a_sharded_model_are_told_apart_from_replicas():
    from averaging_swarm.replicas import sharded
    assert sharded(["_fsdp_wrapped_module.flat_param"]) and sharded(["_fsdp_wrapped_module.layer.weight", "bias"])
    assert not sharded(["module.layer.weight", "layer.bias"])
