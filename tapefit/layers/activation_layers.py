"""Value-wise layers: activations as layers (Keras 3's ``ReLU``, ``LeakyReLU``, ``PReLU``,
``ELU``, ``Softmax``), ``Rescaling`` and ``GaussianNoise``. Each keeps its input's shape and
passes a mask of the steps on."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from tapefit.core.ops import math as _math
from tapefit.core.ops import nn as _nn
from tapefit.core.ops.shape import expand_dims
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.layers import constraints, initializers
from tapefit.layers.module import Layer, rank_of


def _finite(layer: str, name: str, value: Any, low: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{layer}: {name} must be a number, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or (low is not None and value < low):
        bound = "" if low is None else f" >= {low:g}"
        raise ValueError(f"{layer}: {name} must be a finite number{bound}, got {value!r}")
    return value


class _ValueWise(Layer):
    supports_masking = True

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``input_shape``: the activation works value by value."""
        return rank_of(self, input_shape, range(0, 64))


class ReLU(_ValueWise):
    """Keras's ``ReLU``: ``min(x, max_value)`` for ``x >= threshold``, else
    ``negative_slope * (x - threshold)``.

    Args:
        max_value: the largest output (``None``: none).
        negative_slope: the slope below ``threshold``.
        threshold: where the slope changes.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    def __init__(
        self,
        max_value: float | None = None,
        negative_slope: float = 0.0,
        threshold: float = 0.0,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        self.max_value = None if max_value is None else _finite("ReLU", "max_value", max_value, low=0.0)
        self.negative_slope = _finite("ReLU", "negative_slope", negative_slope, low=0.0)
        self.threshold = _finite("ReLU", "threshold", threshold)

    def call(self, inputs: Any) -> Tensor:
        """Applies the rectifier."""
        x = self._cast_input(inputs)
        if self.threshold == 0.0 and self.negative_slope == 0.0:
            y = _nn.relu(x)
        else:
            shifted = x - self.threshold
            y = _math.where(x >= self.threshold, x, shifted * self.negative_slope)
        return y if self.max_value is None else _math.minimum(y, self.max_value)


class LeakyReLU(_ValueWise):
    """Keras's ``LeakyReLU``: ``x`` for ``x > 0``, else ``negative_slope * x``.

    Args:
        negative_slope: the slope below 0 (Keras 3's default, 0.3).
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
        alpha: Keras 2's name of ``negative_slope``, taken with a warning as Keras 3 takes it.
    """

    def __init__(
        self,
        negative_slope: float = 0.3,
        name: str | None = None,
        dtype: Any = None,
        *,
        alpha: float | None = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        if alpha is not None:
            warnings.warn(
                "LeakyReLU: alpha is Keras 2's name; use negative_slope", DeprecationWarning, stacklevel=2
            )
            negative_slope = alpha
        self.negative_slope = _finite("LeakyReLU", "negative_slope", negative_slope, low=0.0)

    def get_config(self) -> dict[str, Any]:
        """The constructor's config, ``alpha`` given as ``negative_slope``."""
        config = super().get_config()
        config.pop("alpha", None)
        config["negative_slope"] = self.negative_slope
        return config

    def call(self, inputs: Any) -> Tensor:
        """Applies the leaky rectifier."""
        return _nn.leaky_relu(self._cast_input(inputs), alpha=self.negative_slope)


class ELU(_ValueWise):
    """Keras's ``ELU``: ``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``.

    Args:
        alpha: the scale below 0.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    def __init__(self, alpha: float = 1.0, name: str | None = None, dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.alpha = _finite("ELU", "alpha", alpha)

    def call(self, inputs: Any) -> Tensor:
        """Applies the exponential linear unit."""
        x = self._cast_input(inputs)
        return _nn.elu(x) if self.alpha == 1.0 else _math.where(x > 0, x, _nn.elu(x) * self.alpha)


class PReLU(_ValueWise):
    """Keras's ``PReLU``: ``x`` for ``x > 0``, else ``alpha * x`` with ``alpha`` learned, one per
    value of a sample (or shared along ``shared_axes``).

    Args:
        alpha_initializer: initializes ``alpha`` (Keras's default, zeros).
        alpha_regularizer: penalizes ``alpha`` (adds to ``losses``).
        alpha_constraint: applied to ``alpha`` after each update.
        shared_axes: axes of a sample (1 for the first after the batch) along which one ``alpha``
            is shared, e.g. ``[1, 2]`` for one per channel of images.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    def __init__(
        self,
        alpha_initializer: Any = "zeros",
        alpha_regularizer: Any = None,
        alpha_constraint: Any = None,
        shared_axes: Any = None,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        self.alpha_initializer = initializers.get(alpha_initializer)
        self.alpha_constraint = constraints.get(alpha_constraint)
        self._add_regularizer("alpha", alpha_regularizer)
        axes = (
            []
            if shared_axes is None
            else [shared_axes]
            if isinstance(shared_axes, int)
            else list(shared_axes)
        )
        if not all(isinstance(a, int) and not isinstance(a, bool) and a >= 1 for a in axes):
            raise ValueError(f"PReLU: shared_axes must be axes >= 1 of a sample, got {shared_axes!r}")
        self.shared_axes = axes
        self.alpha: Any = None

    def build(self, input_shape: Any) -> None:
        shape = rank_of(self, input_shape, range(2, 64))
        if any(shape[a] is None for a in range(1, len(shape)) if a not in self.shared_axes):
            raise ValueError(
                f"PReLU '{self.name}': the axes not in shared_axes need known sizes, got {shape}"
            )
        if any(a >= len(shape) for a in self.shared_axes):
            raise ValueError(f"PReLU '{self.name}': shared_axes {self.shared_axes} past the rank of {shape}")
        param = tuple(1 if a in self.shared_axes else int(shape[a]) for a in range(1, len(shape)))  # type: ignore[arg-type]
        self.alpha = self.add_weight(
            shape=param, initializer=self.alpha_initializer, name="alpha", constraint=self.alpha_constraint
        )

    def call(self, inputs: Any) -> Tensor:
        """Applies the parametric rectifier."""
        x = self._cast_input(inputs)
        return _math.where(x > 0, x, x * self.alpha)


class Softmax(_ValueWise):
    """Keras's ``Softmax``: ``exp(x) / sum(exp(x))`` along ``axis``; called with ``mask`` (true
    where a value counts), the masked values get no probability.

    Args:
        axis: the axis (or axes) normalized over.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    def __init__(self, axis: int = -1, name: str | None = None, dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise TypeError(f"Softmax: axis must be an int, got {axis!r}")
        self.axis = axis

    def call(self, inputs: Any, mask: Any = None) -> Tensor:
        """The probabilities."""
        x = self._cast_input(inputs)
        if mask is not None:
            keep = as_tensor(mask)
            while keep.ndim < x.ndim:
                keep = expand_dims(keep, -1)
            # Keras's large negative adder: a masked value's exp underflows to 0
            x = x + (1.0 - _math.cast(keep, x.dtype)) * np.float32(-1e9)
        return _nn.softmax(x, axis=self.axis)


class Rescaling(_ValueWise):
    """Keras's ``Rescaling``: ``inputs * scale + offset`` (images from [0, 255] to [0, 1] with
    ``scale=1 / 255``), in the layer's dtype.

    Args:
        scale: the factor.
        offset: added after scaling.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    def __init__(self, scale: float, offset: float = 0.0, name: str | None = None, dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.scale = _finite("Rescaling", "scale", scale)
        self.offset = _finite("Rescaling", "offset", offset)

    def call(self, inputs: Any) -> Tensor:
        """Scales and shifts."""
        x = self._cast_input(inputs) * self.scale
        return x + self.offset if self.offset else x


class GaussianNoise(_ValueWise):
    """Keras's ``GaussianNoise``: adds zero-mean normal noise of standard deviation ``stddev``
    when called with ``training=True`` (drawn from ``tp.random``, so checkpoints resume it);
    otherwise the identity.

    Args:
        stddev: the noise's standard deviation.
        seed: an op seed, as ``Dropout``'s.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    def __init__(
        self, stddev: float, seed: int | None = None, name: str | None = None, dtype: Any = None
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        self.stddev = _finite("GaussianNoise", "stddev", stddev, low=0.0)
        self.seed = seed

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Adds noise when ``training`` is true."""
        x = self._cast_input(inputs)
        if not training or self.stddev == 0.0:
            return x
        from tapefit.core import random

        return x + random.normal(x.shape, stddev=self.stddev, dtype=x.dtype, seed=self.seed)


__all__ = ["ELU", "GaussianNoise", "LeakyReLU", "PReLU", "ReLU", "Rescaling", "Softmax"]
