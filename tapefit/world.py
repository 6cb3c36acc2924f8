"""The processes a fit runs in: one, unless a plugin provides a larger ``World``.

The trainer asks its world which rows of each global batch this process trains on, to
sum its epoch statistics (loss and metric totals) across processes, and whether any
process was interrupted, so that every process stops at the same step. The default
``World()`` is a single process, where each of these is the identity. The
``distributed`` plugin returns an MPI world from the ``configure_world`` hook.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"
