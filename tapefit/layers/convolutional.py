"""Convolution and pooling layers over NHWC images and (batch, steps, channels) sequences
(channels last, as Keras by default)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core.messages import shown
from tapefit.core.ops import math as _math
from tapefit.core.ops import nn as _nn
from tapefit.core.ops import reduce as _reduce
from tapefit.core.ops import shape as _shape
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.layers.core import _KernelLayer, _positive_int
from tapefit.layers.module import Layer, known_size, rank_of


def _pair(value: Any, what: str, layer: str) -> tuple[int, int]:
    """An int or a pair of ints, as a pair of positive ints."""
    items = (
        [value, value]
        if isinstance(value, (int, np.integer))
        else list(value)
        if isinstance(value, (list, tuple))
        else None
    )
    if (
        items is None
        or len(items) != 2
        or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > 0 for n in items)
    ):
        raise ValueError(f"{layer}: {what} must be a positive int or a pair of them, got {shown(value)}")
    return int(items[0]), int(items[1])


def _padding(value: Any, layer: str) -> str:
    if not isinstance(value, str) or value.lower() not in ("valid", "same"):
        raise ValueError(f"{layer}: padding must be 'valid' or 'same', got {shown(value)}")
    return value.lower()


def _check_images(x: Tensor, layer: str) -> None:
    if x.ndim != 4:
        raise ValueError(
            f"{layer} needs images of shape (batch, height, width, channels), got shape {x.shape}"
        )


def _window_output(
    layer: Layer, size: int | None, span: int, stride: int, padding: str, what: str
) -> int | None:
    """The output length of a window of ``span`` moved by ``stride`` along an axis of ``size``
    (``None``: unknown), as the convolution and pooling ops give it.

    Raises:
        ValueError: with ``"valid"`` padding, a known size shorter than the window.
    """
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    if size < span:
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}': {what} of length {size} are shorter than the "
            f"window {span} with padding='valid'"
        )
    return (size - span) // stride + 1


class Conv2D(_KernelLayer):
    """2-D convolution over NHWC images: ``activation(conv2d(inputs, kernel) + bias)``.

    Builds on its first call: ``kernel`` has shape ``(kh, kw, in_channels, filters)``,
    ``bias`` ``(filters,)``.

    Args:
        filters: the number of output channels.
        kernel_size: an int or a pair ``(kh, kw)``.
        strides: an int or a pair.
        padding: ``"valid"`` (no padding) or ``"same"`` (output size ``ceil(in / stride)``).
        activation: ``None``, a name or a callable.
        use_bias: whether to add ``bias``.
        kernel_initializer: initializer name or callable.
        bias_initializer: initializer name or callable.
        kernel_regularizer: ``None``, a name or a callable; its penalty goes to ``losses``.
        bias_regularizer: as ``kernel_regularizer``, for the bias.
        name: the layer's name.
        dtype: the dtype of the weights and computations (default float32).
        trainable: whether the weights are trainable.
        dilation_rate: an int or a pair: the kernel's taps are this far apart (atrous
            convolution); with ``strides`` of 1 only, as Keras.
        groups: split the input channels and the filters into this many groups, each group's
            filters seeing only its channels; ``kernel`` is then ``(kh, kw, in_channels //
            groups, filters)``.
        activity_regularizer: as ``kernel_regularizer``, for the output: each call adds its
            penalty divided by the batch size to ``losses`` (Keras 3's rule).
        kernel_constraint: ``None``, a constraint name or a callable; optimizers project the
            kernel with it after each update.
        bias_constraint: as ``kernel_constraint``, for the bias.
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int | tuple[int, int],
        strides: int | tuple[int, int] = 1,
        padding: str = "valid",
        activation: str | Callable[..., Any] | None = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
        dilation_rate: int | tuple[int, int] = 1,
        groups: int = 1,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        self.filters = _positive_int(filters, "filters", "Conv2D")
        self.kernel_size = _pair(kernel_size, "kernel_size", "Conv2D")
        self.strides = _pair(strides, "strides", "Conv2D")
        self.padding = _padding(padding, "Conv2D")
        self.dilation_rate = _pair(dilation_rate, "dilation_rate", "Conv2D")
        self.groups = _positive_int(groups, "groups", "Conv2D")
        if self.dilation_rate != (1, 1) and self.strides != (1, 1):
            raise ValueError(
                f"Conv2D: dilation_rate {self.dilation_rate} needs strides of 1 (as Keras), got {self.strides}"
            )
        if self.filters % self.groups:
            raise ValueError(f"Conv2D: filters ({self.filters}) must be a multiple of groups ({self.groups})")
        self._init_kernel(
            activation,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
            kernel_constraint,
            bias_constraint,
            activity_regularizer,
        )

    def build(self, input_shape: Any) -> None:
        """Creates ``kernel`` (kh, kw, in_channels, filters) and ``bias`` (filters,)."""
        if not isinstance(input_shape, tuple) or len(input_shape) != 4:
            raise ValueError(
                f"Conv2D '{self.name}' needs images of shape (batch, height, width, channels), got shape {input_shape}"
            )
        channels = known_size(self, input_shape, -1, "the channels")
        if channels % self.groups:
            raise ValueError(
                f"Conv2D '{self.name}': the {channels} input channels are not a multiple of groups "
                f"({self.groups})"
            )
        self._build_kernel((*self.kernel_size, channels // self.groups, self.filters), self.filters)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, rows, cols, filters)``, the rows and columns as the convolution gives them."""
        shape = rank_of(self, input_shape, 4, "images (batch, height, width, channels)")
        if self.kernel is not None and shape[-1] not in (None, self.kernel.shape[2] * self.groups):
            raise ValueError(
                f"Conv2D '{self.name}' was built for {self.kernel.shape[2] * self.groups} input channels, "
                f"got shape {input_shape}"
            )
        spans = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, self.dilation_rate)]
        rows, cols = (
            _window_output(self, shape[1 + i], spans[i], self.strides[i], self.padding, "images")
            for i in range(2)
        )
        return (shape[0], rows, cols, self.filters)

    def call(self, inputs: Any) -> Tensor:
        """Applies the convolution."""
        x = self._cast_input(inputs)
        _check_images(x, f"Conv2D '{self.name}'")
        kernel = self._built_kernel()
        channels = kernel.shape[2] * self.groups
        if x.shape[-1] != channels:
            raise ValueError(
                f"Conv2D '{self.name}' was built for {channels} input channels, got shape {x.shape}"
            )
        span = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, self.dilation_rate)]
        if self.padding == "valid" and (x.shape[1] < span[0] or x.shape[2] < span[1]):
            raise ValueError(
                f"Conv2D '{self.name}': images of shape {x.shape} are smaller than the kernel "
                f"{tuple(span)} with padding='valid'"
            )
        y = _grouped_conv2d(x, kernel, self.groups, self.strides, self.padding, self.dilation_rate)
        return self._bias_and_activation(y)


