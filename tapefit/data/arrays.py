"""Checks, the seeded training/validation split and standardization shared by every data set."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.random import seeded_generator


class DataError(ValueError):
    """A data set that cannot be used as given; ``key`` names the config key at fault, if any."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def check_arrays(x: Any, y: Any, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Checks and converts features and labels loaded from ``source``.

    Features become float32 with at least two dimensions (a 1-D ``x`` is one feature per
    sample, as Keras reads it). Integer or boolean labels become int32 (class indices);
    floating labels become float32.

    Args:
        x: The features, one sample per row.
        y: The labels, one per sample (or one row per sample).
        source: Where the arrays came from, for the error messages.

    Returns:
        ``(x, y)`` as float32 features and int32 or float32 labels.

    Raises:
        DataError: If the arrays are not numeric, empty, or disagree in length, or an integer
            label is outside int32's range.
    """
    if is_lazy(x):
        return _check_lazy(x, y, source)
    x = np.asarray(x)
    y = np.asarray(y)
    for what, array in (("features", x), ("labels", y)):
        if array.dtype.kind not in "biuf":
            raise DataError(f"{source}: the {what} must be numbers, got dtype {array.dtype}")
        if array.ndim == 0:
            raise DataError(f"{source}: the {what} must have one entry per sample, got a scalar")
    if len(x) == 0:
        raise DataError(f"{source}: there are no samples")
    if len(x) != len(y):
        raise DataError(f"{source}: {len(x)} samples of features but {len(y)} labels")
    if x.ndim == 1:
        x = x[:, None]
    x = x.astype(np.float32, copy=False)
    _check_finite(x, source, "features")
    if y.dtype.kind in "biu":
        _check_class_range(y, source)
        y = y.astype(np.int32, copy=False)
    else:
        y = y.astype(np.float32, copy=False)
        _check_finite(y, source, "labels")
    return x, y


_INT32 = np.iinfo(np.int32)


def _check_class_range(labels: np.ndarray, source: str) -> None:
    """Refuses integer labels that int32 cannot hold (a cast would wrap 4294967297 to class 1)."""
    if labels.dtype.kind == "b" or labels.size == 0:
        return
    if labels.min() >= _INT32.min and labels.max() <= _INT32.max:
        return
    where = tuple(int(i) for i in np.argwhere((labels < _INT32.min) | (labels > _INT32.max))[0])
    sample, *rest = where
    place = f"sample {sample}" + (f", column {rest[0] if len(rest) == 1 else tuple(rest)}" if rest else "")
    raise DataError(
        f"{source}: the label {labels[where]} at {place} is outside the range of class indices "
        f"(int32, {_INT32.min} to {_INT32.max})"
    )


def _check_finite(values: Any, source: str, what: str, first_row: int = 0) -> None:
    """Refuses NaN or infinite ``values`` (rows from ``first_row``), naming the first one and where."""
    values = np.asarray(values)
    if values.dtype.kind != "f" or np.all(np.isfinite(values)):
        return
    where = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
    sample, *rest = where
    place = f"sample {first_row + sample}"
    if rest:
        place += (
            f", {'feature' if what == 'features' else 'column'} {rest[0] if len(rest) == 1 else tuple(rest)}"
        )
    raise DataError(
        f"{source}: the {what} contain NaN or infinite values (the first: {values[where]} at {place})"
    )


def is_lazy(x: Any) -> bool:
    """``x`` is read from disk as rows are taken (memory-mapped), so it must not be copied whole."""
    from tapefit.data.npy import is_on_disk

    return is_on_disk(x)


def _check_lazy(x: Any, y: Any, source: str) -> tuple[Any, np.ndarray]:
    """``check_arrays`` for memory-mapped features: checked a block of rows at a time, not copied."""
    if x.dtype.kind not in "biuf" or x.ndim < 2:
        raise DataError(f"{source}: the features must be numbers with a sample axis, got {x.dtype} {x.shape}")
    if len(x) == 0:
        raise DataError(f"{source}: there are no samples")
    if len(x) != len(y):
        raise DataError(f"{source}: {len(x)} samples of features but {len(y)} labels")
    block = max(1, (64 << 20) // max(1, x.dtype.itemsize * int(np.prod(x.shape[1:]))))
    for start in range(0, len(x), block):
        if x.dtype.kind == "f":
            _check_finite(x[start : start + block], source, "features", first_row=start)
    _, y = check_arrays(np.zeros((len(y), 1), np.float32), y, source)
    return x, y


def validation_split(
    x: np.ndarray, y: np.ndarray, fraction: float, seed: int
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None]:
    """Splits ``(x, y)`` into training and validation parts after a seeded shuffle.

    Unlike Keras's ``validation_split`` (which takes the last samples as they come), the
    samples are shuffled first, so data sorted by class still gives a fair split; the same
    seed gives the same split. Memory-mapped features are split as Keras does (the last
    samples), so that nothing is copied. The validation part has ``n - floor(n * (1 - fraction))``
    samples, Keras's count.

    Args:
        x: Features, one sample per row.
        y: Labels, one per sample.
        fraction: The share of samples held out, in ``[0, 1)``; 0 gives no validation part.
        seed: Seed of the shuffle.

    Returns:
        ``((x_train, y_train), (x_val, y_val))``, or ``((x, y), None)`` for ``fraction == 0``.

    Raises:
        DataError: If ``fraction`` is outside ``[0, 1)`` or leaves a part empty.
    """
    if not 0.0 <= fraction < 1.0:
        raise DataError(f"validation_split must be in [0, 1), got {fraction}", key="validation_split")
    if fraction == 0.0:
        return (x, y), None
    n = len(x)
    n_train = int(np.floor(n * (1.0 - fraction)))
    if n_train == 0 or n_train == n:
        raise DataError(
            f"validation_split {fraction} of {n} samples leaves "
            f"{'no training' if n_train == 0 else 'no validation'} samples",
            key="validation_split",
        )
    if is_lazy(x):  # a shuffled split would read the whole array: the last samples, as Keras
        from tapefit.data.npy import rows

        return (rows(x, 0, n_train), y[:n_train]), (rows(x, n_train, n), y[n_train:])
    order = seeded_generator(seed).permutation(n)
    train, val = order[:n_train], order[n_train:]
    return (x[train], y[train]), (x[val], y[val])


def standardize(
    x_train: np.ndarray, *others: np.ndarray
) -> tuple[list[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Scales every feature to mean 0 and standard deviation 1, with statistics of ``x_train``.

    The statistics come from the training part only, so nothing leaks from the validation
    part; a constant feature is centred and left unscaled.

    Args:
        x_train: Training features; the per-feature statistics are taken over its first axis.
        *others: More arrays (validation features) scaled with the same statistics.

    Returns:
        ``([x_train, *others] standardized, (mean, std))``.
    """
    mean = x_train.mean(axis=0, dtype=np.float64)
    std = x_train.std(axis=0, dtype=np.float64)
    std[std == 0.0] = 1.0
    mean, std = mean.astype(x_train.dtype), std.astype(x_train.dtype)
    scaled = [((a - mean) / std).astype(x_train.dtype, copy=False) for a in (x_train, *others)]
    return scaled, (mean, std)
