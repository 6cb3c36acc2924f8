"""The batch loader of the fit loop: seeded shuffling, an optional dropped last batch.

Its only state is one NumPy generator, so a checkpoint that stores the generator's
state and the current epoch's order resumes the exact same batches.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from tapefit.core import random as _random
from tapefit.core.tensor import Tensor
from tapefit.data.npy import is_on_disk


def _as_arrays(data: Any, name: str) -> Any:
    """``data`` with every Tensor made an ndarray; dicts, lists and tuples are kept as structure."""
    if isinstance(data, dict):
        return {k: _as_arrays(v, f"{name}[{k!r}]") for k, v in data.items()}
    if (
        isinstance(data, (list, tuple))
        and data
        and (isinstance(data[0], (np.ndarray, Tensor)) or is_on_disk(data[0]))
    ):
        return type(data)(_as_arrays(v, f"{name}[{i}]") for i, v in enumerate(data))
    if is_on_disk(data):
        return data  # rows are read from disk batch by batch
    array = np.asarray(data)
    if array.dtype == object:
        raise TypeError(
            f"{name} must be a numeric array, got an array of Python objects from {type(data).__name__}"
        )
    if array.ndim == 0:
        raise ValueError(f"{name} must have a batch (first) axis, got a scalar")
    return array


def _leaves(data: Any) -> list[np.ndarray]:
    if isinstance(data, dict):
        return [leaf for v in data.values() for leaf in _leaves(v)]
    if isinstance(data, (list, tuple)):
        return [leaf for v in data for leaf in _leaves(v)]
    return [data]


def _take(data: Any, index: np.ndarray | slice) -> Any:
    if isinstance(data, dict):
        return {k: _take(v, index) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_take(v, index) for v in data)
    return data[index]


class BatchLoader:
    """Cuts arrays into batches, in a new shuffled order every epoch.

    Args:
        x: the inputs: an array (or Tensor) whose first axis is the sample axis, or a
            dict/list/tuple of such arrays.
        y: the targets, same number of samples as ``x``; ``None`` for inputs only.
        batch_size: samples per batch.
        shuffle: draw a new random order every epoch; otherwise keep the data's order.
        drop_last: drop the last batch when it is smaller than ``batch_size`` (by
            default it is kept, as Keras does).
        seed: seed of the loader's own generator; ``None`` draws one from
            ``tp.random``'s global generator (only when shuffling), so
            ``tp.random.set_seed`` fixes it.

    Iterating over the loader gives one epoch of ``(x_batch, y_batch)`` pairs (or
    ``x_batch`` alone when ``y`` is ``None``). The fit loop reads it as a batch source:
    ``start_epoch`` then ``next_batch`` until ``StopIteration``, with ``get_state`` and
    ``set_state`` holding the generator, the epoch's order and the position in it, so a fit
    can resume in the middle of an epoch.
    """

    checkpointable = True  # get_state holds the position: a resume gives the same batches

    def __init__(
        self,
        x: Any,
        y: Any = None,
        batch_size: int = 32,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.x = _as_arrays(x, "x")
        self.y = None if y is None else _as_arrays(y, "y")
        sizes = {f"x{i}": len(a) for i, a in enumerate(_leaves(self.x))}
        if self.y is not None:
            sizes.update({f"y{i}": len(a) for i, a in enumerate(_leaves(self.y))})
        if len(set(sizes.values())) > 1:
            shapes = (
                [a.shape for a in _leaves(self.x)],
                [a.shape for a in (_leaves(self.y) if self.y is not None else [])],
            )
            raise ValueError(
                f"x and y must have the same number of samples (first axis); got x shapes {shapes[0]} "
                f"and y shapes {shapes[1]}"
            )
        self.num_samples = next(iter(sizes.values()))
        if self.num_samples == 0:
            raise ValueError("x has no samples (its first axis has length 0)")
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        if seed is None and shuffle:
            seed = int(_random.get_global_generator().integers(2**63))
        self.rng = np.random.default_rng() if seed is None else _random.seeded_generator(seed)
        self.order: np.ndarray | None = None  # the epoch in progress's order (None: data order)
        self.position = 0  # batches of the epoch in progress already given
        if self.num_batches == 0:
            raise ValueError(
                f"drop_last=True with batch_size {self.batch_size} leaves no batch of the "
                f"{self.num_samples} samples"
            )

    @property
    def num_batches(self) -> int:
        """Batches per epoch."""
        if self.drop_last:
            return self.num_samples // self.batch_size
        return math.ceil(self.num_samples / self.batch_size)

    def __len__(self) -> int:
        return self.num_batches

    def epoch_order(self) -> np.ndarray | None:
        """The sample order of a new epoch (a permutation), or ``None`` when not shuffling."""
        if not self.shuffle:
            return None
        return self.rng.permutation(self.num_samples)

    def batch(self, order: np.ndarray | None, index: int) -> Any:
        """Batch number ``index`` of the epoch whose order ``epoch_order`` gave."""
        start = index * self.batch_size
        stop = min(start + self.batch_size, self.num_samples)
        rows: np.ndarray | slice = slice(start, stop) if order is None else order[start:stop]
        if self.y is None:
            return _take(self.x, rows)
        return _take(self.x, rows), _take(self.y, rows)

    def __iter__(self) -> Iterator[Any]:
        order = self.epoch_order()
        for index in range(self.num_batches):
            yield self.batch(order, index)

    def start_epoch(self) -> None:
        """Begins a new epoch: draws its order (when shuffling) and starts at its first batch."""
        self.order = self.epoch_order()
        self.position = 0

    def next_batch(self) -> Any:
        """The epoch's next batch; ``StopIteration`` after its last."""
        if self.position >= self.num_batches:
            raise StopIteration
        batch = self.batch(self.order, self.position)
        self.position += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        """The generator's state, the epoch's order and the position in it (plain data), for checkpoints."""
        return {"rng": self.rng.bit_generator.state, "order": self.order, "position": self.position}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what ``get_state`` returned."""
        self.rng.bit_generator.state = state["rng"]
        self.order = state.get("order")
        self.position = int(state.get("position", 0))
