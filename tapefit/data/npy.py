"""``.npy`` data read from disk as batches need it: one large file, or a folder of shards.

``open_npy`` gives an array-like (``NpyFile``, or ``ShardedArray`` over several) whose rows are
read from the file only when a batch takes them, so a data set far larger than RAM trains
with the memory of a few batches; ``fit`` takes it as it takes an in-memory array (the same
shuffling, batching and exact resume).

Why not ``np.memmap``: a mapped file's pages count in the process's resident memory once
touched, and the OS maps more than the page asked for (measured here: one shuffled batch of
1024 rows of 1 KB from a 500 MB file mapped 460 MB). ``NpyFile`` reads each row with
``os.pread`` into the batch's own array and keeps nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

import numpy as np

from tapefit.core.files import FileRefused, file_size, npy_header, open_untrusted
from tapefit.data.arrays import DataError

__all__ = ["NpyFile", "ShardedArray", "is_on_disk", "load_npy", "open_npy"]

_MAGIC = b"\x93NUMPY"


class _OnDisk:
    """An array-like whose rows are read from disk as they are taken: ``len``, ``shape``,
    ``dtype``, ``ndim``, indexing the first axis (an integer, an integer array or a slice), and
    ``np.asarray`` (reads it whole). Subclasses read the rows of an index array (``_gather``)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    ndim: int

    def __len__(self) -> int:
        return self.shape[0]

    def _gather(self, index: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __getitem__(self, rows: Any) -> Any:
        if isinstance(rows, (int, np.integer)):
            return self[np.array([rows])][0]
        index = np.arange(len(self))[rows] if isinstance(rows, slice) else np.asarray(rows, dtype=np.int64)
        if index.size and (index.min() < -len(self) or index.max() >= len(self)):
            raise IndexError(f"row index out of range for {len(self)} rows of {self!r}")
        return self._gather(np.where(index < 0, index + len(self), index))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[np.arange(len(self))]
        return whole if dtype is None else whole.astype(dtype)


class NpyFile(_OnDisk):
    """The rows of a C-ordered ``.npy`` file, read on demand with ``os.pread``.

    Runs of consecutive rows are read with one call each.
    """

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype, offset: int) -> None:
        self.path, self.shape, self.dtype, self.offset = path, shape, dtype, offset
        self.ndim = len(shape)
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        self._fd: int | None = None
        self._pid = -1

    def _descriptor(self) -> int:
        if self._fd is None or self._pid != os.getpid():  # a worker process opens its own
            self._fd, self._pid = os.open(self.path, os.O_RDONLY), os.getpid()
        return self._fd

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fd": None, "_pid": -1}

    def __del__(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)

    def _gather(self, index: np.ndarray) -> np.ndarray:
        out = np.empty((len(index), *self.shape[1:]), dtype=self.dtype)
        if not len(index):
            return out
        order = np.argsort(index, kind="stable")
        ordered = index[order]
        flat = out.reshape(len(index), -1).view(np.uint8) if self.row_bytes else None
        # Consecutive rows (in file order) are read in one pread each.
        breaks = np.flatnonzero(np.diff(ordered) != 1) + 1
        fd = self._descriptor()
        for run in np.split(np.arange(len(ordered)), breaks):
            first, count = int(ordered[run[0]]), len(run)
            data = os.pread(fd, count * self.row_bytes, self.offset + first * self.row_bytes)
            if len(data) != count * self.row_bytes:
                raise DataError(f"{str(self.path)!r} is shorter than its header says", key="path")
            block = np.frombuffer(data, dtype=np.uint8).reshape(count, self.row_bytes)
            flat[order[run]] = block  # type: ignore[index]
        return out

    def __repr__(self) -> str:
        return f"NpyFile({str(self.path)!r}, shape={self.shape}, dtype={self.dtype})"


def _checked_header(f: IO[bytes], path: Path, size: int) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """``npy_header`` of the ``.npy`` at ``f``'s position, its problems as a ``DataError``."""
    try:
        return npy_header(f, size, f"data file {str(path)!r}")
    except FileRefused as error:
        raise DataError(str(error), key="path") from None


def open_data_file(path: str | os.PathLike[str]) -> IO[bytes]:
    """A data file opened for reading once ``open_regular`` found it a regular file; else a
    ``DataError`` naming it (config key ``path``)."""
    try:
        return open_untrusted(path, "data file")
    except FileRefused as error:
        raise DataError(str(error), key="path") from None


