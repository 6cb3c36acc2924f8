"""Adapting what a user passes to ``fit`` into batches: one object the training loop reads.

``adapt`` takes ``fit``'s data arguments (arrays or a stream, ``validation_split``,
``sample_weight``, ``class_weight``, ``validation_data``) and returns ``Batches``, whose
``next_batch`` gives ``(x, y, sample weights)`` of float32 arrays, ready for a step, whatever
the input was: arrays in memory, memory-mapped arrays (cast a batch at a time), a generator, a
list of batches, a ``tp.data.Pipeline`` or a Grain data set. ``Batches`` also holds what the
loop asks of its data otherwise: its state for checkpoints, its length, a part for one process,
a first batch to build a model with, and what a checkpoint's position means (``kind``). The loop
never asks what kind of input it has; Keras's ``DataAdapter`` and ``EpochIterator`` play this
part there.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from tapefit.core import nest
from tapefit.core.tensor import Tensor
from tapefit.data.arrays import is_lazy
from tapefit.data.loader import BatchLoader, _take
from tapefit.data.npy import rows as _rows
from tapefit.data.sources import as_source, fit_kind, is_batch_list, is_stream, split_batch
from tapefit.distributed.world import shard_problem

__all__ = ["Batches", "adapt", "batch_len", "float32_inputs", "in_batch", "streamed", "take"]

take = _take


def float32_inputs(data: Any) -> Any:
    """float64 arrays become float32 (as Keras does); everything else is left as it is."""
    if isinstance(data, dict):
        return {k: float32_inputs(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)) and data and isinstance(data[0], (np.ndarray, Tensor)):
        return type(data)(float32_inputs(v) for v in data)
    if isinstance(data, Tensor):
        data = data.numpy()
    if is_lazy(data):
        return data  # cast batch by batch: the whole array may not fit in memory
    if isinstance(data, np.ndarray) and data.dtype == np.float64:
        return data.astype(np.float32)
    return data


def check_numeric(data: Any, name: str, strings: bool = False) -> None:
    """Raises a one-line ``TypeError`` naming ``name`` (``"y"``, ``"x['image']"``) when an array
    of ``data`` holds strings, objects or dates, which a model cannot take (``strings``: the
    model takes strings, as a first ``TextVectorization`` does)."""
    if isinstance(data, dict):
        for key, value in data.items():
            check_numeric(value, f"{name}[{key!r}]", strings)
        return
    if isinstance(data, (list, tuple)) and data and isinstance(data[0], (np.ndarray, Tensor, dict)):
        for index, value in enumerate(data):
            check_numeric(value, f"{name}[{index}]", strings)
        return
    kind = getattr(data, "dtype", None) or np.asarray(data).dtype
    if np.dtype(kind).kind in "biuf" or (strings and np.dtype(kind).kind in "US"):
        return
    what = {"U": "strings", "S": "bytes", "O": "Python objects", "M": "dates", "m": "time spans"}
    held = what.get(np.dtype(kind).kind, f"values of dtype {kind}")
    fix = (
        "encode the labels as integers, e.g. classes, y = np.unique(y, return_inverse=True)"
        if name.startswith("y")
        else "encode them as numbers first"
    )
    raise TypeError(f"{name} holds {held} (dtype {kind}), which a model cannot take: {fix}")


def batch_len(data: Any) -> int:
    """The number of samples in a batch (the first leaf's first axis)."""
    while isinstance(data, (dict, list, tuple)):
        data = next(iter(data.values())) if isinstance(data, dict) else data[0]
    return len(data)


def _as_batch(data: Any) -> Any:
    """Arrays of a batch (a stream may yield lists or scalars per sample)."""
    if isinstance(data, dict):
        return {k: _as_batch(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)) and data and isinstance(data[0], (np.ndarray, Tensor, dict)):
        return type(data)(_as_batch(v) for v in data)
    return data if isinstance(data, (np.ndarray, Tensor)) else np.asarray(data)


def stream_batch(batch: Any, index: int, targets: bool = True) -> Any:
    """A stream's batch number ``index`` as ``(x, y, sample weights or None)`` float32 arrays
    (``x`` alone without targets)."""
    x, y, weights = split_batch(batch, index, targets)
    if not targets:
        return float32_inputs(_as_batch(x))
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float32).reshape(-1)
    return float32_inputs(_as_batch(x)), float32_inputs(_as_batch(y)), weights


def streamed(x: Any, y: Any) -> bool:
    """``x`` is read as a stream of batches: a data set, loader or iterable, or without ``y`` a
    list of ``(x, y)`` batches."""
    return is_stream(x) or (y is None and is_batch_list(x))


