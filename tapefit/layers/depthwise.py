"""Depthwise convolutions: ``DepthwiseConv2D`` and ``SeparableConv2D`` over NHWC images."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tapefit.core.ops import nn as _nn
from tapefit.core.tensor import Tensor, Variable
from tapefit.layers import activations, constraints, initializers
from tapefit.layers.convolutional import _check_images, _padding, _pair, _window_output
from tapefit.layers.core import _KernelLayer, _positive_int
from tapefit.layers.module import Layer, known_size, rank_of

__all__ = ["DepthwiseConv2D", "SeparableConv2D"]


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