def _rows_on_disk(path: Path, shape: tuple[int, ...], fortran: bool, dtype: np.dtype, offset: int) -> NpyFile:
    if fortran and len(shape) > 1:
        raise ValueError("it is in Fortran order; rows are read on demand only from C order")
    return NpyFile(path, shape, dtype, offset)


def on_disk_array(path: Path, start: int = 0, size: int | None = None) -> NpyFile:
    """The ``.npy`` beginning at byte ``start`` of ``path`` (an uncompressed ``.npz`` member too,
    ``size`` bytes long; by default the rest of the file), read on demand.

    Raises:
        DataError: the file is not a regular file, or its header does not account for its size.
        ValueError: the array cannot be read on demand.
    """
    with open_data_file(path) as f:
        f.seek(start)
        shape, dtype, fortran, header = _checked_header(
            f, path, file_size(f) - start if size is None else size
        )
    return _rows_on_disk(path, shape, fortran, dtype, start + header)


def _open_one(path: Path, on_disk: bool) -> Any:
    with open_data_file(path) as f:
        if f.read(len(_MAGIC)) != _MAGIC:
            raise DataError(
                f"{str(path)!r} is not a .npy file (it does not start with NumPy's header)", key="path"
            )
        f.seek(0)
        shape, dtype, fortran, header = _checked_header(f, path, file_size(f))  # before any data
        array: Any
        try:
            if on_disk:
                array = _rows_on_disk(path, shape, fortran, dtype, header)
            else:
                f.seek(0)
                array = np.lib.format.read_array(f, allow_pickle=False)
        except ValueError as error:
            raise DataError(f"cannot read {str(path)!r}: {error}", key="path") from None
    if array.ndim == 0:
        raise DataError(f"{str(path)!r} holds a scalar; data needs a sample (first) axis", key="path")
    return array


class ShardedArray(_OnDisk):
    """Several ``.npy`` arrays read as one along the first axis, without joining them in memory.

    Rows are gathered from their shards.
    """

    def __init__(self, shards: list[Any], names: list[str]) -> None:
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

    def _gather(self, index: np.ndarray) -> np.ndarray:
        out = np.empty((len(index), *self.shape[1:]), dtype=self.dtype)
        shard_of = np.searchsorted(self.offsets, index, side="right") - 1
        for shard in np.unique(shard_of):
            where = shard_of == shard
            out[where] = self.shards[shard][index[where] - self.offsets[shard]]
        return out


class _Rows(_OnDisk):
    """Rows ``start:stop`` of an on-disk array, itself read on demand (a validation split)."""

    def __init__(self, array: Any, start: int, stop: int) -> None:
        self.array, self.start = array, start
        self.shape = (stop - start, *array.shape[1:])
        self.dtype, self.ndim = array.dtype, array.ndim

    def _gather(self, index: np.ndarray) -> np.ndarray:
        return self.array[index + self.start]


def rows(array: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of ``array``, still read on demand when ``array`` is."""
    if is_on_disk(array):
        return _Rows(array, start, stop)
    return array[start:stop]


def is_on_disk(array: Any) -> bool:
    """``array``'s rows are read from disk as they are taken (``open_npy``)."""
    return isinstance(array, (NpyFile, ShardedArray, _Rows, np.memmap))


def open_npy(path: str | os.PathLike[str], mmap: bool = True) -> Any:
    """One ``.npy`` file, or a folder of them (its ``*.npy`` files in name order) read as one array.

    Args:
        path: a ``.npy`` file or a folder of ``.npy`` shards.
        mmap: read rows from disk as batches take them (an ``NpyFile``) rather than load the
            file whole; named after NumPy's ``mmap_mode``, whose bounded memory it gives.

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

    Args:
        path: the folder.
        mmap: read rows from disk as batches take them rather than load the arrays whole.

    Raises:
        DataError: when a part is missing or the two have different numbers of samples.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(f"{str(folder)!r} is not a folder (expected one with x.npy and y.npy)", key="path")
    parts = []
    for name in ("x", "y"):
        file, shards = folder / f"{name}.npy", folder / name
        if file.exists() or file.is_symlink():  # whatever it is, open_npy says what is wrong with it
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
