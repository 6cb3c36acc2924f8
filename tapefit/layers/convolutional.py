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
from tapefit.core.tensor import Tensor, Variable, as_tensor
from tapefit.layers import activations, constraints, initializers
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

__all__ = ["AvgPool2D", "AveragePooling2D", "Conv2D", "Convolution2D", "MaxPool2D", "MaxPooling2D"]


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


def _ints(value: Any, rank: int, what: str, layer: str, low: int = 1) -> tuple[int, ...]:
    """An int or ``rank`` ints, each at least ``low``, as a tuple of ``rank`` ints."""
    items = [value] * rank if isinstance(value, (int, np.integer)) else value
    if (
        not isinstance(items, (list, tuple))
        or len(items) != rank
        or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= low for n in items)
    ):
        kind = "a positive int" if low == 1 else f"an int >= {low}"
        raise ValueError(f"{layer}: {what} must be {kind} or {rank} of them, got {shown(value)}")
    return tuple(int(n) for n in items)


def _transpose_length(
    size: int | None, kernel: int, stride: int, padding: str, output_padding: int | None, dilation: int
) -> int | None:
    """The output length of a transposed convolution along one axis, as Keras computes it."""
    if size is None:
        return None
    span = (kernel - 1) * dilation + 1
    if padding == "valid":
        extra = max(span, stride) - span if output_padding is None else output_padding
        return (size - 1) * stride + span + extra
    if output_padding is None:
        return size * stride
    return (size - 1) * stride + span % 2 + output_padding


class _ConvTranspose(_KernelLayer):
    """What Conv1DTranspose and Conv2DTranspose share; both run ``conv2d_transpose``, the 1-D
    one over a height of 1."""

    _rank = 2

    def __init__(
        self,
        filters: int,
        kernel_size: Any,
        strides: Any,
        padding: str,
        output_padding: Any,
        dilation_rate: Any,
        activation: Any,
        use_bias: bool,
        kernel_initializer: Any,
        bias_initializer: Any,
        kernel_regularizer: Any,
        bias_regularizer: Any,
        activity_regularizer: Any,
        kernel_constraint: Any,
        bias_constraint: Any,
        name: str | None,
        dtype: Any,
        trainable: bool,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        kind, rank = type(self).__name__, self._rank
        self.filters = _positive_int(filters, "filters", kind)
        kernel = _ints(kernel_size, rank, "kernel_size", kind)
        stride = _ints(strides, rank, "strides", kind)
        dilation = _ints(dilation_rate, rank, "dilation_rate", kind)
        self.padding = _padding(padding, kind)
        extra = None if output_padding is None else _ints(output_padding, rank, "output_padding", kind, low=0)
        if extra is not None and any(p >= s for p, s in zip(extra, stride)):
            raise ValueError(
                f"{kind}: each output_padding must be smaller than its stride, got output_padding "
                f"{shown(output_padding)} and strides {shown(strides)}"
            )
        if max(stride) > 1 and max(dilation) > 1:
            raise ValueError(
                f"{kind}: dilation_rate {shown(dilation_rate)} needs strides of 1 (as Keras), got {shown(strides)}"
            )
        # Keras's attributes: tuples for Conv2DTranspose, ints for Conv1DTranspose (as Conv1D)
        plain = (lambda t: t) if rank == 2 else (lambda t: t[0])
        self.kernel_size, self.strides, self.dilation_rate = plain(kernel), plain(stride), plain(dilation)
        self.output_padding = None if extra is None else plain(extra)
        # the 2-D window the op runs with (height 1 for the 1-D layer)
        self._window2d = (
            kernel if rank == 2 else (1, *kernel),
            stride if rank == 2 else (1, *stride),
            dilation if rank == 2 else (1, *dilation),
            None if extra is None else (extra if rank == 2 else (0, *extra)),
        )
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

    def _what(self) -> str:
        return (
            "images (batch, height, width, channels)"
            if self._rank == 2
            else "sequences (batch, steps, channels)"
        )

    def build(self, input_shape: Any) -> None:
        """Creates ``kernel`` (*kernel_size, filters, in_channels) and ``bias`` (filters,)."""
        if not isinstance(input_shape, tuple) or len(input_shape) != self._rank + 2:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' needs {self._what()}, got shape {input_shape}"
            )
        channels = known_size(self, input_shape, -1, "the channels")
        kernel = self._window2d[0][2 - self._rank :]
        self._build_kernel((*kernel, self.filters, channels), self.filters)

    def _sizes(self, sizes: tuple[int | None, ...]) -> tuple[int | None, ...]:
        """The output sizes of the (2-D) input ``sizes``.

        Raises:
            ValueError: an ``output_padding`` whose output the forward convolution would not
                take back to the input's size (TensorFlow refuses it too).
        """
        kernel, stride, dilation, extra = self._window2d
        out = []
        for n, k, s, d, e in zip(sizes, kernel, stride, dilation, extra or (0, 0)):
            length = _transpose_length(n, k, s, self.padding, None if extra is None else e, d)
            back = _window_output(self, length, (k - 1) * d + 1, s, self.padding, "outputs")
            if n is not None and back != n:
                raise ValueError(
                    f"{type(self).__name__} '{self.name}': output_padding {shown(self.output_padding)} gives "
                    f"outputs of length {length} from inputs of length {n}, which a convolution with these "
                    "kernel_size, strides and padding does not take back to the input's length; choose "
                    "another output_padding"
                )
            out.append(length)
        return tuple(out)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, *sizes, filters)``, each size as Keras's transposed convolution gives it."""
        shape = rank_of(self, input_shape, self._rank + 2, self._what())
        if self.kernel is not None and shape[-1] not in (None, self.kernel.shape[-1]):
            raise ValueError(
                f"{type(self).__name__} '{self.name}' was built for {self.kernel.shape[-1]} input channels, "
                f"got shape {input_shape}"
            )
        sizes = self._sizes((1, *shape[1:-1]) if self._rank == 1 else shape[1:-1])
        return (shape[0], *sizes[2 - self._rank :], self.filters)

    def call(self, inputs: Any) -> Tensor:
        """Applies the transposed convolution."""
        x = self._cast_input(inputs)
        kernel: Tensor = self._built_kernel()
        if x.ndim != self._rank + 2 or x.shape[-1] != kernel.shape[-1]:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' was built for inputs with {kernel.shape[-1]} channels "
                f"({self._what()}), got shape {x.shape}"
            )
        if self._rank == 1:
            x, kernel = _shape.expand_dims(x, 1), _shape.expand_dims(kernel, 0)
        rows, cols = self._sizes(x.shape[1:3])
        _, stride, dilation, _ = self._window2d
        y = _nn.conv2d_transpose(
            x,
            kernel,
            (x.shape[0], rows, cols, self.filters),
            list(stride),
            self.padding.upper(),
            dilations=list(dilation),
        )
        if self._rank == 1:
            y = _shape.squeeze(y, axis=1)
        return self._bias_and_activation(y)


