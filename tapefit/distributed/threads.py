"""How many BLAS threads a training process should use, so that processes do not oversubscribe cores.

OpenBLAS's threads spin while they wait for each other; when a host's cores are shared by more
threads than it has (two runs side by side, several MPI ranks, data worker processes), a matmul
measured here went from 0.37 ms to 32 ms. The rule: the cores this process may run on
(``os.sched_getaffinity``), less those other programs keep busy when it starts (``"auto"``
samples ``/proc/stat`` for 0.1 s: a second training run beside this one), divided by the
processes that share them (the MPI ranks on this host, each with its data workers), at least 1.
A fit applies it with ``Trainer(threads="auto")``, and by default while its data has worker
processes. A count the user set (``Trainer(threads=N)``, ``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``) always wins.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

_USER_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def busy_cores(seconds: float = 0.1) -> int:
    """How many cores other processes keep busy now, from two reads of ``/proc/stat``
    ``seconds`` apart (0 where there is no ``/proc/stat``)."""

    def totals() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait

    try:
        total0, idle0 = totals()
        time.sleep(seconds)
        total1, idle1 = totals()
    except (OSError, ValueError, IndexError):
        return 0
    if total1 <= total0:
        return 0
    cores = os.cpu_count() or 1
    return round(cores * (1 - (idle1 - idle0) / (total1 - total0)))


def blas_threads(
    ranks_on_host: int = 1, workers: int = 0, environ: Mapping[str, str] | None = None, busy: int = 0
) -> int | None:
    """The BLAS threads for one process under the rule above, or ``None`` when the user chose.

    Args:
        ranks_on_host: training processes on this host (MPI ranks).
        workers: data worker processes of each training process.
        environ: the environment to read (default ``os.environ``).
        busy: cores other programs keep busy (another run beside this one), left to them.
    """
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in _USER_VARIABLES):
        return None
    free = max(1, usable_cores() - max(0, busy))
    return max(1, free // (max(1, ranks_on_host) * (1 + max(0, workers))))


def resolve_threads(threads: Any, workers: int = 0) -> int | None:
    """``Trainer(threads=...)``: ``None`` (leave BLAS alone), ``"auto"`` (the rule, for a process
    with ``workers`` data worker processes) or a count >= 1."""
    if threads is None:
        return None
    if threads == "auto":  # this process is idle here: what is busy is someone else's
        return blas_threads(workers=workers, busy=busy_cores())
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be None, 'auto' or a whole number >= 1, got {threads!r}")
    return threads


@contextlib.contextmanager
def limited(threads: int | None) -> Iterator[None]:
    """Limits the BLAS threads to ``threads`` inside the block (``None``: no change)."""
    if threads is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads, user_api="blas"):
        yield
