"""``tp.data.Pipeline``: per-sample work (``map``) in worker processes, on Grain.

For arrays (in memory or memory-mapped) ``fit`` batches by itself; a pipeline is for data that
needs Python work per sample (decoding, augmentation) that should not stall the training
step. It is built on Grain (``pip install "tapefit[data]"``): shuffling, batching, worker
processes and prefetching are Grain's, and so is the iterator state a checkpoint keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import random as _random

__all__ = ["Pipeline", "require_grain"]


def _absl_defaults() -> None:
    """Grain's worker processes read absl flags, which a program that is not an absl app never
    parsed: take their defaults, as an absl app without arguments would."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def check_counts(**counts: tuple[Any, int]) -> None:
    """Raises ``ValueError`` naming the first ``name=(value, least)`` whose value is not an
    integer of at least ``least``."""
    for name, (value, low) in counts.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def require_grain() -> Any:
    """The ``grain`` module, or an ``ImportError`` that says how to install it.

    Grain's import logs absl warnings about JAX's profiler (none without JAX, an old one
    with an old jaxlib), which have nothing to do with tapefit: they are held back here.
    """
    try:
        from absl import logging as absl_logging

        absl_logger = absl_logging.get_absl_logger()
        level = absl_logger.level
        absl_logger.setLevel(logging.ERROR)
        try:
            import grain
        finally:
            absl_logger.setLevel(level)
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