def _grouped_conv2d(
    x: Tensor, kernel: Any, groups: int, strides: Any, padding: str, dilations: Any
) -> Tensor:
    """``conv2d``; with ``groups`` > 1 each group of filters sees its own slice of the channels."""
    strides, padding, dilations = list(strides), padding.upper(), list(dilations)
    if groups == 1:
        return _nn.conv2d(x, kernel, strides=strides, padding=padding, dilations=dilations)
    pairs = zip(_shape.split(x, groups, axis=-1), _shape.split(kernel, groups, axis=-1))
    return _shape.concat(
        [_nn.conv2d(xg, kg, strides=strides, padding=padding, dilations=dilations) for xg, kg in pairs],
        axis=-1,
    )


# The pooling ops by kind; the 1-D layers run them over a height of 1.
_POOL_OPS: dict[str, Callable[..., Tensor]] = {"max": _nn.max_pool2d, "average": _nn.avg_pool2d}


class _Pool2D(Layer):
    _kind = ""

    def __init__(
        self,
        pool_size: int | tuple[int, int] = 2,
        strides: int | tuple[int, int] | None = None,
        padding: str = "valid",
        *,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        kind = type(self).__name__
        self.pool_size = _pair(pool_size, "pool_size", kind)
        self.strides = self.pool_size if strides is None else _pair(strides, "strides", kind)
        self.padding = _padding(padding, kind)

    def _pool(self, x: Tensor) -> Tensor:
        return _POOL_OPS[self._kind](x, list(self.pool_size), list(self.strides), self.padding.upper())

    def call(self, inputs: Any) -> Tensor:
        """Pools the input."""
        x = self._cast_input(inputs)
        _check_images(x, f"{type(self).__name__} '{self.name}'")
        if self.padding == "valid" and (x.shape[1] < self.pool_size[0] or x.shape[2] < self.pool_size[1]):
            raise ValueError(
                f"{type(self).__name__} '{self.name}': images of shape {x.shape} are smaller than the pool "
                f"{self.pool_size} with padding='valid'"
            )
        return self._pool(x)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, rows, cols, channels)``, the rows and columns as the pooling gives them."""
        shape = rank_of(self, input_shape, 4, "images (batch, height, width, channels)")
        rows, cols = (
            _window_output(self, shape[1 + i], self.pool_size[i], self.strides[i], self.padding, "images")
            for i in range(2)
        )
        return (shape[0], rows, cols, shape[3])


class MaxPooling2D(_Pool2D):
    """The maximum over ``pool_size`` windows of NHWC images.

    Args:
        pool_size: an int or a pair (default 2).
        strides: an int or a pair (default ``pool_size``).
        padding: ``"valid"`` or ``"same"``.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    _kind = "max"


