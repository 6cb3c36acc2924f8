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
* At every epoch's end, before validation and the ``on_epoch_end`` hooks, and at the end of
  the fit, the trainer asks its ``World`` to reduce the epoch's loss and metric sums and
  counts over the ranks, so the History equals a single process's, and to average the moving
  statistics (every floating non-trainable variable: BatchNormalization's), which each rank
  moved with its own shard's batch statistics.
* Only rank 0 runs the plugins that write or print (those whose class sets
  ``chief_only = True``: ``progress``, ``csv_logger``, ``tensorboard``, ``checkpoint``).
* Every rank sets its BLAS threads so the ranks on one host do not oversubscribe its
  cores (``tapefit.distributed.threads``), unless ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` is set.
* A rank that does not reach a collective within ``timeout`` seconds makes the run abort
  naming that rank; an exception on any rank prints that rank's message once and aborts
  every rank (``MPI_Abort``). A Ctrl-C or SIGTERM reaches every rank through the launcher
  (under ``train``, SIGTERM and SIGHUP sent to a single rank count too); the ranks agree at
  the next step on stopping, and on the signal, so rank 0's interrupted checkpoint is
  consistent.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from tapefit.core.naming import suggest_keywords
from tapefit.core.tensor import _wrap
from tapefit.distributed.threads import blas_threads
from tapefit.distributed.world import MPIWorld, World, abort, launcher_world_size
from tapefit.plugins.hookspecs import hookimpl

logger = logging.getLogger("tapefit.plugins.distributed")


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


def blas_threads_per_rank(ranks_on_host: int, environ: Any = None) -> int | None:
    """Limits this rank's BLAS threads by ``tapefit.distributed.threads``'s rule (the host's cores over its
    ranks); ``None`` when the user set a count, which is then left alone."""
    threads = blas_threads(ranks_on_host, environ=environ)
    if threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")
    return threads


@suggest_keywords
class Distributed:
    """Data-parallel training over MPI (config name ``distributed``).

    Switched on by itself when the process runs under an MPI launcher with more than one
    rank (``mpiexec -n 4 train --config ...``); harmless in a single process.

    Args:
        timeout: seconds a rank waits at a collective for the slowest rank before the
            run aborts naming it (default 600: generous for a slow epoch-end validation).
    """

    plugin_name = "distributed"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)

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
            threads = blas_threads_per_rank(self.world.local_size)
            if self.world.is_chief:
                logger.info("%s", describe(self.world, threads))
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
        # A custom train_step's update may come without a loss of its batch (a GAN's two).
        loss = logs.get("loss")
        summed = world.allreduce_sum(
            _flatten(grads, local / total, 0.0 if loss is None else loss), "gradient Allreduce"
        )
        if loss is not None:
            logs["loss"] = float(summed[-1])
        return list(zip(_unflatten(summed, grads), (v for _, v in grads_and_vars)))

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
