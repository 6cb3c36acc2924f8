"""Layers that move values about without weights: Reshape, Permute, RepeatVector, ZeroPadding1D/2D,
Cropping1D/2D and UpSampling1D/2D (Keras 3's ``keras.layers`` reshaping layers).

The batch axis (0) is never touched. ``data_format`` is ``"channels_last"`` (the default,
``(batch, steps, channels)`` or ``(batch, rows, cols, channels)``) or ``"channels_first"``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tapefit.core.messages import shown
from tapefit.core.ops import shape as _shape
from tapefit.core.ops.linalg import einsum
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.layers.module import Layer, rank_of

__all__ = [
    "Cropping1D",
    "Cropping2D",
    "Permute",
    "RepeatVector",
    "Reshape",
    "UpSampling1D",
    "UpSampling2D",
    "ZeroPadding1D",
    "ZeroPadding2D",
]


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _pair(value: Any, what: str, layer: str, low: int = 0) -> tuple[int, int]:
    """An int ``n`` as ``(n, n)``, or a pair of ints, each at least ``low``."""
    pair = (value, value) if _is_int(value) else value
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or not all(_is_int(v) and v >= low for v in pair)
    ):
        words = "non-negative" if low == 0 else "positive"
        raise ValueError(f"{layer}: {what} must be a {words} int or a pair of them, got {shown(value)}")
    return int(pair[0]), int(pair[1])


def _pairs(value: Any, what: str, layer: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """``n``, ``(rows, cols)`` or ``((top, bottom), (left, right))`` as the last form."""
    if _is_int(value):
        p = _pair(value, what, layer)
        return (p[0], p[0]), (p[1], p[1])
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return _pair(value[0], what, layer), _pair(value[1], what, layer)
    raise ValueError(f"{layer}: {what} must be an int, a pair of ints or a pair of pairs, got {shown(value)}")


def _data_format(value: Any, layer: str) -> str:
    if value is None:
        return "channels_last"
    if value not in ("channels_last", "channels_first"):
        raise ValueError(
            f"{layer}: data_format must be 'channels_last' or 'channels_first', got {shown(value)}"
        )
    return str(value)


class _Moving(Layer):
    """A layer that only moves values: its output keeps the input's dtype."""

    _keeps_input_dtype = True


def _plus(size: int | None, extra: int) -> int | None:
    return None if size is None else size + extra


def _times(size: int | None, factor: int) -> int | None:
    return None if size is None else size * factor


def _rank(layer: Layer, x: Tensor, ndim: int) -> None:
    if x.ndim != ndim:
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' needs inputs of rank {ndim}, got shape {tuple(x.shape)}"
        )


