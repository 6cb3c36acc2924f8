"""``.npy`` data opened memory-mapped: one large file, or a folder of shards read as one array.

A memory-mapped array is read from disk only where a batch takes rows, so a data set far
larger than RAM trains with the memory of a few batches. ``fit`` takes these arrays as it
takes in-memory ones (the same shuffling, batching and exact resume).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from tapefit.data.arrays import DataError

__all__ = ["ShardedArray", "load_npy", "open_npy"]

_MAGIC = b"\x93NUMPY"


def _open_one(path: Path, mmap: bool) -> np.ndarray:
    try:
        with open(path, "rb") as f:
            head = f.read(len(_MAGIC))
    except OSError as error:
        raise DataError(f"cannot read {str(path)!r}: {error.strerror}", key="path") from None
    if head != _MAGIC:
        raise DataError(
            f"{str(path)!r} is not a .npy file (it does not start with NumPy's header)", key="path"
        )
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except ValueError as error:
        raise DataError(f"cannot read {str(path)!r}: {error}", key="path") from None
    if array.ndim == 0:
        raise DataError(f"{str(path)!r} holds a scalar; data needs a sample (first) axis", key="path")
    return array


class ShardedArray:
    """Several ``.npy`` arrays read as one along the first axis, without joining them in memory.

    Supports what batching needs: ``len``, ``shape``, ``dtype``, ``ndim`` and indexing the
    first axis with an integer array or a slice (rows are gathered from their shards).
    """

    def __init__(self, shards: list[np.ndarray], names: list[str]) -> None:
        tails = {(a.shape[1:], a.dtype) for a in shards}
        if len(tails) > 1:
            shown = ", ".join(f"{n}: {a.shape} {a.dtype}" for n, a in zip(names, shards))
            raise DataError(
                f"the .npy shards must agree in every axis but the first and in dtype; got {shown}"
            )
        self.shards = shards
        self.offsets = np.cumsum([0] + [len(a) for a in shards])
        self.dtype = shards[0].dtype
        self.shape = (int(self.offsets[-1]), *shards[0].shape[1:])
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> Any:
        if isinstance(rows, slice) and rows.step in (None, 1):
            return self._part(*rows.indices(len(self))[:2])
        index = np.arange(len(self))[rows] if isinstance(rows, slice) else np.asarray(rows)
        if index.ndim == 0:
            return self[index.reshape(1)][0]
        out = np.empty((len(index), *self.shape[1:]), dtype=self.dtype)
        shard_of = np.searchsorted(self.offsets, index, side="right") - 1
        for shard in np.unique(shard_of):
            where = shard_of == shard
            # Sorted rows read a memory-mapped shard front to back.
            local = index[where] - self.offsets[shard]
            out[where] = self.shards[shard][local]
        return out

    def _part(self, start: int, stop: int) -> ShardedArray:
        """Rows ``start:stop`` as a ShardedArray of views of the shards (nothing read)."""
        parts, names = [], []
        for i, shard in enumerate(self.shards):
            low, high = max(start, self.offsets[i]), min(stop, self.offsets[i + 1])
            if low < high or (not parts and i == len(self.shards) - 1):
                parts.append(shard[low - self.offsets[i] : max(low, high) - self.offsets[i]])
                names.append(str(i))
        return ShardedArray(parts, names)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[np.arange(len(self))]
        return whole if dtype is None else whole.astype(dtype)


def open_npy(path: str | os.PathLike[str], mmap: bool = True) -> np.ndarray | ShardedArray:
    """One ``.npy`` file, or a folder of them (its ``*.npy`` files in name order) read as one array.

    Args:
        path: a ``.npy`` file or a folder of ``.npy`` shards.
        mmap: open memory-mapped (read from disk as batches need rows) rather than read whole.

    Raises:
        DataError: naming the file that is missing, is not a ``.npy`` file, or does not agree
            with the other shards.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.npy"))
        if not files:
            raise DataError(f"the folder {str(path)!r} has no .npy files", key="path")
        shards = [_open_one(f, mmap) for f in files]
        return shards[0] if len(shards) == 1 else ShardedArray(shards, [f.name for f in files])
    if not path.exists():
        raise DataError(f"{str(path)!r} does not exist", key="path")
    return _open_one(path, mmap)


def load_npy(path: str | os.PathLike[str], mmap: bool = True) -> tuple[Any, Any]:
    """``(x, y)`` from a folder holding ``x`` and ``y`` as ``.npy`` files or folders of shards.

    The folder has ``x.npy`` (or a folder ``x/`` of shards) and ``y.npy`` (or ``y/``); both
    are opened with ``open_npy``.

    Raises:
        DataError: when a part is missing or the two have different numbers of samples.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(f"{str(folder)!r} is not a folder (expected one with x.npy and y.npy)", key="path")
    parts = []
    for name in ("x", "y"):
        file, shards = folder / f"{name}.npy", folder / name
        if file.is_file():
            parts.append(open_npy(file, mmap))
        elif shards.is_dir():
            parts.append(open_npy(shards, mmap))
        else:
            raise DataError(
                f"{str(folder)!r} has neither {name}.npy nor a folder {name}/ of .npy shards", key="path"
            )
    x, y = parts
    if len(x) != len(y):
        raise DataError(f"{str(folder)!r}: x has {len(x)} samples and y has {len(y)}", key="path")
    return x, y
