"""Data parallelism at the training loop's named points: one helper, so the loop asks no ``world.size``.

The loop calls ``DataParallel`` where processes training together must meet: ``synchronize`` at
a fit's start (rank 0's variables, optimizer state, generators, data position and running epoch
sums for every process), ``shard`` for each batch (this process's rows), ``agreement`` at the end
of each step (whether any process was stopped, and the global running sums), ``global_epoch``
while an epoch's logs are read (global loss and metric sums), ``as_global`` for a checkpoint's
snapshot, and ``average_moving_statistics`` where an epoch or a fit ends (BatchNormalization's
statistics, which each process moved with its own rows). With one process each of them leaves
everything as it is. The gradients themselves are averaged by the ``distributed`` plugin in
``transform_gradients``.

Each process sums the loss and metrics of its own rows over an epoch; only the sum over the
processes is the epoch's. A checkpoint, which rank 0 alone writes, therefore holds the global sums
agreed at the last step, and a resumed fit counts them once: on rank 0, with the other processes
starting from zero. So a checkpoint taken inside an epoch resumes on any number of processes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tapefit.core import random as _random
from tapefit.data.adapters import batch_len, take
from tapefit.distributed.world import World

__all__ = ["DataParallel"]


class DataParallel:
    """The collectives of a fit on ``world`` (a ``World`` of one process does nothing).

    Attributes:
        world: the processes training together.
        batch_rows: ``(rows of this process, rows of all processes)`` of the last batch.
    """

    def __init__(
        self, world: World | None = None, epoch: Callable[[], tuple[Any, list[Any]]] | None = None
    ) -> None:
        self.world = world if world is not None else World()
        self.batch_rows = (0, 0)
        self._epoch = epoch  # () -> (TrainState, metrics): where the running epoch sums live
        self._agreed: tuple[tuple[int, int], np.ndarray] | None = None  # (epoch, step), global sums

    @property
    def parallel(self) -> bool:
        return self.world.size > 1

    def agreement(self, signals: tuple[int, ...]) -> Callable[[int], int] | None:
        """With several processes, a function from the stop signal held here (0: none) to the
        one every process stops with: of those held on any, the first of ``signals``; ``None``
        for one process, which needs no agreement.

        The same collective sums the processes' running epoch sums, which a checkpoint taken
        before the next step holds (``as_global``).
        """
        if not self.parallel:
            return None

        def agreed(held: int) -> int:
            flags = np.array([held == s for s in signals], np.float64)
            total = self.world.allreduce_sum(np.concatenate([flags, self._sums()]), "step agreement")
            self._agreed = (self._key(), total[len(signals) :])
            return next((s for s, flag in zip(signals, total) if flag), 0)

        return agreed

    def shard(self, x: Any, y: Any, weights: Any = None, own: bool = False) -> tuple[Any, Any, Any]:
        """This process's rows of a global batch (all of it in one process), or with ``own`` the
        batch this process read of its part of the data; sets ``batch_rows``."""
        n = batch_len(x if y is None else y)  # a step may take x alone (a GAN's images)
        if not self.parallel:
            self.batch_rows = (n, n)
            return x, y, weights
        if own:  # this process read its own batch, as large as every other's
            self.batch_rows = (n, n * self.world.size)
            return x, y, weights
        rows = self.world.shard(n)
        self.batch_rows = (rows.stop - rows.start, n)
        return (
            take(x, rows),
            None if y is None else take(y, rows),
            None if weights is None else take(weights, rows),
        )

    def synchronize(self, model: Any, optimizer: Any, source: Any) -> None:
        """Gives every process rank 0's variables, optimizer state, generators and data position."""
        if not self.parallel:
            return
        state = self.world.broadcast_object(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.get_state(),
                "random": _random.get_state(),
                "loader": source.get_state(),
                "sums": self._sums(),
            },
            "start-of-fit broadcast",
        )
        if state["model"]:
            model.load_state_dict(state["model"])
        optimizer.set_state(state["optimizer"])
        _random.set_state(state["random"])
        source.set_state(state["loader"])
        # Rank 0's sums are global (a checkpoint's, or zero): counted there, once.
        self._agreed = (self._key(), state["sums"])
        self._set_sums(state["sums"] if self.world.is_chief else np.zeros_like(state["sums"]))

    @contextlib.contextmanager
    def global_epoch(self) -> Iterator[None]:
        """Inside, the running loss and metric sums are those of every process (an epoch's logs
        are read there); each process's own again after."""
        if not self.parallel:
            yield
            return
        local = self._sums()
        self._set_sums(self.world.allreduce_sum(local, "epoch statistics Allreduce"))
        try:
            yield
        finally:
            self._set_sums(local)

    def as_global(self, snapshot: Any) -> None:
        """Puts the global running sums agreed at the last step into ``snapshot`` (a copy of the
        ``TrainState`` with its metrics' states), as a checkpoint holds them."""
        if not self.parallel or not snapshot.batch_in_epoch:
            return  # no batch of the epoch counted: the sums are zero everywhere
        if self._agreed is None or self._agreed[0] != self._key():
            raise RuntimeError("the running sums were not agreed since the last step")  # a bug
        sums = self._agreed[1]
        snapshot.loss_sum, snapshot.loss_count = float(sums[0]), round(float(sums[1]))
        for i, each in enumerate(snapshot.metrics):  # {"state": metric.get_state()}
            each["state"] = {
                **each["state"],
                "total": float(sums[2 + 2 * i]),
                "count": float(sums[3 + 2 * i]),
            }

    def _key(self) -> tuple[int, int]:
        state, _ = self._running()
        return state.epoch, state.step

    def _running(self) -> tuple[Any, list[Any]]:
        if self._epoch is None:
            raise RuntimeError("DataParallel was made without the running epoch sums")
        return self._epoch()

    def _sums(self) -> np.ndarray:
        """The running loss and metric sums of this process: loss, samples, then each
        metric's total and count."""
        state, metrics = self._running()
        sums = [state.loss_sum, float(state.loss_count)]
        for metric in metrics:
            each = metric.get_state()
            sums += [each["total"], each["count"]]
        return np.asarray(sums, np.float64)

    def _set_sums(self, sums: np.ndarray) -> None:
        state, metrics = self._running()
        state.loss_sum, state.loss_count = float(sums[0]), round(float(sums[1]))
        for i, metric in enumerate(metrics):
            metric.set_state(
                {**metric.get_state(), "total": float(sums[2 + 2 * i]), "count": float(sums[3 + 2 * i])}
            )

    def average_moving_statistics(self, model: Any) -> None:
        """Averages the floating non-trainable variables (BatchNormalization's moving
        statistics) over the processes, which each moved with its own shard's batches."""
        if not self.parallel:
            return
        variables = getattr(model, "non_trainable_variables", [])
        floating = [v for v in variables if np.dtype(v.dtype).kind == "f"]
        if not floating:
            return
        flat = np.concatenate([np.asarray(v.numpy(), dtype=np.float64).reshape(-1) for v in floating])
        mean = self.world.allreduce_sum(flat, "moving statistics Allreduce") / self.world.size
        offset = 0
        for v in floating:
            size = int(np.prod(v.shape))
            v.assign(mean[offset : offset + size].reshape(v.shape).astype(v.dtype))
            offset += size
