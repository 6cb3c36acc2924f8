"""``Normalization``: features shifted and scaled by a mean and variance learned by ``adapt``."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from tapefit.core.messages import shown
from tapefit.core.ops.math import maximum, sqrt
from tapefit.core.ops.shape import reshape
from tapefit.core.tensor import Tensor, Variable
from tapefit.layers.module import Layer

_EPSILON = 1e-7  # Keras's backend.epsilon(): the smallest standard deviation divided by


def _first_of(batch: Any) -> Any:
    """The inputs of a batch that may be ``(x, y)`` or ``(x, y, sample_weight)``."""
    return batch[0] if isinstance(batch, tuple) else batch


def _array(value: Any) -> np.ndarray:
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


class Normalization(Layer):
    """Shifts and scales inputs to mean 0 and variance 1 per feature, as Keras's
    ``Normalization``: ``(x - mean) / max(sqrt(variance), 1e-7)``, or with ``invert=True``
    ``mean + x * max(sqrt(variance), 1e-7)``.

    The mean and variance are given, or learned by ``adapt(data)``, separately for each index
    of the ``axis`` axes (``None``: one value over everything). Learned ones are the
    non-trainable weights ``mean``, ``variance`` and ``count`` (the values ``adapt`` saw), so
    model files keep them. The layer is differentiable with respect to its inputs.

    Args:
        axis: the axis or axes that keep their own statistics (default the last); ``None``.
        mean: the mean (a number or an array of the kept axes' sizes), with ``variance``.
        variance: the variance, with ``mean``.
        invert: undo the normalization instead.
        name: the layer's name.
        dtype: the dtype of the weights and computations (float32).
        trainable: kept for Keras's signature (the weights are not trainable).
    """

    supports_masking = True

    def __init__(
        self,
        axis: int | tuple[int, ...] | list[int] | None = -1,
        mean: Any = None,
        variance: Any = None,
        invert: bool = False,
        *,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        where = f"Normalization '{self.name}'"
        if axis is None:
            axes: tuple[int, ...] = ()
        elif isinstance(axis, int) and not isinstance(axis, bool):
            axes = (axis,)
        elif isinstance(axis, (tuple, list)) and all(isinstance(a, int) for a in axis):
            axes = tuple(axis)
        else:
            raise ValueError(f"{where}: axis must be an int, a tuple of ints or None, got {shown(axis)}")
        if (mean is None) != (variance is None):
            raise ValueError(f"{where}: give both mean and variance, or neither (then adapt)")
        if mean is not None:
            if np.shape(mean) != np.shape(variance):
                raise ValueError(
                    f"{where}: mean and variance must have one shape, got {np.shape(mean)} and {np.shape(variance)}"
                )
            if np.ndim(mean) > len(axes):
                raise ValueError(
                    f"{where}: a mean of shape {np.shape(mean)} has more axes than axis={shown(axis)} keeps"
                )
            mean, variance = _array(mean).astype(np.float64), _array(variance).astype(np.float64)
        self.axis = axes
        self.input_mean = mean
        self.input_variance = variance
        self.invert = bool(invert)
        self.mean: Variable | None = None
        self.variance: Variable | None = None
        self.count: Variable | None = None
        self._constants: tuple[np.ndarray, np.ndarray] | None = None
        self._input_shape: tuple[int | None, ...] | None = None

    def build(self, input_shape: Any) -> None:
        """Works out the kept axes for inputs of ``input_shape``; makes the weights (or, with a
        given mean and variance, their broadcast constants)."""
        where = f"Normalization '{self.name}'"
        shape = tuple(input_shape)
        ndim = len(shape)
        if any(not -ndim <= a < ndim for a in self.axis):
            raise ValueError(f"{where}: axis {list(self.axis)} is out of range for inputs of rank {ndim}")
        keep = tuple(sorted(a % ndim for a in self.axis))
        unknown = [a for a in keep if shape[a] is None]
        if unknown:
            raise ValueError(
                f"{where}: the kept axis {unknown[0]} needs a known size, got inputs of shape {shape}"
            )
        self._input_shape = shape
        self._keep = keep
        self._reduce = tuple(d for d in range(ndim) if d not in keep)
        self._broadcast = tuple(shape[d] if d in keep else 1 for d in range(ndim))
        own = tuple(shape[d] for d in keep)
        if self.input_mean is None:
            self.mean = self.add_weight(own, "zeros", trainable=False, name="mean")
            self.variance = self.add_weight(own, "ones", trainable=False, name="variance")
            self.count = self.add_weight((), "zeros", dtype="int64", trainable=False, name="count")
            return
        mean, variance = self.input_mean, self.input_variance
        assert variance is not None
        if mean.ndim:
            expanded = [1] * ndim
            for i in range(1, mean.ndim + 1):
                expanded[keep[-i]] = mean.shape[-i]
            mean, variance = mean.reshape(expanded), variance.reshape(expanded)
        try:
            mean = np.broadcast_to(mean, self._broadcast).astype(self.dtype)
            variance = np.broadcast_to(variance, self._broadcast).astype(self.dtype)
        except ValueError:
            raise ValueError(
                f"{where}: a mean of shape {self.input_mean.shape} does not fit inputs of shape {shape}"
            ) from None
        self._constants = (mean, variance)

    def adapt(self, data: Any) -> None:
        """Learns the mean and variance of ``data``: an array, or an iterable of batches (a
        list of arrays, a generator, a data set giving ``(x, y)`` or ``x``), as Keras's.

        Raises:
            ValueError: empty data, or batches whose kept axes differ from the layer's inputs.
            TypeError: batches that are not arrays.
        """
        where = f"Normalization '{self.name}'"
        if self.input_mean is not None:
            raise ValueError(f"{where} was given its mean and variance; it cannot adapt")
        if isinstance(data, (np.ndarray, Tensor)):
            batches: Any = [_array(data)]
        elif hasattr(data, "__iter__") and not isinstance(data, (str, bytes)):
            iterator = iter(data)
            first = next(iterator, None)
            if first is None:
                raise ValueError(f"{where}: adapt got no batches")
            batches = itertools.chain([_first_of(first)], (_first_of(b) for b in iterator))
        else:
            raise TypeError(f"{where}: adapt takes an array or an iterable of batches, got {shown(data)}")
        total_mean = total_var = None
        total = 0
        for batch in batches:
            values = _array(batch)
            if values.dtype.kind not in "fiub":
                raise TypeError(f"{where}: adapt takes numbers, got values of dtype {values.dtype.name}")
            values = values.astype(np.float64)
            if not self.built:
                self.build(values.shape)
            self._check_shape(values.shape, "adapt")
            mean = values.mean(axis=self._reduce) if self._reduce else values
            var = values.var(axis=self._reduce) if self._reduce else np.zeros_like(values)
            count = math.prod(values.shape[d] for d in self._reduce)
            if total_mean is None or total_var is None:
                total_mean, total_var, total = mean, var, count
                continue
            # Keras's running combination of the batches' moments
            total += count
            weight = count / total
            new_mean = total_mean * (1 - weight) + mean * weight
            total_var = (total_var + (total_mean - new_mean) ** 2) * (1 - weight) + (
                var + (mean - new_mean) ** 2
            ) * weight
            total_mean = new_mean
        assert self.mean is not None and self.variance is not None and self.count is not None
        assert total_mean is not None and total_var is not None
        self.mean.assign(np.asarray(total_mean).reshape(self.mean.shape).astype(self.dtype))
        self.variance.assign(np.asarray(total_var).reshape(self.variance.shape).astype(self.dtype))
        self.count.assign(np.asarray(total, dtype=np.int64))

    def _check_shape(self, shape: tuple[int, ...], what: str) -> None:
        assert self._input_shape is not None
        if len(shape) != len(self._input_shape) or any(shape[d] != self._input_shape[d] for d in self._keep):
            raise ValueError(
                f"Normalization '{self.name}' was built for inputs of shape {self._input_shape} "
                f"(keeping axes {list(self._keep)}), {what} got shape {tuple(shape)}"
            )

    def call(self, inputs: Any) -> Tensor:
        """The normalized (or, with ``invert``, restored) inputs.

        Raises:
            ValueError: the layer has neither been adapted nor given a mean and variance.
        """
        x = self._cast_input(inputs)
        self._check_shape(tuple(x.shape), "a call")
        if self._constants is not None:
            mean: Any = self._constants[0]
            scale: Any = np.maximum(np.sqrt(self._constants[1]), _EPSILON).astype(self.dtype)
        else:
            assert self.mean is not None and self.variance is not None and self.count is not None
            if int(self.count.numpy()) == 0:
                raise ValueError(
                    f"Normalization '{self.name}' has no statistics yet: call adapt(data) first, or "
                    "give mean= and variance="
                )
            mean = reshape(self.mean, self._broadcast)
            scale = maximum(sqrt(reshape(self.variance, self._broadcast)), _EPSILON)
        if self.invert:
            return x * scale + mean
        return (x - mean) / scale

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``input_shape``: values are normalized in place."""
        return tuple(input_shape)

    def get_config(self) -> dict[str, Any]:
        """``axis``, ``mean``, ``variance``, ``invert`` (a given mean and variance as lists; learned
        ones are weights), with ``name``, ``trainable`` and ``dtype``."""
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": self.dtype.name,
            "axis": list(self.axis),
            "mean": None if self.input_mean is None else self.input_mean.tolist(),
            "variance": None if self.input_variance is None else self.input_variance.tolist(),
            "invert": self.invert,
        }
