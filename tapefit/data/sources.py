"""Batch sources: what ``fit``, ``evaluate`` and ``predict`` read their batches from.

Every input becomes an object with this protocol (``BatchLoader`` is the one for arrays):

* ``num_batches``: batches per epoch, or ``None`` for a stream whose length is not known;
* ``start_epoch()``: begins a new epoch (a new order, a fresh iterator);
* ``next_batch()``: the epoch's next batch, ``StopIteration`` after its last;
* ``get_state()`` / ``set_state(state)``: plain data (JSON values and arrays, never pickles)
  that a checkpoint stores, the position inside the epoch included;
* ``checkpointable``: ``False`` when ``set_state`` cannot restore the position (a plain Python
  iterable): a resume then restarts the epoch's stream and says so once.

``as_source`` picks the source for what a user passed; Grain is imported only when a Grain
object is given (the ``data`` extra).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from tapefit.core.tensor import Tensor

logger = logging.getLogger("tapefit")

__all__ = [
    "GrainMapSource",
    "GrainSource",
    "IterableSource",
    "as_source",
    "fit_kind",
    "is_batch_list",
    "is_stream",
    "split_batch",
]


def _is_grain(obj: Any) -> bool:
    module = type(obj).__module__ or ""
    return module == "grain" or module.startswith(("grain.", "grain._src"))


def is_stream(data: Any) -> bool:
    """``data`` is a data set, loader or iterable of batches, rather than arrays (or a dict,
    list or tuple of arrays, Keras's multi-input form)."""
    if data is None or isinstance(data, (np.ndarray, Tensor, dict, list, tuple, str, bytes)):
        return False
    if np.isscalar(data):
        return False
    return (
        _is_grain(data)
        or hasattr(data, "next_batch")
        or isinstance(data, Iterable)
        or is_indexed_batches(data)
    )


def is_indexed_batches(data: Any) -> bool:
    """``data`` gives its batches by index: ``len(data)`` batches, ``data[i]`` each (a Keras
    ``PyDataset`` or ``Sequence``), and is not an array or a container of arrays."""
    if isinstance(data, (np.ndarray, Tensor, dict, list, tuple, str, bytes)):
        return False
    if hasattr(data, "shape") and hasattr(data, "dtype"):
        return False  # an array of samples (a memory-mapped one), indexed by sample
    return callable(getattr(data, "__getitem__", None)) and callable(getattr(data, "__len__", None))


def is_batch_list(data: Any) -> bool:
    """``data`` is a non-empty list or tuple of batches: each an ``(x, y)`` or ``(x, y,
    sample_weight)`` tuple of arrays or a ``{"x": ..., "y": ...}`` dict (``sample_weight`` too).
    ``fit``, ``evaluate`` and ``predict`` read it as a stream when no ``y`` is given; with ``y``,
    a list stays Keras's multi-input arrays."""
    if not isinstance(data, (list, tuple)) or not data:
        return False
    return all(_is_batch(item) for item in data)


def _is_batch(item: Any) -> bool:
    if isinstance(item, dict):
        return set(item) in ({"x", "y"}, {"x", "y", "sample_weight"})
    return (
        isinstance(item, (list, tuple))
        and len(item) in (2, 3)
        and not any(part is None or np.isscalar(part) for part in item)
    )


def split_batch(batch: Any, index: int, targets: bool = True) -> tuple[Any, Any, Any]:
    """``(x, y, sample weights or None)`` of a stream's batch, as Keras reads one: an ``(x, y)``
    or ``(x, y, sample_weight)`` tuple, or a dict with keys ``x``, ``y`` (and ``sample_weight``);
    ``ValueError`` naming the batch otherwise. Without ``targets`` a batch that is none of
    those is ``x`` alone."""
    if isinstance(batch, dict) and set(batch) in ({"x", "y"}, {"x", "y", "sample_weight"}):
        return batch["x"], batch["y"], batch.get("sample_weight")
    if isinstance(batch, (tuple, list)) and len(batch) in (2, 3):
        return batch[0], batch[1], batch[2] if len(batch) == 3 else None
    if not targets:
        return batch, None, None
    shown = type(batch).__name__
    if isinstance(batch, (tuple, list)):
        shown = f"a {shown} of {len(batch)} items"
    elif isinstance(batch, dict):
        shown = f"a dict with keys {sorted(batch)}"
    raise ValueError(
        f"batch {index} of the data: expected an (x, y) or (x, y, sample_weight) tuple, or a dict "
        f"with keys 'x' and 'y' (and 'sample_weight'), got {shown}"
    )


class IterableSource:
    """Batches from any Python iterable (a generator, a list of batches, a class with ``__iter__``).

    Each epoch takes ``iter(iterable)`` afresh: a re-iterable (a list, a data set object)
    starts over, a generator goes on where the last epoch left it, as in Keras. An epoch ends
    when the stream is exhausted or after ``steps_per_epoch`` batches. With
    ``steps_per_epoch``, as Keras does, the next epoch goes on where the last one stopped
    while the stream lasts (a list of 3 batches with ``steps_per_epoch=2``: batches 0, 1, then
    2, then 0, 1 again), and starts it over once an epoch has run it out.
    """

    checkpointable = False

    def __init__(self, iterable: Iterable[Any], steps_per_epoch: int | None = None) -> None:
        self.iterable = iterable
        length = getattr(iterable, "__len__", None)
        self.num_batches = steps_per_epoch if steps_per_epoch is not None else (length() if length else None)
        self._steps = steps_per_epoch
        self._iterator: Iterator[Any] | None = None
        self._pending: list[Any] = []  # a batch peek() read and next_batch() has not given yet
        self._exhausted = False  # the iterator ran out: the next epoch takes a new one
        self.position = 0

    def start_epoch(self) -> None:
        self.position = 0
        if self._steps is not None and self._iterator is not None and not self._exhausted:
            return  # Keras's steps_per_epoch: the epoch goes on with the stream where it stopped
        iterator = iter(self.iterable)  # a generator is its own iterator: it goes on
        if iterator is not self._iterator:
            self._pending = []
        self._iterator = iterator
        self._exhausted = False

    def peek(self) -> Any:
        """The next batch, left to be given again by ``next_batch``."""
        if not self._pending:
            if self._iterator is None:
                self.start_epoch()
            self._pending = [next(self._iterator)]  # type: ignore[arg-type]
        return self._pending[0]

    def next_batch(self) -> Any:
        if self._iterator is None:
            self.start_epoch()
        if self.num_batches is not None and self.position >= self.num_batches:
            raise StopIteration
        try:
            batch = self._pending.pop() if self._pending else next(self._iterator)  # type: ignore[arg-type]
        except StopIteration:
            self._exhausted = True
            raise
        self.position += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        return {"kind": "iterable", "position": self.position}

    def set_state(self, state: dict[str, Any]) -> None:
        # A Python iterable has no state to go back to: the epoch's stream restarts.
        self._iterator = None
        self.start_epoch()


def endless(dataset: Any) -> bool:
    """Whether a Grain data set says it never ends (Grain gives a ``repeat()`` of no count the
    length ``sys.maxsize``); an ``IterDataset`` has no length, and ends when its iterator does."""
    try:
        return len(dataset) >= sys.maxsize
    except TypeError:
        return False


class IndexedSource:
    """Batches read by index from an object with ``__len__`` and ``__getitem__`` (Keras's
    ``PyDataset``): epoch ``e`` reads ``data[0]``, ``data[1]``, ... in order, and after each
    epoch calls ``data.on_epoch_end()`` when it has one (where a data set reshuffles, as in
    Keras). The position is an index, so a resume reads the same batches; under MPI each
    process reads every ``size``-th batch from its rank.

    Args:
        data: the object.
        steps_per_epoch: batches per epoch (default ``len(data)``).
    """

    checkpointable = True

    def __init__(self, data: Any, steps_per_epoch: int | None = None) -> None:
        self.data = data
        self._indices = range(len(data))
        self._steps = steps_per_epoch
        self.position = 0
        self._epochs = 0  # epochs begun; the next start_epoch after one ends calls on_epoch_end

    @property
    def num_batches(self) -> int:
        return len(self._indices) if self._steps is None else min(self._steps, len(self._indices))

    def start_epoch(self) -> None:
        if self._epochs and callable(getattr(self.data, "on_epoch_end", None)):
            self.data.on_epoch_end()
        self._epochs += 1
        self.position = 0

    def peek(self) -> Any:
        """The next batch, left to be given again by ``next_batch``."""
        if self.position >= self.num_batches:
            raise StopIteration
        return self.data[self._indices[self.position]]

    def next_batch(self) -> Any:
        batch = self.peek()
        self.position += 1
        return batch

    def shard(self, rank: int, size: int) -> None:
        """Reads every ``size``-th batch from ``rank`` on, as many on every process."""
        per_rank = len(self.data) // size
        if per_rank == 0:
            raise ValueError(
                f"the data's {len(self.data)} batches cannot be read in parts by {size} processes"
            )
        self._indices = range(rank, rank + per_rank * size, size)

    def get_state(self) -> dict[str, Any]:
        return {"kind": "indexed", "position": self.position, "epochs": self._epochs}

    def set_state(self, state: dict[str, Any]) -> None:
        counts = {}
        for key in ("position", "epochs"):
            value = state.get(key, self._epochs if key == "epochs" else None)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"loader.{key}: expected a count, got {value!r}")
            counts[key] = int(value)
        if counts["position"] > self.num_batches:
            raise ValueError(
                f"loader.position: {counts['position']} is past the data's {self.num_batches} batches"
            )
        self.position, self._epochs = counts["position"], counts["epochs"]