class AveragePooling2D(_Pool2D):
    """The mean over ``pool_size`` windows of NHWC images.

    With ``padding="same"`` the windows at the border average only the real
    (unpadded) values, as in Keras.

    Args:
        pool_size: an int or a pair (default 2).
        strides: an int or a pair (default ``pool_size``).
        padding: ``"valid"`` or ``"same"``.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    _kind = "average"


# Keras has both spellings; the classes carry Keras's class names, so default layer names are
# Keras's (``max_pooling2d``).
MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D
Convolution2D = Conv2D

__all__ = [
    "AveragePooling1D",
    "AveragePooling2D",
    "AvgPool1D",
    "AvgPool2D",
    "Conv1D",
    "Conv2D",
    "Convolution2D",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "MaxPool1D",
    "MaxPool2D",
    "MaxPooling1D",
    "MaxPooling2D",
]


class Conv1D(_KernelLayer):
    """Keras's ``Conv1D`` over sequences ``(batch, steps, channels)``.

    ``kernel`` has shape ``(kernel_size, in_channels // groups, filters)``. ``padding``:
    ``"valid"``, ``"same"``, or ``"causal"`` (``(kernel_size - 1) * dilation_rate`` zeros
    before the sequence only, so output ``t`` sees inputs up to ``t``). ``dilation_rate`` and
    ``groups`` (an int each) as ``Conv2D``. Runs as ``conv2d`` over a height of 1. Other
    arguments as ``Conv2D``.
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int | tuple[int],
        strides: int | tuple[int] = 1,
        padding: str = "valid",
        activation: str | Callable[..., Any] | None = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
        dilation_rate: int | tuple[int] = 1,
        groups: int = 1,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        self.filters = _positive_int(filters, "filters", "Conv1D")
        self.kernel_size = _single(kernel_size, "kernel_size")
        self.strides = _single(strides, "strides")
        if not isinstance(padding, str) or padding.lower() not in ("valid", "same", "causal"):
            raise ValueError(f"Conv1D: padding must be 'valid', 'same' or 'causal', got {shown(padding)}")
        self.padding = padding.lower()
        self.dilation_rate = _single(dilation_rate, "dilation_rate")
        self.groups = _positive_int(groups, "groups", "Conv1D")
        if self.dilation_rate != 1 and self.strides != 1:
            raise ValueError(
                f"Conv1D: dilation_rate {self.dilation_rate} needs strides of 1 (as Keras), got {self.strides}"
            )
        if self.filters % self.groups:
            raise ValueError(f"Conv1D: filters ({self.filters}) must be a multiple of groups ({self.groups})")
        self._init_kernel(
            activation,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
            kernel_constraint,
            bias_constraint,
            activity_regularizer,
        )

    def build(self, input_shape: Any) -> None:
        """Creates ``kernel`` (kernel_size, in_channels, filters) and ``bias`` (filters,)."""
        if not isinstance(input_shape, tuple) or len(input_shape) != 3:
            raise ValueError(
                f"Conv1D '{self.name}' needs sequences of shape (batch, steps, channels), got shape {input_shape}"
            )
        channels = known_size(self, input_shape, -1, "the channels")
        if channels % self.groups:
            raise ValueError(
                f"Conv1D '{self.name}': the {channels} input channels are not a multiple of groups "
                f"({self.groups})"
            )
        self._build_kernel((self.kernel_size, channels // self.groups, self.filters), self.filters)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, steps, filters)``, the steps as the convolution gives them."""
        shape = rank_of(self, input_shape, 3, "sequences (batch, steps, channels)")
        if self.kernel is not None and shape[-1] not in (None, self.kernel.shape[1] * self.groups):
            raise ValueError(
                f"Conv1D '{self.name}' was built for sequences (batch, steps, "
                f"{self.kernel.shape[1] * self.groups}), got shape {input_shape}"
            )
        span = (self.kernel_size - 1) * self.dilation_rate + 1
        steps = shape[1]
        padding = self.padding
        if padding == "causal":
            steps, padding = (None if steps is None else steps + span - 1), "valid"
        return (shape[0], _window_output(self, steps, span, self.strides, padding, "sequences"), self.filters)

    def call(self, inputs: Any) -> Tensor:
        """Applies the convolution."""
        x = self._cast_input(inputs)
        kernel = self._built_kernel()
        channels = kernel.shape[1] * self.groups
        if x.ndim != 3 or x.shape[-1] != channels:
            raise ValueError(
                f"Conv1D '{self.name}' was built for sequences (batch, steps, {channels}), got shape {x.shape}"
            )
        span = (self.kernel_size - 1) * self.dilation_rate + 1
        padding = self.padding
        if padding == "causal":
            x = _shape.pad(x, [[0, 0], [span - 1, 0], [0, 0]])
            padding = "valid"
        if padding == "valid" and x.shape[1] < span:
            raise ValueError(
                f"Conv1D '{self.name}': sequences of shape {x.shape} are shorter than the kernel "
                f"{span} with padding='valid'"
            )
        kernel_2d = _shape.expand_dims(kernel, 0)  # (1, k, in, out): a 2-D kernel of height 1
        y = _grouped_conv2d(
            _shape.expand_dims(x, 1),
            kernel_2d,
            self.groups,
            (1, self.strides),
            padding,
            (1, self.dilation_rate),
        )
        return self._bias_and_activation(_shape.squeeze(y, axis=1))


def _single(value: Any, what: str, layer: str = "Conv1D") -> int:
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    return _positive_int(value, what, layer)


class _GlobalPool(Layer):
    _rank = 0

    # Keyword-only: Keras's first argument is data_format, which a position here would take
    # for keepdims without a word.
    def __init__(self, *, keepdims: bool = False, name: str | None = None, dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.keepdims = bool(keepdims)

    def call(self, inputs: Any) -> Tensor:
        """Pools over every step (1D) or every pixel (2D)."""
        return self._reduce(self._checked(inputs))

    def _checked(self, inputs: Any) -> Tensor:
        x = self._cast_input(inputs)
        if x.ndim != self._rank:
            what = "(batch, steps, channels)" if self._rank == 3 else "(batch, height, width, channels)"
            raise ValueError(
                f"{type(self).__name__} '{self.name}' needs inputs of shape {what}, got shape {x.shape}"
            )
        return x

    def _axes(self) -> list[int]:
        return list(range(1, self._rank - 1))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, channels)``, or with ``keepdims`` the pooled axes kept as 1."""
        what = (
            "inputs (batch, steps, channels)"
            if self._rank == 3
            else "inputs (batch, height, width, channels)"
        )
        shape = rank_of(self, input_shape, self._rank, what)
        if self.keepdims:
            return (shape[0], *(1 for _ in self._axes()), shape[-1])
        return (shape[0], shape[-1])

    def _reduce(self, x: Tensor) -> Tensor:
        raise NotImplementedError


class _GlobalAverage(_GlobalPool):
    def _reduce(self, x: Tensor) -> Tensor:
        return _reduce.reduce_mean(x, axis=self._axes(), keepdims=self.keepdims)


class _GlobalMax(_GlobalPool):
    def _reduce(self, x: Tensor) -> Tensor:
        return _reduce.reduce_max(x, axis=self._axes(), keepdims=self.keepdims)


class GlobalAveragePooling1D(_GlobalAverage):
    """The mean over the steps of ``(batch, steps, channels)``; ``keepdims`` keeps that axis.

    Called with ``mask`` ``(batch, steps)``, true at the real steps (``Sequential`` passes
    ``Embedding(mask_zero=True)``'s on), it averages the real steps only, as Keras (a
    sequence with none gives NaN, as Keras); the mask ends here.
    """

    _rank = 3
    supports_masking = True

    def call(self, inputs: Any, mask: Any = None) -> Tensor:
        """Averages over the (real) steps."""
        x = self._checked(inputs)
        if mask is None:
            return self._reduce(x)
        steps = as_tensor(mask)
        if steps.shape != x.shape[:2]:
            raise ValueError(
                f"GlobalAveragePooling1D '{self.name}': mask must have shape (batch, steps) = "
                f"{x.shape[:2]}, got {steps.shape}"
            )
        # sum(where(mask, x, 0)) / sum(mask), as Keras: a NaN at a padded step stays out
        real = _shape.expand_dims(steps if steps.dtype == bool else _math.cast(steps, bool), -1)
        total = _reduce.reduce_sum(_math.where(real, x, 0.0), axis=1, keepdims=self.keepdims)
        return total / _reduce.reduce_sum(_math.cast(real, x.dtype), axis=1, keepdims=self.keepdims)

    def compute_mask(self, inputs: Any, mask: Any = None) -> None:
        """``None``: the steps are pooled away."""
        return None


class GlobalMaxPooling1D(_GlobalMax):
    """The maximum over the steps of ``(batch, steps, channels)``; ``keepdims`` keeps that axis.

    Takes no mask, as Keras 3's: padded steps count too (Keras warns that it drops the mask).
    """

    _rank = 3


class GlobalAveragePooling2D(_GlobalAverage):
    """The mean over the pixels of NHWC images; ``keepdims`` keeps those axes."""

    _rank = 4


class GlobalMaxPooling2D(_GlobalMax):
    """The maximum over the pixels of NHWC images; ``keepdims`` keeps those axes."""

    _rank = 4


class _Pool1D(Layer):
    _kind = ""

    def __init__(
        self,
        pool_size: int | tuple[int] = 2,
        strides: int | tuple[int] | None = None,
        padding: str = "valid",
        *,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        kind = type(self).__name__
        self.pool_size = _single(pool_size, "pool_size", kind)
        self.strides = self.pool_size if strides is None else _single(strides, "strides", kind)
        self.padding = _padding(padding, kind)

    def call(self, inputs: Any) -> Tensor:
        """Pools the input over its steps."""
        x = self._cast_input(inputs)
        kind = type(self).__name__
        if x.ndim != 3:
            raise ValueError(
                f"{kind} '{self.name}' needs sequences of shape (batch, steps, channels), got shape {x.shape}"
            )
        if self.padding == "valid" and x.shape[1] < self.pool_size:
            raise ValueError(
                f"{kind} '{self.name}': sequences of shape {x.shape} are shorter than the pool "
                f"{self.pool_size} with padding='valid'"
            )
        pool = _POOL_OPS[self._kind]
        y = pool(_shape.expand_dims(x, 1), [1, self.pool_size], [1, self.strides], self.padding.upper())
        return _shape.squeeze(y, axis=1)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, steps, channels)``, the steps as the pooling gives them."""
        shape = rank_of(self, input_shape, 3, "sequences (batch, steps, channels)")
        steps = _window_output(self, shape[1], self.pool_size, self.strides, self.padding, "sequences")
        return (shape[0], steps, shape[2])


class MaxPooling1D(_Pool1D):
    """The maximum over ``pool_size`` windows of the steps of ``(batch, steps, channels)``.

    Args:
        pool_size: an int (default 2).
        strides: an int (default ``pool_size``).
        padding: ``"valid"`` or ``"same"``.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    _kind = "max"


class AveragePooling1D(_Pool1D):
    """The mean over ``pool_size`` windows of the steps of ``(batch, steps, channels)``.

    With ``padding="same"`` the windows at the ends average only the real steps, as Keras.

    Args:
        pool_size: an int (default 2).
        strides: an int (default ``pool_size``).
        padding: ``"valid"`` or ``"same"``.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    _kind = "average"


# Keras's other spellings, as for the 2-D ones
MaxPool1D = MaxPooling1D
AvgPool1D = AveragePooling1D