class Reshape(_Moving):
    """Reshapes each sample to ``target_shape``: ``(batch, ...)`` -> ``(batch, *target_shape)``.

    Args:
        target_shape: the shape of one sample (without the batch axis); one entry may be
            ``-1``, worked out from the sample's size.
        name: the layer's name.
    """

    def __init__(self, target_shape: tuple[int, ...] | list[int], name: str | None = None) -> None:
        super().__init__(name=name)
        if not isinstance(target_shape, (tuple, list)) or not all(
            _is_int(n) and (n > 0 or n == -1) for n in target_shape
        ):
            raise ValueError(
                f"Reshape: target_shape must be a tuple of positive ints (one may be -1), got {shown(target_shape)}"
            )
        if list(target_shape).count(-1) > 1:
            raise ValueError(f"Reshape: target_shape may hold one -1, got {shown(target_shape)}")
        self.target_shape = tuple(int(n) for n in target_shape)

    def call(self, inputs: Any) -> Tensor:
        """Reshapes the input."""
        x = as_tensor(inputs)
        size = math.prod(x.shape[1:])
        known = math.prod(n for n in self.target_shape if n != -1)
        if (-1 in self.target_shape and (known == 0 or size % known)) or (
            -1 not in self.target_shape and known != size
        ):
            raise ValueError(
                f"Reshape '{self.name}': samples of shape {tuple(x.shape[1:])} ({size} values) cannot "
                f"take the shape {self.target_shape}"
            )
        return _shape.reshape(x, (x.shape[0], *self.target_shape))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, *target_shape)``, a ``-1`` worked out when the sample's size is known."""
        shape = rank_of(self, input_shape, range(1, 64))
        known = math.prod(n for n in self.target_shape if n != -1)
        if None in shape[1:]:
            return (shape[0], *(None if n == -1 else n for n in self.target_shape))
        size = math.prod(n for n in shape[1:] if n is not None)
        if (-1 in self.target_shape and (known == 0 or size % known)) or (
            -1 not in self.target_shape and known != size
        ):
            raise ValueError(
                f"Reshape '{self.name}': samples of shape {shape[1:]} ({size} values) cannot "
                f"take the shape {self.target_shape}"
            )
        return (shape[0], *(size // known if n == -1 else n for n in self.target_shape))


class Permute(_Moving):
    """Permutes the axes of each sample: ``dims`` lists the input axes, counted from 1 (the
    batch axis stays first), e.g. ``Permute((2, 1))`` swaps the two axes of a sample.

    Args:
        dims: a permutation of ``1, ..., rank - 1``.
        name: the layer's name.
    """

    def __init__(self, dims: tuple[int, ...] | list[int], name: str | None = None) -> None:
        super().__init__(name=name)
        if not isinstance(dims, (tuple, list)) or sorted(dims) != list(range(1, len(dims) + 1)):
            raise ValueError(f"Permute: dims must be a permutation of 1, ..., n, got {shown(dims)}")
        self.dims = tuple(int(d) for d in dims)

    def call(self, inputs: Any) -> Tensor:
        """Permutes the input's axes."""
        x = as_tensor(inputs)
        _rank(self, x, len(self.dims) + 1)
        return _shape.transpose(x, (0, *self.dims))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The sample's axes in the order of ``dims``."""
        shape = rank_of(self, input_shape, len(self.dims) + 1)
        return (shape[0], *(shape[d] for d in self.dims))


class RepeatVector(_Moving):
    """Repeats each sample ``n`` times along a new axis: ``(batch, features)`` -> ``(batch, n, features)``.

    Args:
        n: the number of repeats.
        name: the layer's name.
    """

    def __init__(self, n: int, name: str | None = None) -> None:
        super().__init__(name=name)
        if not _is_int(n) or n <= 0:
            raise ValueError(f"RepeatVector: n must be a positive int, got {shown(n)}")
        self.n = int(n)

    def call(self, inputs: Any) -> Tensor:
        """Repeats the input."""
        x = as_tensor(inputs)
        _rank(self, x, 2)
        return _shape.tile(_shape.expand_dims(x, 1), (1, self.n, 1))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, n, features)``."""
        shape = rank_of(self, input_shape, 2)
        return (shape[0], self.n, shape[1])


class ZeroPadding1D(_Moving):
    """Adds zeros before and after the steps of ``(batch, steps, channels)`` inputs.

    Args:
        padding: zeros on both sides (an int) or ``(before, after)``.
        data_format: ``"channels_last"`` (default) or ``"channels_first"`` (``(batch, channels, steps)``).
        name: the layer's name.
    """

    def __init__(
        self, padding: int | tuple[int, int] = 1, data_format: str | None = None, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        self.padding = _pair(padding, "padding", "ZeroPadding1D")
        self.data_format = _data_format(data_format, "ZeroPadding1D")

    def call(self, inputs: Any) -> Tensor:
        """Pads the input."""
        x = as_tensor(inputs)
        _rank(self, x, 3)
        paddings = [(0, 0), (0, 0), (0, 0)]
        paddings[2 if self.data_format == "channels_first" else 1] = self.padding
        return _shape.pad(x, paddings)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The steps' axis longer by the padding."""
        shape = list(rank_of(self, input_shape, 3))
        axis = 2 if self.data_format == "channels_first" else 1
        shape[axis] = _plus(shape[axis], sum(self.padding))
        return tuple(shape)


class ZeroPadding2D(_Moving):
    """Adds rows and columns of zeros around ``(batch, rows, cols, channels)`` inputs.

    Args:
        padding: an int (all four sides), ``(rows, cols)`` (symmetric), or
            ``((top, bottom), (left, right))``.
        data_format: ``"channels_last"`` (default) or ``"channels_first"``.
        name: the layer's name.
    """

    def __init__(
        self, padding: Any = (1, 1), data_format: str | None = None, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        self.padding = _pairs(padding, "padding", "ZeroPadding2D")
        self.data_format = _data_format(data_format, "ZeroPadding2D")

    def call(self, inputs: Any) -> Tensor:
        """Pads the input."""
        x = as_tensor(inputs)
        _rank(self, x, 4)
        rows, cols = self.padding
        if self.data_format == "channels_first":
            return _shape.pad(x, [(0, 0), (0, 0), rows, cols])
        return _shape.pad(x, [(0, 0), rows, cols, (0, 0)])

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The rows and columns more by the padding."""
        shape = list(rank_of(self, input_shape, 4))
        first = 2 if self.data_format == "channels_first" else 1
        for i, pad in enumerate(self.padding):
            shape[first + i] = _plus(shape[first + i], sum(pad))
        return tuple(shape)


def _cropped(layer: Layer, shape: tuple[int | None, ...], axis: int, cut: tuple[int, int]) -> int | None:
    """The size of ``axis`` after the crop (``_crop``'s check, for a shape)."""
    size = shape[axis]
    if size is None:
        return None
    if cut[0] + cut[1] >= size:
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}': cropping {cut} leaves nothing of axis {axis} "
            f"of inputs of shape {shape}"
        )
    return size - cut[0] - cut[1]


def _crop(layer: Layer, x: Tensor, axis: int, cut: tuple[int, int]) -> Tensor:
    size = x.shape[axis]
    if cut[0] + cut[1] >= size:
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}': cropping {cut} leaves nothing of axis {axis} "
            f"of inputs of shape {tuple(x.shape)}"
        )
    index = [slice(None)] * x.ndim
    index[axis] = slice(cut[0], size - cut[1])
    return x[tuple(index)]