def in_batch(error: Exception, where: str) -> Exception:
    """``error`` of the same type with ``where`` before its message (itself if it cannot be made)."""
    try:
        return type(error)(f"{where} of the data: {error}")
    except Exception:
        return error


def require_targets(y: Any, where: str) -> None:
    # The loader takes y=None for inputs only; the loop would then unpack a batch of x as (x, y).
    if y is None:
        raise ValueError(f"{where}: y is None; the loss needs targets (predict(x) takes inputs alone)")


def _part(data: Any, start: int, stop: int) -> Any:
    """Samples ``start:stop`` of arrays (a dict, list or tuple of them), read later when on disk."""
    if isinstance(data, dict):
        return {k: _part(v, start, stop) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_part(v, start, stop) for v in data)
    return _rows(data, start, stop)


def _split_off_validation(x: Any, y: Any, sample_weight: Any, fraction: float) -> tuple[Any, Any, Any, Any]:
    """Keras's ``validation_split``: the last ``fraction`` of the samples, before shuffling."""
    n = batch_len(y)
    n_train = int(np.floor(n * (1.0 - fraction)))
    if n_train == 0 or n_train == n:
        raise ValueError(
            f"validation_split {fraction} of {n} samples leaves "
            f"{'no training' if n_train == 0 else 'no validation'} samples"
        )
    held_out_weights = None
    if (
        sample_weight is not None
    ):  # the held-out rows keep theirs: the validation loss is weighted, as Keras's
        sample_weight, held_out_weights = (
            np.asarray(sample_weight)[:n_train],
            np.asarray(sample_weight)[n_train:],
        )
    _warn_if_sorted_by_class(y, n_train, fraction)
    return (
        _part(x, 0, n_train),
        _part(y, 0, n_train),
        sample_weight,
        (_part(x, n_train, n), _part(y, n_train, n), held_out_weights),
    )


def _class_labels(y: Any) -> np.ndarray | None:
    """Class indices of in-memory labels (integers, or one-hot rows); ``None`` for others."""
    if not isinstance(y, np.ndarray) or is_lazy(y):
        return None
    if y.dtype.kind in "iub" and (y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1)):
        return y.reshape(-1)
    if y.ndim == 2 and y.shape[1] > 1 and np.all((y == 0) | (y == 1)) and np.all(y.sum(axis=1) == 1):
        return np.argmax(y, axis=1)
    return None


def _warn_if_sorted_by_class(y: Any, n_train: int, fraction: float) -> None:
    """Warns when the rows ``validation_split`` holds out are of one class and the others are
    not: the rows are sorted by class, and the validation would measure one class alone."""
    labels = _class_labels(y)
    if labels is None:
        return
    held, kept = np.unique(labels[n_train:]), np.unique(labels[:n_train])
    if len(held) == 1 and (len(kept) > 1 or kept[0] != held[0]):
        warnings.warn(
            f"validation_split={fraction} holds out the last {len(labels) - n_train} rows, which are all "
            f"of class {held[0]}: the rows look sorted by class, so the validation measures one class; "
            "shuffle x and y together before fit (Keras also takes the last rows)",
            UserWarning,
            stacklevel=4,
        )


def sample_weights(
    y: Any, sample_weight: Any, class_weight: Any, loss: Any, by_step: bool = False
) -> np.ndarray | None:
    """One float32 weight per sample from ``sample_weight`` and ``class_weight`` (Keras's rules), or
    ``None``. ``by_step``: a model's own step receives them, so no loss needs to take them."""
    if sample_weight is None and class_weight is None:
        return None
    from tapefit.layers.losses import Loss

    # a loss per output passes the weights on to each output's tp.losses.Loss
    outputs = [o.loss for o in getattr(loss, "outputs", [])] if hasattr(loss, "weights") else []
    weighs = isinstance(loss, Loss) or (bool(outputs) and all(isinstance(o, Loss) for o in outputs))
    if not by_step and not weighs:
        raise TypeError(
            f"sample_weight and class_weight need a tp.losses.Loss (it weights the per-sample losses), "
            f"got the loss {loss!r}"
        )
    if class_weight is None and isinstance(y, (list, tuple, dict)) and y:
        y = next(iter(y.values())) if isinstance(y, dict) else y[0]  # one weight per sample, every output
    if not isinstance(y, (np.ndarray, Tensor)):
        raise TypeError("sample_weight and class_weight need y as one array of targets")
    labels = np.asarray(y)
    n = labels.shape[0] if labels.ndim else 0
    weights = np.ones(n, dtype=np.float64)
    if sample_weight is not None:
        given = np.asarray(sample_weight, dtype=np.float64)
        if given.ndim == 2 and given.shape[1] == 1:
            given = given[:, 0]
        if given.shape != (n,):
            raise ValueError(
                f"sample_weight must have one weight per sample, shape ({n},), got {given.shape}"
            )
        if not np.all(np.isfinite(given)) or np.any(given < 0):
            raise ValueError("sample_weight must be finite and non-negative")
        weights *= given
    if class_weight is not None:
        if not isinstance(class_weight, dict) or not class_weight:
            raise TypeError(f"class_weight must be a dict {{class index: weight}}, got {class_weight!r}")
        classes = labels.argmax(axis=-1) if labels.ndim == 2 and labels.shape[1] > 1 else labels.reshape(n)
        if classes.dtype.kind == "f" and not np.all(classes == np.round(classes)):
            raise ValueError("class_weight needs class indices (or one-hot labels) as y")
        classes = classes.astype(np.int64)
        table = np.ones(int(classes.max()) + 1, dtype=np.float64)  # a class it does not list: 1, as Keras
        for key, value in class_weight.items():
            if 0 <= int(key) < table.size:
                table[int(key)] = float(value)
        weights *= table[classes]
    return weights.astype(np.float32)