def _stack(samples: list[Any]) -> Any:
    """One batch of samples: every leaf stacked along a new first axis (tuples, lists, dicts kept)."""
    first = samples[0]
    if isinstance(first, dict):
        return {k: _stack([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_stack([s[i] for s in samples]) for i in range(len(first)))
    return np.stack([np.asarray(s) for s in samples])


class _MakeBatch:
    """Batch number ``b`` of the run: batch ``b % per_epoch`` of epoch ``b // per_epoch``.

    An epoch's order is a permutation of the samples drawn from ``(seed, epoch)`` (the data
    order without shuffling); a process of ``ranks`` takes its positions ``rank, rank + ranks,
    ...``. Runs in the worker processes, each keeping the permutation of its current epoch.
    """

    def __init__(
        self,
        samples: Any,
        fn: Any,
        seed: int | None,
        per_rank: int,
        per_epoch: int,
        batch_size: int,
        rank: int,
        ranks: int,
    ) -> None:
        self.samples, self.fn, self.seed, self.per_rank = samples, fn, seed, per_rank
        self.per_epoch, self.batch_size, self.rank, self.ranks = per_epoch, batch_size, rank, ranks
        self._epoch, self._order = -1, np.arange(0)

    def _order_of(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            n = len(self.samples)
            self._order = (
                np.arange(n)
                if self.seed is None
                else np.random.default_rng([self.seed, epoch]).permutation(n)
            )
            self._epoch = epoch
        return self._order

    def __call__(self, b: Any) -> Any:
        epoch, k = divmod(int(b), self.per_epoch)
        start = k * self.batch_size
        stop = min(start + self.batch_size, self.per_rank)
        positions = self.rank + self.ranks * np.arange(start, stop)
        samples = [self.samples[int(i)] for i in self._order_of(epoch)[positions]]
        if self.fn is not None:
            samples = [self.fn(sample) for sample in samples]
        return _stack(samples)


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
        workers: worker processes running ``map`` (0: in this process), started once for the
            whole fit (each makes whole batches).
        prefetch: batches each worker (or this process) reads ahead.
        drop_last: drop the last batch of an epoch when it is smaller than ``batch_size``.

    ``fit`` reads it as a batch source; its state (the seed, the epoch and the position in it)
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
        check_counts(batch_size=(batch_size, 1), workers=(workers, 0), prefetch=(prefetch, 1))
        if map is not None and not callable(map):
            raise TypeError(f"map must be a function of one sample, got {map!r}")
        self.samples = x if y is None and not isinstance(x, np.ndarray) else _Rows(x, y)
        self.batch_size, self.workers, self.prefetch = int(batch_size), int(workers), int(prefetch)
        self.map, self.shuffle, self.drop_last = map, bool(shuffle), bool(drop_last)
        if seed is None:
            seed = int(_random.get_global_generator().integers(2**31))
        self.seed = int(seed)
        self._rank, self._ranks = 0, 1
        self._limit: int | None = None
        self.num_batches: int | None = self._batches_per_epoch()
        self.epoch = -1  # the epoch in progress; -1 before the first
        self.position = 0  # batches of the epoch in progress already given
        self._iterator: Any = None
        self._next = 0  # the run's batch number next_batch gives next

    def _batches_per_epoch(self) -> int:
        per_rank = len(self.samples) // self._ranks
        batches = per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)
        if batches == 0:
            where = f" over {self._ranks} processes ({per_rank} each)" if self._ranks > 1 else ""
            raise ValueError(f"{len(self.samples)} samples{where} leave no batch of {self.batch_size}")
        return batches if self._limit is None else min(batches, self._limit)

    def limit(self, steps: int) -> None:
        """Ends every epoch after ``steps`` batches (``fit(steps_per_epoch=...)``)."""
        self._limit = int(steps)
        self.num_batches = self._batches_per_epoch()

    def shard(self, rank: int, size: int) -> None:
        """Reads only this process's part of every epoch: every ``size``-th sample of the epoch's
        order from ``rank`` on, the same number on every process (the ``len % size`` samples
        left over are left out of that epoch), so each step's batches have one size everywhere."""
        self._rank, self._ranks = int(rank), int(size)
        self.num_batches = self._batches_per_epoch()

    def _open(self, start: int, workers: int | None = None) -> Any:
        """An iterator over the run's batches from batch number ``start`` on."""
        grain = self._grain
        make = _MakeBatch(
            self.samples,
            self.map,
            self.seed if self.shuffle else None,
            len(self.samples) // self._ranks,
            int(self.num_batches or 1),
            self.batch_size,
            self._rank,
            self._ranks,
        )
        batches = grain.MapDataset.range(start, 2**62).map(make)
        workers = self.workers if workers is None else workers
        threads = 1 if workers else 2  # reading ahead; the map's Python work is in workers
        iter_ds = batches.to_iter_dataset(
            grain.ReadOptions(num_threads=threads, prefetch_buffer_size=self.prefetch)
        )
        if workers:
            _absl_defaults()
            options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=self.prefetch)
            iter_ds = iter_ds.mp_prefetch(options)
        return iter(iter_ds)

    def start_epoch(self) -> None:
        self.epoch += 1
        self.position = 0
        first = self.epoch * int(self.num_batches or 1)
        if self._iterator is None or self._next != first:  # an epoch left early: go to this one
            self._iterator = self._open(first)
            self._next = first

    def peek(self) -> Any:
        """The first batch of the current epoch, read in this process by an iterator of its own."""
        return next(self._open(max(self.epoch, 0) * int(self.num_batches or 1), workers=0))

    def next_batch(self) -> Any:
        if self._iterator is None:
            self.start_epoch()
        if self.num_batches is not None and self.position >= self.num_batches:
            raise StopIteration
        batch = next(self._iterator)
        self.position += 1
        self._next += 1
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
        """The seed and the position (plain data): every batch is a function of the seed and
        its number in the run, so they are the whole iterator state. Asking Grain's iterator
        for its state instead made its second worker start only after the first had given a
        batch (measured: a 0.8 s stall at every fit's second batch)."""
        return {"kind": "pipeline", "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "pipeline":
            raise ValueError("loader: the checkpoint holds no tp.data.Pipeline state for this pipeline input")
        for key in ("seed", "epoch", "position"):
            value = state.get(key)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < -1:
                raise ValueError(f"loader.{key}: expected an integer, got {value!r}")
        self.seed, self.epoch, self.position = int(state["seed"]), int(state["epoch"]), int(state["position"])
        self._next = max(self.epoch, 0) * int(self.num_batches or 1) + self.position
        # In an epoch: go on from its next batch (before the first epoch, start_epoch opens).
        self._iterator = self._open(self._next) if self.epoch >= 0 else None