class Conv2DTranspose(_ConvTranspose):
    """Keras's ``Conv2DTranspose`` over NHWC images: the transpose of ``Conv2D``
    (``conv2d_transpose``), then ``bias`` and ``activation``.

    ``kernel`` has shape ``(kh, kw, filters, in_channels)``, ``bias`` ``(filters,)``. Each
    output size is Keras's: with ``padding="same"`` ``in * stride``, with ``"valid"``
    ``(in - 1) * stride + kernel + max(stride - kernel, 0)``; with ``output_padding``
    ``(in - 1) * stride + kernel - 2 * (kernel // 2 if "same" else 0) + output_padding``.

    Args:
        filters: the number of output channels.
        kernel_size: an int or a pair ``(kh, kw)``.
        strides: an int or a pair.
        padding: ``"valid"`` or ``"same"``.
        output_padding: ``None``, an int or a pair, each smaller than its stride: extra rows
            and columns at the bottom and right of the output.
        dilation_rate: an int or a pair; with ``strides`` of 1 only, as Keras.
        activation: ``None``, a name or a callable.
        use_bias: whether to add ``bias``.
        kernel_initializer: initializer name or callable.
        bias_initializer: initializer name or callable.
        kernel_regularizer: ``None``, a name or a callable; its penalty goes to ``losses``.
        bias_regularizer: as ``kernel_regularizer``, for the bias.
        activity_regularizer: as ``kernel_regularizer``, for the output (divided by the batch
            size, Keras 3's rule).
        kernel_constraint: ``None``, a constraint name or a callable, applied after each update.
        bias_constraint: as ``kernel_constraint``, for the bias.
        name: the layer's name.
        dtype: the dtype of the weights and computations (default float32).
        trainable: whether the weights are trainable.
    """

    _rank = 2

    def __init__(
        self,
        filters: int,
        kernel_size: int | tuple[int, int],
        strides: int | tuple[int, int] = 1,
        padding: str = "valid",
        output_padding: int | tuple[int, int] | None = None,
        *,
        dilation_rate: int | tuple[int, int] = 1,
        activation: str | Callable[..., Any] | None = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(
            filters,
            kernel_size,
            strides,
            padding,
            output_padding,
            dilation_rate,
            activation,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
            activity_regularizer,
            kernel_constraint,
            bias_constraint,
            name,
            dtype,
            trainable,
        )


class Conv1DTranspose(_ConvTranspose):
    """Keras's ``Conv1DTranspose`` over sequences ``(batch, steps, channels)``: the transpose
    of ``Conv1D``, then ``bias`` and ``activation``.

    ``kernel`` has shape ``(kernel_size, filters, in_channels)``. The arguments (an int each
    where ``Conv2DTranspose`` takes pairs) and the output length are ``Conv2DTranspose``'s.
    """

    _rank = 1

    def __init__(
        self,
        filters: int,
        kernel_size: int | tuple[int],
        strides: int | tuple[int] = 1,
        padding: str = "valid",
        output_padding: int | tuple[int] | None = None,
        *,
        dilation_rate: int | tuple[int] = 1,
        activation: str | Callable[..., Any] | None = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(
            filters,
            kernel_size,
            strides,
            padding,
            output_padding,
            dilation_rate,
            activation,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
            activity_regularizer,
            kernel_constraint,
            bias_constraint,
            name,
            dtype,
            trainable,
        )


def _depthwise_args(
    kernel_size: Any, strides: Any, padding: Any, depth_multiplier: Any, dilation_rate: Any, kind: str
) -> tuple[tuple[int, int], tuple[int, int], str, int, tuple[int, int]]:
    kernel = _pair(kernel_size, "kernel_size", kind)
    stride = _pair(strides, "strides", kind)
    dilation = _pair(dilation_rate, "dilation_rate", kind)
    if dilation != (1, 1) and stride != (1, 1):
        # TensorFlow's depthwise convolution, which Keras runs, refuses both at once
        raise ValueError(f"{kind}: dilation_rate {dilation} needs strides of 1 (as Keras), got {stride}")
    return (
        kernel,
        stride,
        _padding(padding, kind),
        _positive_int(depth_multiplier, "depth_multiplier", kind),
        dilation,
    )


class _Depthwise(Layer):
    """What DepthwiseConv2D and SeparableConv2D share: the depthwise step over NHWC images."""

    kernel_size: tuple[int, int]
    strides: tuple[int, int]
    padding: str
    dilation_rate: tuple[int, int]

    def _check_input_shape(self, input_shape: Any) -> int:
        """The channels of ``input_shape`` (images with a known channel count)."""
        if not isinstance(input_shape, tuple) or len(input_shape) != 4:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' needs images of shape (batch, height, width, channels), "
                f"got shape {input_shape}"
            )
        return known_size(self, input_shape, -1, "the channels")

    def _depthwise_shape(self, input_shape: Any, channels: int | None) -> tuple[int | None, ...]:
        """``(batch, rows, cols, in_channels)`` after the depthwise step; ``channels``: what the
        layer was built for (``None`` before build)."""
        shape = rank_of(self, input_shape, 4, "images (batch, height, width, channels)")
        if channels is not None and shape[-1] not in (None, channels):
            raise ValueError(
                f"{type(self).__name__} '{self.name}' was built for {channels} input channels, got shape {input_shape}"
            )
        spans = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, self.dilation_rate)]
        rows, cols = (
            _window_output(self, shape[1 + i], spans[i], self.strides[i], self.padding, "images")
            for i in range(2)
        )
        return (shape[0], rows, cols, shape[-1] if channels is None else channels)

    def _depthwise(self, x: Tensor, kernel: Any) -> Tensor:
        _check_images(x, f"{type(self).__name__} '{self.name}'")
        if x.shape[-1] != kernel.shape[2]:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' was built for {kernel.shape[2]} input channels, "
                f"got shape {x.shape}"
            )
        span = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, self.dilation_rate)]
        if self.padding == "valid" and (x.shape[1] < span[0] or x.shape[2] < span[1]):
            raise ValueError(
                f"{type(self).__name__} '{self.name}': images of shape {x.shape} are smaller than the kernel "
                f"{tuple(span)} with padding='valid'"
            )
        return _nn.depthwise_conv2d(
            x, kernel, list(self.strides), self.padding.upper(), dilations=list(self.dilation_rate)
        )


