"""``tp.data.Pipeline``: per-sample work (``map``) in worker processes, on Grain.

For arrays (in memory or memory-mapped) ``fit`` batches by itself; a pipeline is for data that
needs Python work per sample (decoding, augmentation) that should not stall the training
step. It is built on Grain (``pip install "tapefit[data]"``): shuffling, batching, worker
processes and prefetching are Grain's, and so is the iterator state a checkpoint keeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import random as _random

__all__ = ["Pipeline", "require_grain"]


def require_grain() -> Any:
    """The ``grain`` module, or an ``ImportError`` that says how to install it."""
    try:
        import grain
    except ImportError:
        raise ImportError(
            'tp.data.Pipeline and Grain inputs need Grain: pip install "tapefit[data]"'
        ) from None
    return grain


class _Rows:
    """Random access to the samples of ``(x, y)`` arrays (dicts, lists and tuples of arrays
    kept as structure): Grain's data-source protocol."""

    def __init__(self, x: Any, y: Any) -> None:
        self.x, self.y = x, y
        first = x
        while isinstance(first, (dict, list, tuple)):
            first = next(iter(first.values())) if isinstance(first, dict) else first[0]
        self.length = len(first)

    def __len__(self) -> int:
        return self.length

    @staticmethod
    def _row(data: Any, i: int) -> Any:
        if isinstance(data, dict):
            return {k: _Rows._row(v, i) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return type(data)(_Rows._row(v, i) for v in data)
        return np.asarray(data[i])

    def __getitem__(self, i: int) -> Any:
        row = self._row(self.x, int(i))
        return row if self.y is None else (row, self._row(self.y, int(i)))


class Pipeline:
    """Shuffled batches of samples, each passed through ``map`` in ``workers`` processes.

    Args:
        x: the inputs: arrays (in memory or from ``tp.data.open_npy``), or any sequence of
            samples (``len`` and indexing) when ``y`` is ``None``.
        y: the targets, or ``None`` when ``x`` yields ``(x, y)`` samples itself.
        batch_size: samples per batch.
        map: a function of one sample (``(x, y)`` or what ``x`` yields) returning the sample
            to batch; it runs in the worker processes, so it must be picklable by cloudpickle.
        shuffle: a new order every epoch, drawn from ``seed``.
        seed: the shuffling seed; ``None`` draws one from ``tp.random``, so
            ``tp.random.set_seed`` fixes it.
        workers: worker processes running ``map`` (0: in this process).
        prefetch: batches each worker (or this process) reads ahead.
        drop_last: drop the last batch of an epoch when it is smaller than ``batch_size``.

    ``fit`` reads it as a batch source; its state (the epoch, the Grain iterator's state)
    goes into checkpoints, so a resume reads the same batches.
    """

    checkpointable = True

    def __init__(
        self,
        x: Any,
        y: Any = None,
        *,
        batch_size: int = 32,
        map: Callable[[Any], Any] | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        workers: int = 0,
        prefetch: int = 2,
        drop_last: bool = False,
    ) -> None:
        self._grain = require_grain()
        for name, value, low in (
            ("batch_size", batch_size, 1),
            ("workers", workers, 0),
            ("prefetch", prefetch, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if map is not None and not callable(map):
            raise TypeError(f"map must be a function of one sample, got {map!r}")
        self.samples = x if y is None and not isinstance(x, np.ndarray) else _Rows(x, y)
        self.batch_size, self.workers, self.prefetch = int(batch_size), int(workers), int(prefetch)
        self.map, self.shuffle, self.drop_last = map, bool(shuffle), bool(drop_last)
        if seed is None:
            seed = int(_random.get_global_generator().integers(2**31))
        self.seed = int(seed)
        n = len(self.samples)
        self.num_batches: int | None = n // self.batch_size if drop_last else -(-n // self.batch_size)
        if not self.num_batches:
            raise ValueError(
                f"drop_last=True with batch_size {batch_size} leaves no batch of the {n} samples"
            )
        self.epoch = -1  # the epoch in progress (its shuffling seed); -1 before the first
        self.position = 0
        self._iterator: Any = None
        self._rank, self._ranks = 0, 1

    def limit(self, steps: int) -> None:
        """Ends every epoch after ``steps`` batches (``fit(steps_per_epoch=...)``)."""
        self.num_batches = min(int(steps), self.num_batches or int(steps))

    def shard(self, rank: int, size: int) -> None:
        """Reads only this process's part of every epoch (every ``size``-th sample from ``rank``)."""
        self._rank, self._ranks = int(rank), int(size)

    def _dataset(self) -> Any:
        grain = self._grain
        ds = grain.MapDataset.source(self.samples)
        if self.shuffle:  # a different order every epoch, the same for the same seed and epoch
            ds = ds.shuffle(seed=(self.seed * 1_000_003 + self.epoch) % 2**32)
        if self._ranks > 1:
            ds = ds[self._rank :: self._ranks]  # Grain's own slicing: each rank reads its part
        if self.map is not None:
            ds = ds.map(self.map)
        ds = ds.batch(self.batch_size, drop_remainder=self.drop_last)
        threads = 1 if self.workers else 2  # reading ahead; the map's Python work is in workers
        iter_ds = ds.to_iter_dataset(
            grain.ReadOptions(num_threads=threads, prefetch_buffer_size=self.prefetch)
        )
        if self.workers:
            options = grain.MultiprocessingOptions(
                num_workers=self.workers, per_worker_buffer_size=self.prefetch
            )
            iter_ds = iter_ds.mp_prefetch(options)
        return iter_ds

    def start_epoch(self) -> None:
        self.epoch += 1
        self.position = 0
        self._iterator = iter(self._dataset())

    def peek(self) -> Any:
        """The first batch of the current epoch's order, read by an iterator of its own."""
        return next(iter(self._dataset()))

    def next_batch(self) -> Any:
        if self._iterator is None:
            self.start_epoch()
        if self.num_batches is not None and self.position >= self.num_batches:
            raise StopIteration
        batch = next(self._iterator)
        self.position += 1
        return batch

    def __iter__(self) -> Any:
        self.start_epoch()
        while True:
            try:
                yield self.next_batch()
            except StopIteration:
                return

    def __len__(self) -> int:
        return int(self.num_batches or 0)

    def get_state(self) -> dict[str, Any]:
        iterator = self._iterator.get_state() if self._iterator is not None else None
        return {
            "kind": "pipeline",
            "epoch": self.epoch,
            "position": self.position,
            "iterator": json.dumps(iterator),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "pipeline" or not isinstance(state.get("iterator"), str):
            raise ValueError("loader: the checkpoint holds no tp.data.Pipeline state for this pipeline input")
        epoch = state.get("epoch")
        if not isinstance(epoch, (int, np.integer)) or isinstance(epoch, bool) or epoch < -1:
            raise ValueError(f"loader.epoch: expected an epoch index, got {epoch!r}")
        self.epoch = int(epoch)
        saved = json.loads(state["iterator"])
        self._iterator = iter(self._dataset()) if saved is not None else None
        if saved is not None:
            self._iterator.set_state(saved)
        self.position = int(state.get("position", 0))
