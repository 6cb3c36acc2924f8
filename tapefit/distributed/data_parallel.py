"""Data parallelism at the training loop's named points: one helper, so the loop asks no ``world.size``.

The loop calls ``DataParallel`` where processes training together must meet: ``synchronize`` at
a fit's start (rank 0's variables, optimizer state, generators and data position for every
process), ``shard`` for each batch (this process's rows), ``reduce_epoch`` before an epoch's logs
(global loss and metric sums), and ``average_moving_statistics`` where an epoch or a fit ends
(BatchNormalization's statistics, which each process moved with its own rows). With one process
each of them leaves everything as it is. The gradients themselves are averaged by the
``distributed`` plugin in ``transform_gradients``.
"""

from __future__ import annotations

from collections.abc import Callable
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

    def __init__(self, world: World | None = None) -> None:
        self.world = world if world is not None else World()
        self.batch_rows = (0, 0)

    @property
    def parallel(self) -> bool:
        return self.world.size > 1

    def agreement(self, signals: tuple[int, ...]) -> Callable[[int], int] | None:
        """With several processes, a function from the stop signal held here (0: none) to the
        one every process stops with: of those held on any, the first of ``signals``; ``None``
        for one process, which needs no agreement."""
        if not self.parallel:
            return None

        def agreed(held: int) -> int:
            flags = self.world.allreduce_sum(
                np.array([held == s for s in signals], np.float64), "interrupt agreement"
            )
            return next((s for s, flag in zip(signals, flags) if flag), 0)

        return agreed

    def shard(self, x: Any, y: Any, weights: Any = None, own: bool = False) -> tuple[Any, Any, Any]:
        """This process's rows of a global batch (all of it in one process), or with ``own`` the
        batch this process read of its part of the data; sets ``batch_rows``."""
        n = batch_len(y)
        if not self.parallel:
            self.batch_rows = (n, n)
            return x, y, weights
        if own:  # this process read its own batch, as large as every other's
            self.batch_rows = (n, n * self.world.size)
            return x, y, weights
        rows = self.world.shard(n)
        self.batch_rows = (rows.stop - rows.start, n)
        return take(x, rows), take(y, rows), None if weights is None else take(weights, rows)

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
            },
            "start-of-fit broadcast",
        )
        if state["model"]:
            model.load_state_dict(state["model"])
        optimizer.set_state(state["optimizer"])
        _random.set_state(state["random"])
        source.set_state(state["loader"])

    def reduce_epoch(self, state: Any, metrics: list[Any]) -> None:
        """Sums the loss and metric totals over the processes, so the logs are the global ones."""
        if not self.parallel:
            return
        metric_states = [metric.get_state() for metric in metrics]
        sums = [state.loss_sum, float(state.loss_count)]
        for each in metric_states:
            sums += [each["total"], each["count"]]
        total = self.world.allreduce_sum(np.asarray(sums, np.float64), "epoch statistics Allreduce")
        state.loss_sum, state.loss_count = float(total[0]), round(float(total[1]))
        for i, (metric, each) in enumerate(zip(metrics, metric_states)):
            metric.set_state({**each, "total": float(total[2 + 2 * i]), "count": float(total[3 + 2 * i])})

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
