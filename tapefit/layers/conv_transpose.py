"""Transposed convolutions: ``Conv2DTranspose`` over NHWC images and ``Conv1DTranspose`` over
(batch, steps, channels) sequences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core.messages import shown
from tapefit.core.ops import nn as _nn
from tapefit.core.ops import shape as _shape
from tapefit.core.tensor import Tensor
from tapefit.layers.convolutional import _padding, _window_output
from tapefit.layers.core import _KernelLayer, _positive_int
from tapefit.layers.module import known_size, rank_of

__all__ = ["Conv1DTranspose", "Conv2DTranspose"]


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