class GrainSource:
    """Batches from a Grain ``MapDataset``, ``IterDataset`` or ``DataLoader``.

    Each epoch iterates the data set from its start (shuffle it, or repeat and shuffle it
    with ``steps_per_epoch``, for a new order per epoch). The iterator's own state
    (``get_state``, small JSON) goes into checkpoints, so a resume reads the same batches.
    ``GrainSource.of`` makes the source of a ``MapDataset`` one that can be read in parts.

    Args:
        dataset: the Grain input, whose elements are ``(x, y)`` batches.
        steps_per_epoch: batches per epoch (default: the data set's length, or until it ends).
        workers: worker processes reading the batches ahead (Grain's ``mp_prefetch``; 0: in
            this process), started for each epoch. A ``MapDataset``'s batches keep their
            order; an ``IterDataset`` is split among the workers as Grain does. A
            ``DataLoader`` brings its own (``worker_count``), so takes none here.
        prefetch: batches each worker reads ahead.
    """

    checkpointable = True

    def __init__(
        self, dataset: Any, steps_per_epoch: int | None = None, *, workers: int = 0, prefetch: int = 2
    ) -> None:
        from tapefit.data.pipeline import _absl_defaults, check_counts, require_grain

        self._grain = require_grain()
        _absl_defaults()  # the user's own Grain workers read absl flags as the Pipeline's do
        check_counts(workers=(workers, 0), prefetch=(prefetch, 1))
        if workers and isinstance(dataset, self._grain.DataLoader):
            raise ValueError(
                "a Grain DataLoader runs its own workers: give it worker_count instead of workers"
            )
        self.dataset = dataset
        self.workers, self.prefetch = int(workers), int(prefetch)
        self._ranks = 1  # processes reading the data set in parts (GrainMapSource.shard)
        self._steps = steps_per_epoch
        self.num_batches = self._batches_per_epoch()
        self._iterator: Any = None
        self._restored: dict[str, Any] | None = None  # a state set_state took, until a batch is read
        self.position = 0

    @property
    def worker_processes(self) -> int:
        """The processes reading this source ahead: ``workers``, or a ``DataLoader``'s own."""
        options = getattr(self.dataset, "_multiprocessing_options", None)  # a DataLoader's
        return self.workers or int(getattr(options, "num_workers", 0) or 0)

    @classmethod
    def of(cls, dataset: Any, steps_per_epoch: int | None = None, **options: Any) -> GrainSource:
        """The source of ``dataset``: a ``GrainMapSource`` for a ``MapDataset``."""
        kind = GrainMapSource if hasattr(dataset, "to_iter_dataset") else GrainSource
        return kind(dataset, steps_per_epoch, **options)

    def _batches_per_epoch(self) -> int | None:
        if self._steps is not None:
            return int(self._steps)
        if endless(self.dataset):
            raise ValueError(
                "the Grain data set repeats without end (a MapDataset.repeat() of no count), so an epoch "
                "would never end: give steps_per_epoch"
            )
        try:
            return len(self.dataset)
        except TypeError:
            return None  # an IterDataset or a DataLoader: its epoch ends when its iterator does

    def limit(self, steps: int) -> None:
        """Ends every epoch after ``steps`` batches (``fit(steps_per_epoch=...)``)."""
        self._steps = int(steps)
        self.num_batches = self._batches_per_epoch()

    def _fresh_iterator(self, workers: int | None = None) -> Any:
        grain = self._grain
        workers = self.workers if workers is None else workers
        data = self.dataset
        if hasattr(data, "to_iter_dataset"):  # a MapDataset: read it in order
            read = grain.ReadOptions(num_threads=1, prefetch_buffer_size=self.prefetch) if workers else None
            data = data.to_iter_dataset(read)
        if workers:
            options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=self.prefetch)
            data = data.mp_prefetch(options)
        return iter(data)

    def _close(self) -> None:
        close = getattr(self._iterator, "close", None)
        if close is not None:  # ends an epoch's worker processes now rather than at collection
            close()
        self._iterator = None

    def start_epoch(self) -> None:
        self._close()
        self._restored = None
        self._iterator = self._fresh_iterator()
        self.position = 0

    def peek(self) -> Any:
        """The first batch of an epoch, read in this process by an iterator of its own."""
        return next(self._fresh_iterator(workers=0))

    def next_batch(self) -> Any:
        if self._iterator is None and self._restored is not None:
            self._open_restored()
        elif self._iterator is None:
            self.start_epoch()
        if self.num_batches is not None and self.position >= self.num_batches:
            raise StopIteration
        batch = next(self._iterator)
        self.position += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        if self._restored is not None:  # restored, and no batch read since
            return dict(self._restored)
        # An iterator that has given nothing is at its start, which None says as well; asking
        # Grain there makes a multiprocess iterator start its workers one after the other.
        state = self._iterator.get_state() if self._iterator is not None and self.position else None
        if isinstance(state, bytes):  # a DataLoader's iterator: JSON as bytes
            state = state.decode("utf-8")
        saved: dict[str, Any] = {"kind": "grain", "position": self.position, "iterator": json.dumps(state)}
        if self.workers:  # the iterator's state has the form of its number of workers
            saved["workers"] = self.workers
        if self._ranks > 1:  # and its position means batches of this process's part
            saved["ranks"] = self._ranks
        return saved

    def set_state(self, state: dict[str, Any]) -> None:
        """Takes a ``get_state`` result; the iterator goes there when the next batch is read
        (by then the trainer has said which part of the data this process reads)."""
        if state.get("kind") != "grain" or not isinstance(state.get("iterator"), str):
            raise ValueError("loader: the checkpoint holds no Grain iterator state for this Grain input")
        saved = json.loads(state["iterator"])
        if saved is not None and state.get("workers", 0) != self.workers:
            raise ValueError(
                f"loader: the checkpoint's Grain iterator was read by {state.get('workers', 0)} worker "
                f"processes, this input by {self.workers}: resume with as many (data.workers)"
            )
        self._close()
        self.position = int(state.get("position", 0))
        self._restored = dict(state) if saved is not None else None  # None: at the start

    def _open_restored(self) -> None:
        state = self._restored or {}
        if state.get("ranks", 1) != self._ranks:
            raise ValueError(
                f"loader: the checkpoint was taken inside an epoch of a Grain data set read in parts by "
                f"{state.get('ranks', 1)} processes, and this fit runs on {self._ranks}: resume it on as "
                "many, or from a checkpoint at an epoch's end"
            )
        saved = json.loads(state["iterator"])
        self._iterator = self._fresh_iterator()
        if isinstance(saved, str):  # a DataLoader's state went in as text
            saved = saved.encode("utf-8")
        self._iterator.set_state(saved)
        self._restored = None