class Cropping1D(_Moving):
    """Removes steps from the start and end of ``(batch, steps, channels)`` inputs.

    Args:
        cropping: steps removed at both ends (an int) or ``(start, end)``.
        name: the layer's name.
    """

    def __init__(self, cropping: int | tuple[int, int] = (1, 1), name: str | None = None) -> None:
        super().__init__(name=name)
        self.cropping = _pair(cropping, "cropping", "Cropping1D")

    def call(self, inputs: Any) -> Tensor:
        """Crops the input."""
        x = as_tensor(inputs)
        _rank(self, x, 3)
        return _crop(self, x, 1, self.cropping)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The steps fewer by the cropping."""
        shape = rank_of(self, input_shape, 3)
        return (shape[0], _cropped(self, shape, 1, self.cropping), shape[2])


class Cropping2D(_Moving):
    """Removes rows and columns from the edges of ``(batch, rows, cols, channels)`` inputs.

    Args:
        cropping: an int (all four sides), ``(rows, cols)`` (symmetric), or
            ``((top, bottom), (left, right))``.
        data_format: ``"channels_last"`` (default) or ``"channels_first"``.
        name: the layer's name.
    """

    def __init__(
        self, cropping: Any = ((0, 0), (0, 0)), data_format: str | None = None, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        self.cropping = _pairs(cropping, "cropping", "Cropping2D")
        self.data_format = _data_format(data_format, "Cropping2D")

    def call(self, inputs: Any) -> Tensor:
        """Crops the input."""
        x = as_tensor(inputs)
        _rank(self, x, 4)
        first = 2 if self.data_format == "channels_first" else 1
        return _crop(self, _crop(self, x, first, self.cropping[0]), first + 1, self.cropping[1])

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The rows and columns fewer by the cropping."""
        shape = rank_of(self, input_shape, 4)
        out = list(shape)
        first = 2 if self.data_format == "channels_first" else 1
        for i in range(2):
            out[first + i] = _cropped(self, shape, first + i, self.cropping[i])
        return tuple(out)


