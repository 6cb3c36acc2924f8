"""The processes a fit runs in: one, unless a plugin provides a larger ``World``.

The trainer asks its world which rows of each global batch this process trains on, to
sum its epoch statistics (loss and metric totals) across processes, and whether any
process was interrupted, so that every process stops at the same step. The default
``World()`` is a single process, where each of these is the identity. The
``distributed`` plugin returns an MPI world from the ``configure_world`` hook.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

# Set by the launchers of MPICH and Intel MPI (PMI), Open MPI, and MVAPICH.
_LAUNCHER_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launcher_world_size(environ: Mapping[str, str] | None = None) -> int:
    """How many ranks an MPI launcher started this process with (1 outside a launcher).

    Read from the launcher's environment variables, so that a single process never
    imports MPI.
    """
    environ = os.environ if environ is None else environ
    for name in _LAUNCHER_SIZE_VARIABLES:
        value = environ.get(name, "")
        if value.isdigit():
            return max(1, int(value))
    return 1


def launcher_rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's rank under an MPI launcher (0 outside a launcher)."""
    environ = os.environ if environ is None else environ
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"):
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def shard_bounds(n: int, rank: int, size: int) -> tuple[int, int]:
    """The rows ``[start, stop)`` of ``n`` that ``rank`` of ``size`` takes.

    Contiguous shards in rank order whose sizes differ by at most one (the first
    ``n % size`` ranks take one row more), as ``np.array_split``.
    """
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard_problem(num_samples: int, batch_size: int, drop_last: bool, size: int) -> str | None:
    """Why batches of ``batch_size`` from ``num_samples`` cannot be split over ``size``
    processes (each needs a sample of every batch), or ``None``."""
    if size <= 1:
        return None
    last = num_samples % batch_size if not drop_last else 0
    smallest = min(batch_size, num_samples) if not last else min(batch_size, last)
    if smallest >= size:
        return None
    if num_samples < size:
        what = f"the data set has {num_samples} samples"
    else:
        what = f"a batch of {smallest} samples" + (" (the epoch's last)" if last else "")
    return (
        f"{what} cannot be split over {size} processes: every process needs a sample of each batch "
        "(a larger batch size, drop_last, or fewer processes)"
    )


class World:
    """A single process: rank 0 of 1.

    Subclasses override ``rank``, ``size`` and the collectives; ``shard`` and
    ``is_chief`` follow from ``rank`` and ``size``.
    """

    rank: int = 0
    size: int = 1

    @property
    def is_chief(self) -> bool:
        """Whether this process writes files and prints (rank 0)."""
        return self.rank == 0

    def shard(self, n: int) -> slice:
        """The rows of a global batch of ``n`` samples that this process trains on."""
        start, stop = shard_bounds(n, self.rank, self.size)
        return slice(start, stop)

    def allreduce_sum(self, values: np.ndarray, what: str) -> np.ndarray:
        """``values`` summed over every process (a new float64 array); ``what`` names it in errors."""
        return np.array(values, dtype=np.float64)

    def any(self, flag: bool, what: str) -> bool:
        """Whether ``flag`` is true on any process."""
        return bool(flag)

    def broadcast(self, arrays: list[np.ndarray], what: str) -> list[np.ndarray]:
        """Rank 0's ``arrays`` on every process (same shapes and dtypes on every rank)."""
        return arrays

    def broadcast_object(self, value: Any, what: str) -> Any:
        """Rank 0's ``value`` (nested dicts/lists of JSON values and arrays) on every process."""
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"


_ARRAY = "__array__"