class Batches:
    """The batches ``fit`` trains on, as ``(x, y, sample weights or None)`` float32 arrays.

    Attributes:
        source: the batch source underneath (a ``BatchLoader`` for arrays, or a stream's
            source; ``tapefit.data.sources`` documents the protocol).
        stream: whether the input is a stream (its batches may differ from each other, so an
            error in a step names the batch).
        num_batches: batches per epoch (``None``: until the stream ends).
        batch_size: samples per batch of arrays (0 for a stream, whose batches are its own).
        num_samples: training samples of arrays (``None`` for a stream).
        sharded: ``shard`` made this process read only its own part of the data.
    """

    def __init__(
        self, source: Any, *, weighted: bool = False, lazy: bool = False, targets: bool = True
    ) -> None:
        self.source = source
        self.targets = targets  # False: batches may be inputs alone (a step that needs no y)
        self.stream = not isinstance(source, BatchLoader)
        self.batch_size = 0 if self.stream else source.batch_size
        self.num_samples = None if self.stream else source.num_samples
        self.sharded = False
        self._weighted = weighted  # the loader's targets are (y, sample weights)
        self._lazy = lazy  # memory-mapped arrays: made arrays, float32, a batch at a time

    # -- the source protocol, passed through -----------------------------------

    @property
    def num_batches(self) -> int | None:
        return self.source.num_batches

    @property
    def checkpointable(self) -> bool:
        return bool(self.source.checkpointable)

    @property
    def worker_processes(self) -> int:
        """Processes reading the data ahead (a Pipeline's or Grain's workers), 0 without."""
        return int(getattr(self.source, "worker_processes", getattr(self.source, "workers", 0)) or 0)

    def start_epoch(self) -> None:
        self.source.start_epoch()

    def get_state(self) -> dict[str, Any]:
        return self.source.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self.source.set_state(state)

    def kind(self) -> dict[str, Any]:
        """What a checkpoint's position means only for a fit of the same kind (``check_fits``)."""
        return fit_kind(self.source)

    # -- batches ---------------------------------------------------------------

    def next_batch(self, index: int) -> tuple[Any, Any, Any]:
        """The epoch's next ``(x, y, sample weights or None)``; ``StopIteration`` after its last.

        Args:
            index: the batch's number in its epoch, which an error in a stream's batch names.
        """
        batch = self.source.next_batch()
        if self.stream or self._lazy:
            if not self.targets and not self.stream and self.source.y is None:
                return float32_inputs(_as_batch(batch)), None, None
            x, y, weights = split_batch(batch, index, self.targets)  # a stream's batch may carry weights
            x, y = float32_inputs(_as_batch(x)), None if y is None else float32_inputs(_as_batch(y))
            if weights is not None:
                weights = np.asarray(weights, dtype=np.float32).reshape(-1)
        elif self.source.y is None:
            x, y, weights = batch, None, None
        else:
            (x, y), weights = batch, None
        if self._weighted:  # arrays with fit's sample_weight or class_weight: {"y": y, "w": weights}
            y, weights = y["y"], y["w"]
        return x, y, weights

    def first_batch(self) -> tuple[Any, Any, Any]:
        """A first batch's ``(x, y, sample weights or None)``, to build a model with, leaving the
        source where it was."""
        if self.stream:
            return split_batch(self.source.peek(), 0, self.targets)
        batch = self.source.batch(None, 0)
        if self.source.y is None:
            return batch, None, None
        x, y = batch
        return (x, y["y"], y["w"]) if self._weighted else (x, y, None)

    def first_inputs(self) -> Any:
        """The inputs of a first batch, to build a model with, leaving the source where it was."""
        return self.first_batch()[0]

    def shard(self, rank: int, size: int) -> bool:
        """Makes this process read only its part, when the source can (a Pipeline, a Grain
        ``MapDataset``); ``False``: every process reads it whole and splits each batch by rows."""
        if size <= 1 or not hasattr(self.source, "shard"):
            return False
        self.source.shard(rank, size)
        self.sharded = True
        return True

    def check_shards(self, size: int) -> None:
        """Every global batch of arrays must give each of ``size`` processes at least one sample."""
        if self.stream:
            return  # a stream's batches are split as they come (or read per rank by the source)
        problem = shard_problem(self.source.num_samples, self.source.batch_size, self.source.drop_last, size)
        if problem is not None:
            raise ValueError(problem)


