"""The shared-memory region layout of the trainer API (docs/trainer-api.md) and bfloat16 conversion.

A region is a 64-byte header (magic ``AVSREGN1``, a u64 seqlock counter, a u64 generation) followed
by the tensors in registered order, each at the next multiple of 64, in its registered dtype, C order;
its size is the end of the last tensor rounded up to 64. numpy has no bfloat16, so bfloat16 tensors are
seen as ``uint16`` arrays holding the upper half of each float32; convert with :func:`float32_to_bfloat16`
and :func:`bfloat16_to_float32`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

MAGIC = b"AVSREGN1"
HEADER_BYTES = 64
ALIGN = 64
SEQ_OFFSET = 8
GENERATION_OFFSET = 16

DTYPES: Dict[str, np.dtype] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype("<u2"),  # storage only: the upper 16 bits of a float32
}
"""Registered dtype name -> the numpy dtype its values are seen as."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: Tuple[int, ...]
    dtype: str = "float32"

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.count * DTYPES[self.dtype].itemsize

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class Slot:
    """Where one tensor lives in a region."""
    name: str
    dtype: str
    offset: int
    bytes: int


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def region_layout(specs: Sequence[TensorSpec]) -> Tuple[List[Slot], int]:
    """The tensors' slots and the region's size in bytes (``regionBytes``), by the contract's rule."""
    slots: List[Slot] = []
    end = HEADER_BYTES
    for spec in specs:
        offset = _align(end)
        slots.append(Slot(spec.name, spec.dtype, offset, spec.nbytes))
        end = offset + spec.nbytes
    return slots, _align(end)


def float32_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) of float32 values, rounded to nearest even; NaN stays a (quiet) NaN."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bits (uint16); exact."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