class GrainMapSource(GrainSource):
    """A ``GrainSource`` over a ``MapDataset``, which distributed training reads in parts."""

    def shard(self, rank: int, size: int) -> None:
        """Reads only this process's batches: every ``size``-th from ``rank`` on (Grain's
        ``dataset[rank::size]``), as many on every process (the ``len % size`` batches left
        over are left out of each epoch), so every process takes the same steps."""
        whole = getattr(self, "_whole", self.dataset)
        per_rank = len(whole) // size
        if per_rank == 0:
            raise ValueError(
                f"the Grain data set's {len(whole)} batches cannot be read in parts by {size} processes: "
                "each needs a batch of every step"
            )
        self._whole = whole
        self.dataset = whole.slice(slice(rank, per_rank * size, size))
        self._ranks = int(size)
        self.num_batches = self._batches_per_epoch()


def as_source(data: Any, steps_per_epoch: int | None = None) -> Any:
    """The batch source of ``data``: itself when it has the protocol, else a Grain or an
    iterable source."""
    if hasattr(data, "next_batch") and hasattr(data, "start_epoch"):
        if steps_per_epoch is not None and hasattr(data, "limit"):
            data.limit(steps_per_epoch)
        return data
    if _is_grain(data):
        return GrainSource.of(data, steps_per_epoch)
    if is_indexed_batches(data) and (not isinstance(data, Iterable) or hasattr(data, "on_epoch_end")):
        return IndexedSource(data, steps_per_epoch)  # Keras's PyDataset and Sequence
    return IterableSource(data, steps_per_epoch)


def fit_kind(source: Any) -> dict[str, Any]:
    """What a checkpoint's position means only for a fit of the same kind (``resume.check_fits``)."""
    from tapefit.data.loader import BatchLoader

    if not isinstance(source, BatchLoader):  # a stream: its own state says where it is
        kind = source.get_state().get("kind", type(source).__name__)
        return {"source": kind, "batch_size": 0, "num_samples": 0, "shuffle": False, "drop_last": False}
    return {
        "batch_size": source.batch_size,
        "num_samples": source.num_samples,
        "shuffle": source.shuffle,
        "drop_last": source.drop_last,
    }