def _repeat(x: Tensor, axis: int, size: int) -> Tensor:
    """Each entry along ``axis`` repeated ``size`` times in place (``np.repeat``), from
    differentiable ops: a new axis after ``axis``, tiled, then merged back."""
    if size == 1:
        return x
    expanded = _shape.expand_dims(x, axis + 1)
    multiples = [1] * expanded.ndim
    multiples[axis + 1] = size
    shape = list(x.shape)
    shape[axis] *= size
    return _shape.reshape(_shape.tile(expanded, multiples), shape)


class UpSampling1D(_Moving):
    """Repeats each step ``size`` times: ``(batch, steps, features)`` -> ``(batch, steps * size, features)``.

    Args:
        size: the repeats.
        name: the layer's name.
    """

    def __init__(self, size: int = 2, name: str | None = None) -> None:
        super().__init__(name=name)
        if not _is_int(size) or size <= 0:
            raise ValueError(f"UpSampling1D: size must be a positive int, got {shown(size)}")
        self.size = int(size)

    def call(self, inputs: Any) -> Tensor:
        """Upsamples the input."""
        x = as_tensor(inputs)
        _rank(self, x, 3)
        return _repeat(x, 1, self.size)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The steps ``size`` times as many."""
        shape = rank_of(self, input_shape, 3)
        return (shape[0], _times(shape[1], self.size), shape[2])


def _bilinear_matrix(n: int, scale: int) -> np.ndarray:
    """The ``(n * scale, n)`` matrix of bilinear weights with half-pixel centers (each output
    pixel's center maps to ``(i + 0.5) / scale - 0.5`` in the input, clamped to its edges)."""
    out = np.zeros((n * scale, n), dtype=np.float64)
    for i in range(n * scale):
        source = min(max((i + 0.5) / scale - 0.5, 0.0), n - 1.0)
        low = int(np.floor(source))
        high = min(low + 1, n - 1)
        weight = source - low
        out[i, low] += 1.0 - weight
        out[i, high] += weight
    return out


class UpSampling2D(_Moving):
    """Enlarges ``(batch, rows, cols, channels)`` inputs by ``size``: each pixel repeated
    (``"nearest"``), or interpolated between its neighbours (``"bilinear"``, with half-pixel
    centers as Keras and ``jax.image.resize``).

    Args:
        size: the factor for rows and columns (an int for both, or ``(rows, cols)``).
        data_format: ``"channels_last"`` (default) or ``"channels_first"``.
        interpolation: ``"nearest"`` or ``"bilinear"``.
        name: the layer's name.
    """

    def __init__(
        self,
        size: int | tuple[int, int] = (2, 2),
        data_format: str | None = None,
        interpolation: str = "nearest",
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        self.size = _pair(size, "size", "UpSampling2D", low=1)
        self.data_format = _data_format(data_format, "UpSampling2D")
        if not isinstance(interpolation, str) or interpolation.lower() not in ("nearest", "bilinear"):
            raise ValueError(
                f"UpSampling2D: interpolation must be 'nearest' or 'bilinear', got {shown(interpolation)}"
            )
        self.interpolation = interpolation.lower()

    def call(self, inputs: Any) -> Tensor:
        """Upsamples the input."""
        x = as_tensor(inputs)
        _rank(self, x, 4)
        first = 2 if self.data_format == "channels_first" else 1
        if self.interpolation == "nearest":
            return _repeat(_repeat(x, first, self.size[0]), first + 1, self.size[1])
        rows = Tensor(_bilinear_matrix(x.shape[first], self.size[0]).astype(x.dtype))
        cols = Tensor(_bilinear_matrix(x.shape[first + 1], self.size[1]).astype(x.dtype))
        equation = "hH,bcHW,wW->bchw" if self.data_format == "channels_first" else "hH,bHWc,wW->bhwc"
        return einsum(equation, rows, x, cols)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The rows and columns ``size`` times as many."""
        shape = list(rank_of(self, input_shape, 4))
        first = 2 if self.data_format == "channels_first" else 1
        for i in range(2):
            shape[first + i] = _times(shape[first + i], self.size[i])
        return tuple(shape)
