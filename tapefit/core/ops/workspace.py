"""Large arrays that fused ops reuse from call to call once nothing else holds them.

A training step that allocates and frees megabytes of arrays pays for fresh pages every step:
when the step's arrays are freed together, glibc's allocator gives the memory back to the
system (the freed top of its heap outgrows its trim threshold), and the next step faults every
page in again, zeroed by the kernel. For the LSTM benchmark (`benchmarks/lstm_step.py`) that was about 3,300 page
faults and a quarter of the step. ``empty`` hands out an array kept from an earlier call when
no one else refers to it any more (its reference count says so), so the pages stay mapped.

Arrays are kept per thread, up to ``LIMIT`` bytes; a new shape evicts kept arrays nobody holds.
Reuse is safe by construction: an array is handed out again only when no Tensor, view or
other object refers to it.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

__all__ = ["LIMIT", "empty"]

LIMIT = 64 << 20
"""The bytes kept for reuse, per thread."""


def _free_count() -> int:
    """getrefcount of a kept array that only the workspace holds, measured rather than assumed
    (the list, the loop variable and the call's own argument on CPython 3.11-3.13): -1, so that
    nothing is ever reused, where the interpreter has no reference counts."""
    getrefcount = getattr(sys, "getrefcount", None)
    if getrefcount is None:
        return -1
    for a in [np.empty(0)]:
        return int(getrefcount(a))
    return -1


_FREE = _free_count()


class _Kept(threading.local):
    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []


_kept = _Kept()


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, from a kept array when one of that shape and dtype is free."""
    dtype = np.dtype(dtype)
    arrays = _kept.arrays
    for a in arrays:
        if a.shape == shape and a.dtype == dtype and _FREE >= 0 and sys.getrefcount(a) <= _FREE:
            return a
    new = np.empty(shape, dtype)
    if new.nbytes > LIMIT:
        return new
    total = sum(a.nbytes for a in arrays) + new.nbytes
    if total > LIMIT:
        # evict the free arrays (other shapes: a free one of this shape was taken above)
        kept = []
        for a in arrays:
            if total > LIMIT and _FREE >= 0 and sys.getrefcount(a) <= _FREE:
                total -= a.nbytes
            else:
                kept.append(a)
        arrays[:] = kept
    if total <= LIMIT:
        arrays.append(new)
    return new