class DepthwiseConv2D(_KernelLayer, _Depthwise):
    """Keras's ``DepthwiseConv2D``: each channel of NHWC images convolved with its own
    ``depth_multiplier`` filters, then ``bias`` and ``activation``.

    ``kernel`` has shape ``(kh, kw, in_channels, depth_multiplier)``, ``bias``
    ``(in_channels * depth_multiplier,)``; output channel ``c * depth_multiplier + m`` is
    channel ``c`` under filter ``m`` (Keras's order).

    Args:
        kernel_size: an int or a pair ``(kh, kw)``.
        strides: an int or a pair.
        padding: ``"valid"`` or ``"same"``.
        depth_multiplier: the filters per input channel.
        dilation_rate: an int or a pair; with ``strides`` of 1 only, as Keras.
        activation: ``None``, a name or a callable.
        use_bias: whether to add ``bias``.
        depthwise_initializer: initializer of ``kernel``.
        bias_initializer: initializer of ``bias``.
        depthwise_regularizer: ``None``, a name or a callable for ``kernel``; its penalty goes
            to ``losses``.
        bias_regularizer: as ``depthwise_regularizer``, for the bias.
        activity_regularizer: as ``depthwise_regularizer``, for the output (divided by the
            batch size, Keras 3's rule).
        depthwise_constraint: ``None``, a constraint name or a callable for ``kernel``,
            applied after each update.
        bias_constraint: as ``depthwise_constraint``, for the bias.
        name: the layer's name.
        dtype: the dtype of the weights and computations (default float32).
        trainable: whether the weights are trainable.
    """

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        strides: int | tuple[int, int] = 1,
        padding: str = "valid",
        depth_multiplier: int = 1,
        *,
        dilation_rate: int | tuple[int, int] = 1,
        activation: str | Callable[..., Any] | None = None,
        use_bias: bool = True,
        depthwise_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        depthwise_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        depthwise_constraint: Any = None,
        bias_constraint: Any = None,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        args = _depthwise_args(
            kernel_size, strides, padding, depth_multiplier, dilation_rate, "DepthwiseConv2D"
        )
        self.kernel_size, self.strides, self.padding, self.depth_multiplier, self.dilation_rate = args
        self._init_kernel(
            activation,
            use_bias,
            depthwise_initializer,
            bias_initializer,
            depthwise_regularizer,
            bias_regularizer,
            depthwise_constraint,
            bias_constraint,
            activity_regularizer,
        )

    def build(self, input_shape: Any) -> None:
        """Creates ``kernel`` (kh, kw, in_channels, depth_multiplier) and ``bias``."""
        channels = self._check_input_shape(input_shape)
        self._build_kernel(
            (*self.kernel_size, channels, self.depth_multiplier), channels * self.depth_multiplier
        )

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, rows, cols, in_channels * depth_multiplier)``."""
        batch, rows, cols, channels = self._depthwise_shape(
            input_shape, None if self.kernel is None else self.kernel.shape[2]
        )
        return (batch, rows, cols, None if channels is None else channels * self.depth_multiplier)

    def call(self, inputs: Any) -> Tensor:
        """Applies the depthwise convolution."""
        x = self._cast_input(inputs)
        return self._bias_and_activation(self._depthwise(x, self._built_kernel()))


class SeparableConv2D(_Depthwise):
    """Keras's ``SeparableConv2D``: a depthwise convolution (as ``DepthwiseConv2D``), then a
    1x1 convolution to ``filters`` channels, then ``bias`` and ``activation``.

    Weights, in Keras's order: ``depthwise_kernel`` ``(kh, kw, in_channels,
    depth_multiplier)``, ``pointwise_kernel`` ``(1, 1, in_channels * depth_multiplier,
    filters)``, ``bias`` ``(filters,)``. ``strides`` and ``dilation_rate`` apply to the
    depthwise step.

    Args:
        filters: the number of output channels.
        kernel_size: an int or a pair ``(kh, kw)``.
        strides: an int or a pair.
        padding: ``"valid"`` or ``"same"``.
        dilation_rate: an int or a pair; with ``strides`` of 1 only, as Keras.
        depth_multiplier: the depthwise filters per input channel.
        activation: ``None``, a name or a callable.
        use_bias: whether to add ``bias``.
        depthwise_initializer: initializer of ``depthwise_kernel``.
        pointwise_initializer: initializer of ``pointwise_kernel``.
        bias_initializer: initializer of ``bias``.
        depthwise_regularizer: ``None``, a name or a callable for ``depthwise_kernel``; its
            penalty goes to ``losses``.
        pointwise_regularizer: as ``depthwise_regularizer``, for ``pointwise_kernel``.
        bias_regularizer: as ``depthwise_regularizer``, for the bias.
        activity_regularizer: as ``depthwise_regularizer``, for the output (divided by the
            batch size, Keras 3's rule).
        depthwise_constraint: ``None``, a constraint name or a callable for
            ``depthwise_kernel``, applied after each update.
        pointwise_constraint: as ``depthwise_constraint``, for ``pointwise_kernel``.
        bias_constraint: as ``depthwise_constraint``, for the bias.
        name: the layer's name.
        dtype: the dtype of the weights and computations (default float32).
        trainable: whether the weights are trainable.
    """

    depthwise_kernel: Variable | None  # None until build
    pointwise_kernel: Variable | None
    bias: Variable | None  # None until build, and without use_bias

    def __init__(
        self,
        filters: int,
        kernel_size: int | tuple[int, int],
        strides: int | tuple[int, int] = 1,
        padding: str = "valid",
        *,
        dilation_rate: int | tuple[int, int] = 1,
        depth_multiplier: int = 1,
        activation: str | Callable[..., Any] | None = None,
        use_bias: bool = True,
        depthwise_initializer: Any = "glorot_uniform",
        pointwise_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        depthwise_regularizer: Any = None,
        pointwise_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        depthwise_constraint: Any = None,
        pointwise_constraint: Any = None,
        bias_constraint: Any = None,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        self.filters = _positive_int(filters, "filters", "SeparableConv2D")
        args = _depthwise_args(
            kernel_size, strides, padding, depth_multiplier, dilation_rate, "SeparableConv2D"
        )
        self.kernel_size, self.strides, self.padding, self.depth_multiplier, self.dilation_rate = args
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.depthwise_initializer = initializers.get(depthwise_initializer)
        self.pointwise_initializer = initializers.get(pointwise_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self._add_regularizer("depthwise_kernel", depthwise_regularizer)
        self._add_regularizer("pointwise_kernel", pointwise_regularizer)
        self._add_regularizer("bias", bias_regularizer)
        self._set_activity_regularizer(activity_regularizer)
        self.depthwise_constraint = constraints.get(depthwise_constraint)
        self.pointwise_constraint = constraints.get(pointwise_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self.depthwise_kernel = None
        self.pointwise_kernel = None
        self.bias = None

    def build(self, input_shape: Any) -> None:
        """Creates ``depthwise_kernel``, ``pointwise_kernel`` and ``bias``, in that order."""
        channels = self._check_input_shape(input_shape)
        self.depthwise_kernel = self.add_weight(
            (*self.kernel_size, channels, self.depth_multiplier),
            self.depthwise_initializer,
            name="depthwise_kernel",
            constraint=self.depthwise_constraint,
        )
        self.pointwise_kernel = self.add_weight(
            (1, 1, channels * self.depth_multiplier, self.filters),
            self.pointwise_initializer,
            name="pointwise_kernel",
            constraint=self.pointwise_constraint,
        )
        if self.use_bias:
            self.bias = self.add_weight(
                (self.filters,), self.bias_initializer, name="bias", constraint=self.bias_constraint
            )

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, rows, cols, filters)``, the rows and columns as the depthwise step gives them."""
        channels = None if self.depthwise_kernel is None else self.depthwise_kernel.shape[2]
        return (*self._depthwise_shape(input_shape, channels)[:3], self.filters)

    def call(self, inputs: Any) -> Tensor:
        """Applies the depthwise then the pointwise convolution."""
        x = self._cast_input(inputs)
        depthwise, pointwise = self.depthwise_kernel, self.pointwise_kernel
        assert depthwise is not None and pointwise is not None, f"'{self.name}' was called before build"
        y = _nn.conv2d(self._depthwise(x, depthwise), pointwise, strides=[1, 1], padding="VALID")
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)