def adapt(
    x: Any,
    y: Any,
    *,
    batch_size: int,
    shuffle: bool,
    drop_last: bool,
    loss: Any,
    sample_weight: Any = None,
    class_weight: Any = None,
    validation_split: float = 0.0,
    validation_data: Any = None,
    steps_per_epoch: int | None = None,
    targets: bool = True,
    strings: bool = False,
) -> tuple[Batches, Any]:
    """``fit``'s data arguments as ``(Batches, validation data or None)``, checked with Keras's rules.

    ``targets=False``: ``y`` may be missing (a model whose own step or ``add_loss`` gives the loss).
    ``strings``: ``x`` may hold strings (the model's preprocessing layers take them).

    Raises:
        ValueError, TypeError: an argument that does not fit the others, named.
    """
    stream = streamed(x, y)
    if validation_data is not None and is_stream(validation_data):
        validation_data = (validation_data, None, None)
    elif validation_data is not None and (
        not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3)
    ):
        raise ValueError(
            "validation_data must be a tuple (x_val, y_val) or (x_val, y_val, val_sample_weight), "
            "or a data set or generator"
        )
    elif validation_data is not None:
        validation_data = (*validation_data, None)[:3]
    if isinstance(validation_split, bool) or not 0.0 <= float(validation_split) < 1.0:
        raise ValueError(f"validation_split must be a fraction in [0, 1), got {validation_split!r}")
    if validation_split and (stream or validation_data is not None):
        raise ValueError(
            "validation_split takes the last samples of arrays; with a data set or generator, or "
            "with validation_data, give validation_data alone"
        )
    if stream:
        if y is not None:
            raise ValueError(
                "fit: y must be None when x is a data set or a generator: its batches carry the targets"
            )
        if sample_weight is not None or class_weight is not None:
            raise ValueError(
                "sample_weight and class_weight need arrays; a stream's batches are (x, y) pairs"
            )
        batches = Batches(as_source(x, steps_per_epoch), targets=targets)
    else:
        if targets:
            require_targets(y, "fit")
        check_numeric(x, "x", strings)
        if y is not None:
            check_numeric(y, "y")
        if steps_per_epoch is not None:
            raise ValueError(
                "steps_per_epoch is for data sets and generators; with arrays an epoch is one pass"
            )
        if validation_split:
            x, y, sample_weight, validation_data = _split_off_validation(
                x, y, sample_weight, float(validation_split)
            )
        weights = sample_weights(y, sample_weight, class_weight, loss, by_step=not targets)
        loader = BatchLoader(
            float32_inputs(x),
            # a dict keeps targets of several outputs a structure beside the weights
            None
            if y is None
            else float32_inputs(y)
            if weights is None
            else {"y": float32_inputs(y), "w": weights},
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        lazy = any(is_lazy(leaf) for leaf in nest.flatten(x))
        batches = Batches(loader, weighted=weights is not None, lazy=lazy, targets=targets)
    if validation_data is not None and not is_stream(validation_data[0]):
        x_val, y_val, w_val = validation_data
        require_targets(y_val, "validation_data")
        check_numeric(x_val, "validation_data x", strings)
        check_numeric(y_val, "validation_data y")
        try:
            w_val = sample_weights(y_val, w_val, None, loss)
        except (TypeError, ValueError) as error:
            raise type(error)(f"validation_data: {error}") from None
        validation_data = (float32_inputs(x_val), float32_inputs(y_val), w_val)
        try:  # checked now rather than after the first epoch's training
            BatchLoader(validation_data[0], validation_data[1], batch_size=max(1, batch_size), shuffle=False)
        except (TypeError, ValueError) as error:
            raise type(error)(f"validation_data: {error}") from None
    return batches, validation_data
