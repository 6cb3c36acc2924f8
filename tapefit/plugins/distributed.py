"""The ``distributed`` plugin: data-parallel training over MPI (mpi4py), as Horovod does it.

Every rank runs the same program on the same data set and draws the same shuffled order
(from the same seed). Each global batch keeps the configured size and is split into
contiguous shards whose sizes differ by at most one; each rank computes the gradient of
its shard's mean loss, and one ``Allreduce`` over a flat float32 buffer averages them
weighted by shard size, which is the gradient of the global batch's mean loss (to
float32 rounding). It runs first among the ``transform_gradients`` implementations, so
``clip_gradients`` sees the global gradient.

* Before the first step rank 0's variables, optimizer state and random generators are
  broadcast, so every rank starts identical (after a resume too).
* Epoch losses and metrics are sums and counts reduced over the ranks (the trainer asks
  its ``World``), so the History equals a single process's.
* BatchNormalization: each rank normalizes with the statistics of its own shard, and the
  moving statistics (every non-trainable variable) are averaged over the ranks at every
  epoch end and at the end of the fit.
* Only rank 0 runs the plugins that write or print (those whose class sets
  ``chief_only = True``: ``progress``, ``csv_logger``, ``tensorboard``, ``checkpoint``).
* Every rank sets its BLAS threads so the ranks on one host do not oversubscribe its
  cores (``tapefit.threads``), unless ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` is set.
* A rank that does not reach a collective within ``timeout`` seconds makes the run abort
  naming that rank; an exception on any rank prints that rank's message once and aborts
  every rank (``MPI_Abort``). A Ctrl-C reaches every rank through the launcher; the ranks
  agree at the next step on stopping, so rank 0's interrupted checkpoint is consistent.
"""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

import numpy as np

from tapefit.core.tensor import _wrap
from tapefit.plugins.hookspecs import hookimpl
from tapefit.world import World, launcher_world_size

_ARRIVAL_TAG = 7177
_HOST_BYTES = 256


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise ImportError(
            "the distributed plugin needs mpi4py and an MPI library: pip install 'tapefit[mpi]' "
            f"({error})"
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
            message = f"rank {', '.join(map(str, missing))} did not reach the {what} within {self.timeout:g} s"
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
        arrays = [np.ascontiguousarray(a) for a in arrays]
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


def abort(world: Any, error: BaseException) -> None:
    """Prints ``error`` once, for this rank, and aborts every rank of ``world``."""
    if world.rank != 0:
        # When rank 0 fails too (the same bad input everywhere) its abort ends this rank
        # before it prints, so the message appears once.
        time.sleep(0.5)
    print(f"train: rank {world.rank} of {world.size}: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    world.comm.Abort(1)


def _flatten(grads: list[Any], weight: float, loss: float) -> np.ndarray:
    parts = [np.asarray(g, dtype=np.float32).reshape(-1) for g in grads if g is not None]
    buffer = np.empty(sum(p.size for p in parts) + 1, dtype=np.float32)
    offset = 0
    for part in parts:
        np.multiply(part, np.float32(weight), out=buffer[offset : offset + part.size])
        offset += part.size
    buffer[-1] = loss * weight
    return buffer


def _unflatten(buffer: np.ndarray, grads: list[Any]) -> list[Any]:
    result: list[Any] = []
    offset = 0
    for g in grads:
        if g is None:
            result.append(None)
            continue
        shape, dtype = np.shape(g), np.asarray(g).dtype
        size = int(np.prod(shape))
        result.append(_wrap(buffer[offset : offset + size].reshape(shape).astype(dtype, copy=False)))
        offset += size
    return result


class Distributed:
    """Data-parallel training over MPI (config name ``distributed``).

    Switched on by itself when the process runs under an MPI launcher with more than one
    rank (``mpiexec -n 4 train --config ...``); harmless in a single process.

    Args:
        timeout: seconds a rank waits at a collective for the slowest rank before the
            run aborts naming it (default 600: generous for a slow epoch-end validation).
    """

    plugin_name = "distributed"

    def __init__(self, timeout: float = 600.0) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"distributed: timeout must be a number of seconds > 0, got {timeout!r}")
        self.timeout = float(timeout)
        self.world: World | None = None

    @hookimpl
    def configure_world(self) -> World | None:
        if launcher_world_size() <= 1:
            return None
        if self.world is None:
            self.world = MPIWorld(timeout=self.timeout)
        return self.world

    def _active(self) -> MPIWorld | None:
        return self.world if isinstance(self.world, MPIWorld) and self.world.size > 1 else None

    @hookimpl(tryfirst=True)
    def transform_gradients(
        self, trainer: Any, grads_and_vars: list[tuple[Any, Any]], logs: dict[str, float]
    ) -> list[tuple[Any, Any]] | None:
        world = self._active()
        if world is None:
            return None
        local, total = trainer.batch_rows
        grads = [g for g, _ in grads_and_vars]
        summed = world.allreduce_sum(_flatten(grads, local / total, logs["loss"]), "gradient Allreduce")
        logs["loss"] = float(summed[-1])
        return list(zip(_unflatten(summed, grads), (v for _, v in grads_and_vars)))

    def _average_statistics(self, trainer: Any) -> None:
        world = self._active()
        variables = getattr(trainer.model, "non_trainable_variables", [])
        floating = [v for v in variables if np.dtype(v.dtype).kind == "f"]
        if world is None or not floating:
            return
        flat = np.concatenate([np.asarray(v.numpy(), dtype=np.float64).reshape(-1) for v in floating])
        mean = world.allreduce_sum(flat, "moving statistics Allreduce") / world.size
        offset = 0
        for v in floating:
            size = int(np.prod(v.shape))
            v.assign(mean[offset : offset + size].reshape(v.shape).astype(v.dtype))
            offset += size

    @hookimpl(tryfirst=True)
    def on_epoch_end(self, trainer: Any) -> None:
        self._average_statistics(trainer)

    @hookimpl(tryfirst=True)
    def on_fit_end(self, trainer: Any) -> None:
        self._average_statistics(trainer)

    @hookimpl
    def on_exception(self, exception: BaseException) -> None:
        world = self._active()
        if world is not None and not isinstance(exception, KeyboardInterrupt):
            abort(world, exception)

    def __repr__(self) -> str:
        return f"Distributed(timeout={self.timeout:g})"


def describe(world: MPIWorld, threads: int | None) -> str:
    """The one line that says a run is distributed."""
    hosts = sorted(set(world.hosts))
    blas = "BLAS threads left to the environment" if threads is None else f"{threads} BLAS thread(s) per rank"
    return f"distributed: {world.size} ranks on {len(hosts)} host(s) ({', '.join(hosts)}); {blas}"