def split_arrays(value: Any) -> tuple[Any, list[np.ndarray]]:
    """``value`` with each array replaced by ``{"__array__": [index, dtype, shape]}``, and the arrays."""
    arrays: list[np.ndarray] = []
    stack: list[tuple[Any, Any, Any]] = []
    root: dict[str, Any] = {}
    stack.append((value, root, "v"))
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, (np.ndarray, np.generic)):
            array = np.ascontiguousarray(item) if np.ndim(item) else np.asarray(item)
            parent[key] = {_ARRAY: [len(arrays), array.dtype.str, list(array.shape)]}
            arrays.append(array)
        elif isinstance(item, dict):
            parent[key] = {}
            stack.extend((v, parent[key], k) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            parent[key] = [None] * len(item)
            stack.extend((v, parent[key], i) for i, v in enumerate(item))
        else:
            parent[key] = item
    return root["v"], arrays


def join_arrays(skeleton: Any, arrays: list[np.ndarray]) -> Any:
    """The inverse of ``split_arrays``."""
    root: dict[str, Any] = {}
    stack: list[tuple[Any, Any, Any]] = [(skeleton, root, "v")]
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, dict) and set(item) == {_ARRAY}:
            parent[key] = arrays[item[_ARRAY][0]]
        elif isinstance(item, dict):
            parent[key] = {}
            stack.extend((v, parent[key], k) for k, v in item.items())
        elif isinstance(item, list):
            parent[key] = [None] * len(item)
            stack.extend((v, parent[key], i) for i, v in enumerate(item))
        else:
            parent[key] = item
    return root["v"]


def encode_skeleton(skeleton: Any) -> np.ndarray:
    """A JSON skeleton as bytes in a uint8 array, for a broadcast."""
    return np.frombuffer(json.dumps(skeleton).encode(), dtype=np.uint8)


_ARRIVAL_TAG = 7177
_HOST_BYTES = 256


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise ImportError(
            f"the distributed plugin needs mpi4py and an MPI library: pip install 'tapefit[mpi]' ({error})"
        ) from None
    return MPI


class CollectiveTimeout(RuntimeError):
    """A rank did not reach a collective operation in time."""


