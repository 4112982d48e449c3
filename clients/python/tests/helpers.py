"""Shared bits of the agent tests."""
from __future__ import annotations

import threading
from typing import Any, Callable, List, Sequence

import numpy as np


def dyadic(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """float32 values that are multiples of 2^-8 in [-32, 32): weighted float64 sums of them are exact in any order."""
    return (rng.integers(-32 * 256, 32 * 256, size=tuple(shape)) / 256).astype(np.float32)


def weighted_mean32(values: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """The agent's mean: float64 sum of weight × value, divided by the weight sum in float64, rounded to float32."""
    total = sum(float(w) * v.astype(np.float64) for w, v in zip(weights, values))
    return (total / float(sum(weights))).astype(np.float32)


def in_threads(*calls: Callable[[], Any]) -> List[Any]:
    """Runs the calls at once (a trainer each) and returns their results in order, re-raising the first error."""
    results: List[Any] = [None] * len(calls)
    errors: List[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as err:  # noqa: B036 - handed to the test thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
