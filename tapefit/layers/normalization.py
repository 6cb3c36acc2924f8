"""Normalization layers: LayerNormalization, BatchNormalization and GroupNormalization, with
Keras's defaults."""

from __future__ import annotations

from typing import Any

from tapefit.core.messages import shown
from tapefit.core.ops.math import sqrt, square
from tapefit.core.ops.reduce import normalize_axes, reduce_mean
from tapefit.core.ops.shape import reshape
from tapefit.core.tensor import Tensor, Variable
from tapefit.layers import constraints, initializers
from tapefit.layers.module import Layer, rank_of


def _axes(axis: Any, rank: int, layer: str) -> tuple[int, ...]:
    try:
        return normalize_axes(axis, rank)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{layer}: {error} (inputs of rank {rank})") from None


def _param_shapes(
    input_shape: tuple[int, ...], axes: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The parameters' own shape (the sizes of ``axes``) and the shape they broadcast as.

    Raises:
        ValueError: one of ``axes`` has no known size.
    """
    if any(input_shape[a] is None for a in axes):
        raise ValueError(
            f"the normalized axes {list(axes)} need known sizes, got inputs of shape {input_shape}"
        )
    own = tuple(input_shape[a] for a in axes)
    broadcast = tuple(n if i in axes else 1 for i, n in enumerate(input_shape))
    return own, broadcast


class _Normalization(Layer):
    """What both normalizations share: ``gamma`` and ``beta`` of the normalized axes' sizes,
    applied as ``y * gamma + beta`` broadcast over the other axes."""

    gamma: Variable | None
    beta: Variable | None
    _broadcast_shape: tuple[int, ...]
    scale: bool  # set by the subclasses' __init__
    center: bool

    def _init_penalties(
        self, beta_regularizer: Any, gamma_regularizer: Any, beta_constraint: Any, gamma_constraint: Any
    ) -> None:
        self._add_regularizer("beta", beta_regularizer)
        self._add_regularizer("gamma", gamma_regularizer)
        self.beta_constraint = constraints.get(beta_constraint)
        self.gamma_constraint = constraints.get(gamma_constraint)

    def _build_scale_and_shift(
        self, own: tuple[int, ...], gamma_initializer: Any, beta_initializer: Any
    ) -> None:
        if self.scale:
            self.gamma = self.add_weight(
                own, gamma_initializer, name="gamma", constraint=self.gamma_constraint
            )
        if self.center:
            self.beta = self.add_weight(own, beta_initializer, name="beta", constraint=self.beta_constraint)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``input_shape``: the values are normalized in place."""
        return rank_of(self, input_shape, range(1, 64))

    def _scale_and_shift(self, y: Tensor) -> Tensor:
        if self.gamma is not None:
            y = y * reshape(self.gamma, self._broadcast_shape)
        if self.beta is not None:
            y = y + reshape(self.beta, self._broadcast_shape)
        return y


class LayerNormalization(_Normalization):
    """Normalizes each example over ``axis`` to mean 0 and variance 1, then scales and shifts.

    ``out = gamma * (x - mean) / sqrt(variance + epsilon) + beta`` with the moments
    taken over ``axis`` of each example; ``gamma`` and ``beta`` have the sizes of ``axis``.

    Args:
        axis: the axis or axes to normalize over (default the last).
        epsilon: added to the variance (Keras default 1e-3).
        center: whether to add ``beta``.
        scale: whether to multiply by ``gamma``.
        beta_initializer: initializer of ``beta``.
        gamma_initializer: initializer of ``gamma``.
        name: the layer's name.
        dtype: the dtype of the weights and computations (default float32).
        trainable: whether ``gamma`` and ``beta`` are trainable.
        beta_regularizer: ``None``, a regularizer name or a callable for ``beta``; its penalty
            goes to ``losses``.
        gamma_regularizer: as ``beta_regularizer``, for ``gamma``.
        beta_constraint: ``None``, a constraint name or a callable for ``beta``; optimizers
            project the weight with it after each update.
        gamma_constraint: as ``beta_constraint``, for ``gamma``.
    """

    supports_masking = True  # the steps' mask passes on to the next layer

    def __init__(
        self,
        axis: int | list[int] | tuple[int, ...] = -1,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        *,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
        beta_regularizer: Any = None,
        gamma_regularizer: Any = None,
        beta_constraint: Any = None,
        gamma_constraint: Any = None,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        self._init_penalties(beta_regularizer, gamma_regularizer, beta_constraint, gamma_constraint)
        self.axis = axis
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.gamma = None
        self.beta = None
        self._broadcast_shape: tuple[int, ...] = ()

    def build(self, input_shape: Any) -> None:
        """Creates ``gamma`` and ``beta`` with the sizes of the normalized axes."""
        axes = _axes(self.axis, len(input_shape), f"LayerNormalization '{self.name}'")
        own, self._broadcast_shape = _param_shapes(tuple(input_shape), axes)
        self._axes = axes
        self._input_shape = tuple(input_shape)
        self._build_scale_and_shift(own, self.gamma_initializer, self.beta_initializer)

    def call(self, inputs: Any) -> Tensor:
        """Normalizes the input."""
        x = self._cast_input(inputs)
        if x.ndim != len(self._input_shape) or any(x.shape[a] != self._input_shape[a] for a in self._axes):
            raise ValueError(
                f"LayerNormalization '{self.name}' was built for inputs of shape {self._input_shape} "
                f"(normalizing axes {list(self._axes)}), got shape {x.shape}"
            )
        mean = reduce_mean(x, axis=self._axes, keepdims=True)
        centered = x - mean
        variance = reduce_mean(square(centered), axis=self._axes, keepdims=True)
        return self._scale_and_shift(centered / sqrt(variance + self.epsilon))


class BatchNormalization(_Normalization):
    """Normalizes with batch statistics in training and moving averages of them in inference.

    With ``training=True``: ``out = gamma * (x - mean) / sqrt(var + epsilon) + beta``
    with the (biased) moments over every axis but ``axis``, and the non-trainable
    ``moving_mean``/``moving_variance`` are updated with ``assign`` to
    ``moving * momentum + batch * (1 - momentum)``. Otherwise (``training`` false or
    not given), and for an empty batch, the moving statistics are used. A frozen layer
    (``trainable = False``) always runs in inference mode, as in Keras 3.

    Args:
        axis: the feature axis (default the last, channels-last images).
        momentum: the moving averages' momentum (Keras default 0.99).
        epsilon: added to the variance (Keras default 1e-3).
        center: whether to add ``beta``.
        scale: whether to multiply by ``gamma``.
        beta_initializer: initializer of ``beta``.
        gamma_initializer: initializer of ``gamma``.
        moving_mean_initializer: initializer of ``moving_mean``.
        moving_variance_initializer: initializer of ``moving_variance``.
        name: the layer's name.
        dtype: the dtype of the weights and computations (default float32).
        trainable: whether ``gamma`` and ``beta`` are trainable.
        beta_regularizer: ``None``, a regularizer name or a callable for ``beta``; its penalty
            goes to ``losses``.
        gamma_regularizer: as ``beta_regularizer``, for ``gamma``.
        beta_constraint: ``None``, a constraint name or a callable for ``beta``; optimizers
            project the weight with it after each update.
        gamma_constraint: as ``beta_constraint``, for ``gamma``.
    """

    moving_mean: Variable | None  # None until build
    moving_variance: Variable | None

    def __init__(
        self,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        moving_mean_initializer: Any = "zeros",
        moving_variance_initializer: Any = "ones",
        *,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
        beta_regularizer: Any = None,
        gamma_regularizer: Any = None,
        beta_constraint: Any = None,
        gamma_constraint: Any = None,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        self._init_penalties(beta_regularizer, gamma_regularizer, beta_constraint, gamma_constraint)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"BatchNormalization: momentum must be in [0, 1], got {shown(momentum)}")
        self.axis = axis
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self.initializers = {
            "gamma": initializers.get(gamma_initializer),
            "beta": initializers.get(beta_initializer),
            "moving_mean": initializers.get(moving_mean_initializer),
            "moving_variance": initializers.get(moving_variance_initializer),
        }
        self.gamma = None
        self.beta = None
        self.moving_mean = None
        self.moving_variance = None

    def build(self, input_shape: Any) -> None:
        """Creates ``gamma``, ``beta`` and the moving statistics, one value per feature."""
        if not isinstance(self.axis, int):
            raise TypeError(f"BatchNormalization '{self.name}': axis must be an int, got {shown(self.axis)}")
        (axis,) = _axes(self.axis, len(input_shape), f"BatchNormalization '{self.name}'")
        own, self._broadcast_shape = _param_shapes(tuple(input_shape), (axis,))
        self._feature_axis = axis
        self._reduce_axes = tuple(i for i in range(len(input_shape)) if i != axis)
        init = self.initializers
        self._build_scale_and_shift(own, init["gamma"], init["beta"])
        self.moving_mean = self.add_weight(own, init["moving_mean"], trainable=False, name="moving_mean")
        self.moving_variance = self.add_weight(
            own, init["moving_variance"], trainable=False, name="moving_variance"
        )

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Normalizes the input; in training, also updates the moving statistics."""
        x = self._cast_input(inputs)
        moving_mean, moving_variance = self.moving_mean, self.moving_variance
        assert moving_mean is not None and moving_variance is not None, f"'{self.name}' called before build"
        features = moving_mean.shape[0]
        if x.ndim != len(self._broadcast_shape) or x.shape[self._feature_axis] != features:
            raise ValueError(
                f"BatchNormalization '{self.name}' was built for rank-{len(self._broadcast_shape)} inputs with "
                f"{features} features on axis {self._feature_axis}, got shape {x.shape}"
            )
        # An empty batch has no moments (NaN) to fold into the moving ones; its output is empty anyway.
        if training and self.trainable and x.size:
            mean = reduce_mean(x, axis=self._reduce_axes, keepdims=True)
            centered = x - mean
            variance = reduce_mean(square(centered), axis=self._reduce_axes, keepdims=True)
            # moving <- moving * momentum + batch * (1 - momentum), as Keras; in tapefit ops, so
            # that tp.function replays the update with each batch's statistics
            m = self.momentum
            moving_mean.assign(moving_mean * m + reshape(mean, (features,)) * (1 - m))
            moving_variance.assign(moving_variance * m + reshape(variance, (features,)) * (1 - m))
        else:
            centered = x - reshape(moving_mean, self._broadcast_shape)
            variance = reshape(moving_variance, self._broadcast_shape)
        return self._scale_and_shift(centered / sqrt(variance + self.epsilon))


class GroupNormalization(_Normalization):
    """Normalizes each example over groups of channels: the channels on ``axis`` are split
    into ``groups`` consecutive groups, and each group is normalized over its channels and
    every other non-batch axis, then scaled and shifted per channel.

    ``out = gamma * (x - mean) / sqrt(variance + epsilon) + beta``, the moments per example
    and group; ``gamma`` and ``beta`` have one value per channel. ``groups=1`` normalizes
    each example as a whole; ``groups=-1`` (one group per channel) is instance normalization.

    Args:
        groups: the number of groups (default 32), dividing the channels; ``-1``: as many as
            there are channels.
        axis: the channel axis (default the last).
        epsilon: added to the variance (Keras default 1e-3).
        center: whether to add ``beta``.
        scale: whether to multiply by ``gamma``.
        beta_initializer: initializer of ``beta``.
        gamma_initializer: initializer of ``gamma``.
        beta_regularizer: ``None``, a regularizer name or a callable for ``beta``; its penalty
            goes to ``losses``.
        gamma_regularizer: as ``beta_regularizer``, for ``gamma``.
        beta_constraint: ``None``, a constraint name or a callable for ``beta``; optimizers
            project the weight with it after each update.
        gamma_constraint: as ``beta_constraint``, for ``gamma``.
        name: the layer's name.
        dtype: the dtype of the weights and computations (default float32).
        trainable: whether ``gamma`` and ``beta`` are trainable.
    """

    supports_masking = True  # the steps' mask passes on to the next layer, as Keras

    def __init__(
        self,
        groups: int = 32,
        axis: int = -1,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        beta_regularizer: Any = None,
        gamma_regularizer: Any = None,
        beta_constraint: Any = None,
        gamma_constraint: Any = None,
        *,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        if isinstance(groups, bool) or not isinstance(groups, int) or not (groups > 0 or groups == -1):
            raise ValueError(f"GroupNormalization: groups must be a positive int or -1, got {shown(groups)}")
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise TypeError(f"GroupNormalization: axis must be an int, got {shown(axis)}")
        self._init_penalties(beta_regularizer, gamma_regularizer, beta_constraint, gamma_constraint)
        self.groups = groups
        self.axis = axis
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.gamma = None
        self.beta = None
        self._broadcast_shape = ()

    def build(self, input_shape: Any) -> None:
        """Creates ``gamma`` and ``beta``, one value per channel."""
        where = f"GroupNormalization '{self.name}'"
        if len(input_shape) < 2:
            raise ValueError(f"{where} needs inputs of rank 2 or more, got shape {input_shape}")
        (axis,) = _axes(self.axis, len(input_shape), where)
        if axis == 0:
            raise ValueError(f"{where}: axis {self.axis} is the batch axis; it must be a channel axis")
        own, self._broadcast_shape = _param_shapes(tuple(input_shape), (axis,))
        channels = own[0]
        groups = channels if self.groups == -1 else self.groups
        if groups > channels or channels % groups:
            raise ValueError(
                f"{where}: groups ({self.groups}) must divide the {channels} channels on axis {self.axis}"
            )
        self._channel_axis, self._group_count = axis, groups
        self._build_scale_and_shift(own, self.gamma_initializer, self.beta_initializer)

    def call(self, inputs: Any) -> Tensor:
        """Normalizes the input."""
        x = self._cast_input(inputs)
        axis, groups = self._channel_axis, self._group_count
        channels = self._broadcast_shape[axis]
        if x.ndim != len(self._broadcast_shape) or x.shape[axis] != channels:
            raise ValueError(
                f"GroupNormalization '{self.name}' was built for rank-{len(self._broadcast_shape)} inputs with "
                f"{channels} channels on axis {axis}, got shape {x.shape}"
            )
        # (..., channels, ...) -> (..., groups, channels // groups, ...): the moments over every
        # non-batch axis but the group axis
        grouped = reshape(x, (*x.shape[:axis], groups, channels // groups, *x.shape[axis + 1 :]))
        over = tuple(i for i in range(1, grouped.ndim) if i != axis)
        mean = reduce_mean(grouped, axis=over, keepdims=True)
        centered = grouped - mean
        variance = reduce_mean(square(centered), axis=over, keepdims=True)
        normalized = reshape(centered / sqrt(variance + self.epsilon), x.shape)
        return self._scale_and_shift(normalized)


__all__ = ["BatchNormalization", "GroupNormalization", "LayerNormalization"]