class MPIWorld(World):
    """The ranks of an MPI communicator (``MPI.COMM_WORLD`` by default).

    Every collective is non-blocking and polled until ``timeout`` seconds pass; meanwhile
    each rank tells rank 0 it arrived (and rank 0 tells every rank), so a timeout names
    the rank that never came.

    Args:
        comm: an mpi4py communicator; default ``MPI.COMM_WORLD``.
        timeout: seconds a collective may wait for the slowest rank.
    """

    def __init__(self, comm: Any = None, timeout: float = 600.0) -> None:
        MPI = _mpi()
        self._MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = int(self.comm.Get_rank())
        self.size = int(self.comm.Get_size())
        self.timeout = float(timeout)
        self._sequence = 0
        self.gradient_seconds = 0.0  # time in the gradient Allreduce (collectives named so), for reports
        local = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        self.local_size = int(local.Get_size())
        local.Free()
        name = np.zeros(_HOST_BYTES, dtype=np.uint8)
        encoded = socket.gethostname().encode()[:_HOST_BYTES]
        name[: len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
        names = np.empty((self.size, _HOST_BYTES), dtype=np.uint8)
        self.comm.Allgather(name, names)
        self.hosts: list[str] = [bytes(row).rstrip(b"\0").decode(errors="replace") for row in names]

    # -- collectives ----------------------------------------------------------

    def _announce(self, sequence: int) -> tuple[list[Any], dict[int, Any], list[np.ndarray]]:
        """Posts the arrival messages of one collective: ranks -> 0 and 0 -> ranks."""
        requests: list[Any] = []
        incoming: dict[int, Any] = {}
        buffers: list[np.ndarray] = []
        mine = np.array([sequence], dtype=np.int64)
        buffers.append(mine)
        peers = range(1, self.size) if self.rank == 0 else [0]
        for peer in peers:
            box = np.empty(1, dtype=np.int64)
            buffers.append(box)
            incoming[peer] = self.comm.Irecv(box, source=peer, tag=_ARRIVAL_TAG)
            requests.append(self.comm.Isend(mine, dest=peer, tag=_ARRIVAL_TAG))
        return requests, incoming, buffers

    def _wait(self, start: Any, what: str) -> None:
        began = time.perf_counter()
        try:
            self._poll(start, what)
        finally:
            if what.startswith("gradient"):
                self.gradient_seconds += time.perf_counter() - began

    def _poll(self, start: Any, what: str) -> None:
        self._sequence += 1
        sends, incoming, buffers = self._announce(self._sequence)
        request = start()
        deadline = time.monotonic() + self.timeout
        polls = 0
        while not request.Test():
            polls += 1
            if polls > 200:  # a collective of a few MB between local ranks takes well under 1 ms
                time.sleep(0.0002)
                if time.monotonic() > deadline:
                    self._timed_out(what, incoming)
        self._MPI.Request.Waitall([*sends, *incoming.values()])
        del buffers

    def _timed_out(self, what: str, incoming: dict[int, Any]) -> None:
        missing = [peer for peer, request in incoming.items() if not request.Test()]
        if self.rank == 0 and missing:
            message = (
                f"rank {', '.join(map(str, missing))} did not reach the {what} within {self.timeout:g} s"
            )
        elif self.rank != 0 and missing:
            message = f"rank 0 did not reach the {what} within {self.timeout:g} s"
        else:
            if self.rank != 0:
                # Rank 0 knows who is missing: give it time to abort with the rank's number.
                time.sleep(min(self.timeout, 10.0))
            message = f"the {what} did not complete within {self.timeout:g} s"
        abort(self, CollectiveTimeout(message))

    def allreduce_sum(self, values: np.ndarray, what: str) -> np.ndarray:
        """``values`` summed over the ranks; float32 stays float32, anything else is float64."""
        dtype = np.float32 if np.asarray(values).dtype == np.float32 else np.float64
        buffer = np.array(values, dtype=dtype, copy=True, order="C")
        MPI = self._MPI
        self._wait(lambda: self.comm.Iallreduce(MPI.IN_PLACE, buffer, op=MPI.SUM), what)
        return buffer

    def any(self, flag: bool, what: str) -> bool:
        buffer = np.array([1 if flag else 0], dtype=np.int32)
        MPI = self._MPI
        self._wait(lambda: self.comm.Iallreduce(MPI.IN_PLACE, buffer, op=MPI.MAX), what)
        return bool(buffer[0])

    def broadcast(self, arrays: list[np.ndarray], what: str) -> list[np.ndarray]:
        arrays = [np.asarray(a, order="C") for a in arrays]  # ascontiguousarray makes 0-d arrays 1-d
        sizes = [a.nbytes for a in arrays]
        buffer = np.empty(sum(sizes), dtype=np.uint8)
        if self.rank == 0 and buffer.size:
            buffer[:] = np.concatenate([a.reshape(-1).view(np.uint8) for a in arrays if a.nbytes])
        self._wait(lambda: self.comm.Ibcast(buffer, root=0), what)
        result, offset = [], 0
        for array, size in zip(arrays, sizes):
            chunk = buffer[offset : offset + size]
            result.append(chunk.view(array.dtype).reshape(array.shape).copy())
            offset += size
        return result

    def broadcast_object(self, value: Any, what: str) -> Any:
        skeleton, arrays = split_arrays(value) if self.rank == 0 else (None, [])
        encoded = encode_skeleton(skeleton) if self.rank == 0 else np.empty(0, np.uint8)
        (length,) = self.broadcast([np.array([encoded.size], np.int64)], what)
        if self.rank != 0:
            encoded = np.empty(int(length[0]), np.uint8)
        (encoded,) = self.broadcast([encoded], what)
        skeleton = json.loads(encoded.tobytes().decode())
        if self.rank != 0:
            specs: list[Any] = []
            stack = [skeleton]
            while stack:
                item = stack.pop()
                if isinstance(item, dict) and "__array__" in item and len(item) == 1:
                    specs.append(item["__array__"])
                elif isinstance(item, dict):
                    stack.extend(item.values())
                elif isinstance(item, list):
                    stack.extend(item)
            arrays = [np.empty(0)] * len(specs)
            for index, dtype, shape in specs:
                arrays[index] = np.empty(shape, dtype=np.dtype(dtype))
        return join_arrays(skeleton, self.broadcast(arrays, what))


def abort(world: Any, error: BaseException) -> None:
    """Prints ``error`` once, for this rank, and aborts every rank of ``world``."""
    if world.rank != 0:
        # When rank 0 fails too (the same bad input everywhere) its abort ends this rank
        # before it prints, so the message appears once.
        time.sleep(0.5)
    print(
        f"train: rank {world.rank} of {world.size}: {type(error).__name__}: {error}",
        file=sys.stderr,
        flush=True,
    )
    world.comm.Abort(1)
    os._exit(1)  # MPICH may return from Abort while it tears the job down: leave no traceback
