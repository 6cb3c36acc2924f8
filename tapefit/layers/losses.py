"""Losses (``tp.losses``): callables ``loss(y_true, y_pred, sample_weight=None) -> scalar``.

As in Keras: each loss computes one value per sample (reducing the last axis),
then ``reduction="sum_over_batch_size"`` (the default) sums them, weighted by
``sample_weight``, and divides by their number. Cross-entropies on
probabilities clip them to ``[1e-7, 1 - 1e-7]`` (binary cross-entropy in float16 to
``[eps, 1 - eps]`` with ``eps = 2**-11``, as ``1 - 1e-7`` rounds to 1 there); with ``from_logits=True`` they
use the fused, stable ``tp.nn`` forms (finite at logits of 1000).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.function import host_call, tracing
from tapefit.core.messages import shown
from tapefit.core.naming import Registry
from tapefit.core.ops import nn as _nn
from tapefit.core.ops.math import (
    abs,
    cast,
    clip_by_value,
    equal,
    log,
    logical_or,
    maximum,
    pow,
    sqrt,
    square,
    stop_gradient,
    where,
)
from tapefit.core.ops.reduce import reduce_all, reduce_mean, reduce_sum
from tapefit.core.ops.shape import one_hot, squeeze
from tapefit.core.tensor import Tensor, as_tensor

EPSILON = 1e-7
_REDUCTIONS = ("sum_over_batch_size", "sum", "none")


def _prediction(y_pred: Any, loss: str) -> Tensor:
    y_pred = as_tensor(y_pred)
    if y_pred.dtype.kind != "f":
        raise TypeError(f"{loss}: y_pred must be floating, got dtype {y_pred.dtype.name}")
    return y_pred


def _same_rank(y_true: Tensor, y_pred: Tensor, loss: str) -> tuple[Tensor, Tensor]:
    """Drops a trailing axis of size 1 from the one of higher rank (Keras's rule), then checks the shapes.

    Without this, ``(batch,)`` against ``(batch, 1)`` would broadcast to ``(batch, batch)``.
    """
    if y_true.ndim == y_pred.ndim + 1 and y_true.shape[-1] == 1:
        y_true = squeeze(y_true, -1)
    elif y_pred.ndim == y_true.ndim + 1 and y_pred.shape[-1] == 1:
        y_pred = squeeze(y_pred, -1)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"{loss}: y_true has shape {y_true.shape} but y_pred has shape {y_pred.shape}")
    return y_true, y_pred


def _warn_unless_probabilities(loss: Loss, y_pred: Tensor, renormalized: bool = False) -> None:
    """Warns once per loss object when ``y_pred`` holds values outside ``[0, 1]`` (below 0 for a
    loss that ``renormalized`` scores to sum to 1): logits given to a loss that expects
    probabilities (Keras trains on in silence, towards a wrong answer)."""
    if loss.__dict__.get("_warned_logits") or tracing():  # a trace reads no values
        return
    values = np.asarray(y_pred.numpy())
    if values.size == 0:
        return
    low, high = float(values.min()), float(values.max())
    if (low >= 0.0 and (high <= 1.0 or renormalized)) or not (np.isfinite(low) and np.isfinite(high)):
        return
    loss.__dict__["_warned_logits"] = True
    warnings.warn(
        f"{type(loss).__name__}: y_pred holds values outside [0, 1] (from {low:.4g} to {high:.4g}), which "
        "look like logits; pass from_logits=True, or end the model in a sigmoid or softmax",
        UserWarning,
        stacklevel=4,
    )


def _class_probabilities(y_pred: Tensor, axis: int) -> Tensor:
    """``y_pred`` renormalized to sum to 1 over ``axis``, then clipped to ``[EPSILON, 1 - EPSILON]``
    (Keras's categorical cross-entropies on probabilities)."""
    return clip_by_value(y_pred / reduce_sum(y_pred, axis=axis, keepdims=True), EPSILON, 1.0 - EPSILON)


def _clip_epsilon(dtype: np.dtype) -> float:
    """``EPSILON``, or the gap below 1 of ``dtype`` where ``1 - EPSILON`` would round to 1 (float16)."""
    return max(EPSILON, float(np.finfo(dtype).epsneg))


def _mean_last(x: Tensor) -> Tensor:
    """The per-sample mean over the last axis (elementwise values for rank 0 and 1)."""
    return reduce_mean(x, axis=-1) if x.ndim >= 2 else x


class Loss:
    """Base class: subclasses define ``call(y_true, y_pred) -> per-sample losses``.

    Args:
        name: the loss's name (default: the Keras function name, ``"mean_squared_error"``...).
        reduction: ``"sum_over_batch_size"`` (the mean over samples; the default), ``"sum"``,
            or ``"none"``/``None`` (the per-sample losses).
    """

    default_name = "loss"

    def __init__(self, name: str | None = None, reduction: str | None = "sum_over_batch_size") -> None:
        if reduction is None:
            reduction = "none"
        if reduction not in _REDUCTIONS:
            raise ValueError(
                f"{type(self).__name__}: reduction must be one of {_REDUCTIONS} or None, got {shown(reduction)}"
            )
        self.name = name or self.default_name
        self.reduction = reduction

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments as the loss holds them now (Keras's ``get_config``)."""
        from tapefit.layers import serialization

        return serialization.attribute_config(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Loss:
        """A loss from what ``get_config`` returned.

        Raises:
            ValueError: a key its constructor does not take (named).
        """
        from tapefit.layers import serialization

        return serialization.from_constructor_config(cls, config)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        raise NotImplementedError

    def _true(self, y_true: Any, y_pred: Tensor) -> tuple[Tensor, Tensor]:
        """``y_true`` in ``y_pred``'s dtype, shapes reconciled."""
        y_true = cast(as_tensor(y_true), y_pred.dtype)
        return _same_rank(y_true, y_pred, type(self).__name__)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        """The loss of a batch.

        Args:
            y_true: the targets.
            y_pred: the predictions (floating).
            sample_weight: optional weights, one per sample (or broadcastable to the per-sample losses).
        """
        y_pred = _prediction(y_pred, type(self).__name__)
        losses = self.call(y_true, y_pred)
        if sample_weight is not None:
            weights = cast(as_tensor(sample_weight), losses.dtype)
            while weights.ndim > losses.ndim and weights.shape[-1] == 1:
                weights = squeeze(weights, -1)
            try:
                np.broadcast_shapes(weights.shape, losses.shape)
            except ValueError:
                raise ValueError(
                    f"{type(self).__name__}: sample_weight of shape {weights.shape} does not fit the "
                    f"per-sample losses of shape {losses.shape}"
                ) from None
            losses = losses * weights
        if self.reduction == "none":
            return losses
        total = reduce_sum(losses)
        if self.reduction == "sum":
            return total
        return total / max(math.prod(losses.shape), 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, reduction={self.reduction!r})"


class _MeanOfError(Loss):
    """A loss of the error ``e = y_pred - y_true``: ``mean(of_error(e))`` over the last axis."""

    def of_error(self, error: Tensor) -> Tensor:
        """The loss of each element's error."""
        raise NotImplementedError

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true, y_pred = self._true(y_true, y_pred)
        return _mean_last(self.of_error(y_pred - y_true))


class MeanSquaredError(_MeanOfError):
    """``mean((y_true - y_pred) ** 2)`` over the last axis, then over the batch."""

    default_name = "mean_squared_error"

    def of_error(self, error: Tensor) -> Tensor:
        """``e ** 2``."""
        return square(error)


class MeanAbsoluteError(_MeanOfError):
    """``mean(|y_true - y_pred|)`` over the last axis, then over the batch."""

    default_name = "mean_absolute_error"

    def of_error(self, error: Tensor) -> Tensor:
        """``|e|``."""
        return abs(error)


class Huber(_MeanOfError):
    """``0.5 * e ** 2`` where ``|e| <= delta``, else ``delta * (|e| - 0.5 * delta)``, with ``e = y_pred - y_true``.

    Args:
        delta: where the loss turns from quadratic to linear (default 1.0).
        name: the loss's name.
        reduction: see ``Loss``.
    """

    default_name = "huber_loss"

    def __init__(
        self, delta: float = 1.0, name: str | None = None, reduction: str | None = "sum_over_batch_size"
    ) -> None:
        super().__init__(name, reduction)
        if delta <= 0:
            raise ValueError(f"Huber: delta must be positive, got {shown(delta)}")
        self.delta = float(delta)

    def of_error(self, error: Tensor) -> Tensor:
        """Quadratic within ``delta``, linear beyond."""
        error = abs(error)
        quadratic = square(error) * 0.5
        linear = error * self.delta - 0.5 * self.delta**2
        return where(error <= self.delta, quadratic, linear)


class BinaryCrossentropy(Loss):
    """Cross-entropy of 0/1 targets and probabilities (or logits), averaged over the last axis.

    Args:
        from_logits: whether ``y_pred`` holds logits rather than probabilities.
        label_smoothing: squeezes the targets towards 0.5: ``y * (1 - s) + 0.5 * s``.
        name: the loss's name.
        reduction: see ``Loss``.
    """

    default_name = "binary_crossentropy"

    def __init__(
        self,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        name: str | None = None,
        reduction: str | None = "sum_over_batch_size",
    ) -> None:
        super().__init__(name, reduction)
        self.from_logits = bool(from_logits)
        self.label_smoothing = _smoothing(label_smoothing, "BinaryCrossentropy")

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true, y_pred = self._true(y_true, y_pred)
        if self.label_smoothing:
            y_true = y_true * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        if self.from_logits:
            return _mean_last(_nn.sigmoid_cross_entropy_with_logits(labels=y_true, logits=y_pred))
        _warn_unless_probabilities(self, y_pred)
        eps = _clip_epsilon(y_pred.dtype)
        p = clip_by_value(y_pred, eps, 1.0 - eps)
        return _mean_last(-(y_true * log(p) + (1.0 - y_true) * log(1.0 - p)))


class CategoricalCrossentropy(Loss):
    """Cross-entropy of one-hot (or soft) targets and class probabilities (or logits).

    Probabilities are renormalized to sum to 1 over ``axis`` and clipped, as in Keras.

    Args:
        from_logits: whether ``y_pred`` holds logits rather than probabilities.
        label_smoothing: mixes the targets with the uniform distribution: ``y * (1 - s) + s / classes``.
        axis: the class axis.
        name: the loss's name.
        reduction: see ``Loss``.
    """

    default_name = "categorical_crossentropy"

    def __init__(
        self,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
        name: str | None = None,
        reduction: str | None = "sum_over_batch_size",
    ) -> None:
        super().__init__(name, reduction)
        self.from_logits = bool(from_logits)
        self.label_smoothing = _smoothing(label_smoothing, "CategoricalCrossentropy")
        self.axis = int(axis)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true = cast(as_tensor(y_true), y_pred.dtype)
        if y_true.shape != y_pred.shape:
            raise ValueError(
                f"CategoricalCrossentropy: y_true has shape {y_true.shape} but y_pred has shape {y_pred.shape} "
                "(for integer class labels use SparseCategoricalCrossentropy)"
            )
        if y_pred.ndim == 0:
            raise ValueError("CategoricalCrossentropy: y_pred needs a class axis, got a scalar")
        if self.label_smoothing:
            classes = y_pred.shape[self.axis]
            y_true = y_true * (1.0 - self.label_smoothing) + self.label_smoothing / classes
        if self.from_logits:
            return _nn.softmax_cross_entropy_with_logits(labels=y_true, logits=y_pred, axis=self.axis)
        _warn_unless_probabilities(self, y_pred, renormalized=True)
        return -reduce_sum(y_true * log(_class_probabilities(y_pred, self.axis)), axis=self.axis)


class SparseCategoricalCrossentropy(Loss):
    """Cross-entropy of integer class labels and class probabilities (or logits) on the last axis.

    ``y_true`` has ``y_pred``'s shape without the class axis (a trailing axis of
    size 1 is accepted too). Probabilities are renormalized and clipped, as in Keras.

    Args:
        from_logits: whether ``y_pred`` holds logits rather than probabilities.
        name: the loss's name.
        reduction: see ``Loss``.
    """

    default_name = "sparse_categorical_crossentropy"

    def __init__(
        self,
        from_logits: bool = False,
        name: str | None = None,
        reduction: str | None = "sum_over_batch_size",
    ) -> None:
        super().__init__(name, reduction)
        self.from_logits = bool(from_logits)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        labels = sparse_labels(y_true, y_pred, "SparseCategoricalCrossentropy")
        if self.from_logits:
            return _nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=y_pred)
        _warn_unless_probabilities(self, y_pred, renormalized=True)
        targets = one_hot(labels, y_pred.shape[-1], dtype=y_pred.dtype)
        return -reduce_sum(targets * log(_class_probabilities(y_pred, -1)), axis=-1)


def sparse_labels(y_true: Any, y_pred: Tensor, what: str) -> Tensor:
    """Integer class labels checked against ``y_pred`` (shape without the class axis, values in range).

    Integral floats are accepted and cast to int32; a trailing axis of size 1 is dropped.
    """
    labels = as_tensor(y_true)
    if y_pred.ndim == 0:
        raise ValueError(f"{what}: y_pred needs a class axis, got a scalar")
    if labels.ndim == y_pred.ndim and labels.shape[-1] == 1:
        labels = squeeze(labels, -1)
    if labels.shape != y_pred.shape[:-1]:
        raise ValueError(
            f"{what}: y_true of shape {labels.shape} does not fit y_pred of shape {y_pred.shape}; expected integer "
            f"labels of shape {y_pred.shape[:-1]} (for one-hot targets use CategoricalCrossentropy)"
        )
    if labels.dtype.kind not in "iuf":
        raise TypeError(f"{what}: y_true must hold integer class labels, got dtype {labels.dtype.name}")
    # A host call: a tp.function checks the labels of every call, not only those it traced with.
    host_call(_check_label_values, labels, y_pred.shape[-1], what)
    return cast(labels, _dt.int32) if labels.dtype.kind == "f" else labels


def _check_label_values(labels: Tensor, classes: int, what: str) -> None:
    # Runs on every replay: the ufuncs' reduce (ndarray.min and max add a Python wrapper's
    # cost), and for integers one pass (read as unsigned, a negative label is above any count).
    values = labels._value  # only read; a host call's Tensor is no traced value
    dtype = values.dtype
    # The unsigned reading needs every negative label above the count (the top bit set is at
    # least 2**(bits-1)) and the machine's byte order (a big-endian view would be misread).
    if dtype.kind == "i" and dtype.isnative and classes <= 1 << (8 * dtype.itemsize - 1):
        if values.size and _maximum(values.view(_UNSIGNED[dtype.itemsize]), axis=None) >= classes:
            _label_range_error(values, classes, what)
        return
    if values.dtype.kind == "f" and not np.all(values == np.floor(values)):
        raise ValueError(
            f"{what}: y_true must hold integer class labels, got non-integral {labels.dtype.name} values"
        )
    if values.size and (_minimum(values, axis=None) < 0 or _maximum(values, axis=None) >= classes):
        _label_range_error(values, classes, what)


def _label_range_error(values: np.ndarray, classes: int, what: str) -> None:
    raise ValueError(
        f"{what}: labels must lie in [0, {classes}) for y_pred with {classes} classes, got values from "
        f"{values.min():g} to {values.max():g}"
    )


_minimum, _maximum = np.minimum.reduce, np.maximum.reduce
_UNSIGNED = {size: np.dtype(f"u{size}") for size in (1, 2, 4, 8)}


def _smoothing(value: float, loss: str) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{loss}: label_smoothing must be in [0, 1], got {shown(value)}")
    return float(value)


# -- more of Keras's losses -------------------------------------------------------------------


class MeanSquaredLogarithmicError(_MeanOfError):
    """``mean((log(1 + max(y_pred, eps)) - log(1 + max(y_true, eps))) ** 2)`` over the last axis,
    with ``eps = 1e-7``.

    Args:
        reduction: see ``Loss``.
        name: the loss's name.
    """

    default_name = "mean_squared_logarithmic_error"

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None) -> None:
        super().__init__(name, reduction)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true, y_pred = self._true(y_true, y_pred)
        first = log(maximum(y_pred, EPSILON) + 1.0)
        second = log(maximum(y_true, EPSILON) + 1.0)
        return _mean_last(square(first - second))


class MeanAbsolutePercentageError(Loss):
    """``100 * mean(|y_true - y_pred| / max(|y_true|, eps))`` over the last axis, ``eps = 1e-7``.

    Args:
        reduction: see ``Loss``.
        name: the loss's name.
    """

    default_name = "mean_absolute_percentage_error"

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None) -> None:
        super().__init__(name, reduction)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true, y_pred = self._true(y_true, y_pred)
        return _mean_last(abs((y_true - y_pred) / maximum(abs(y_true), EPSILON))) * 100.0


class LogCosh(_MeanOfError):
    """``mean(log(cosh(y_pred - y_true)))`` over the last axis, computed stably as
    ``e + softplus(-2 e) - log(2)``.

    Args:
        reduction: see ``Loss``.
        name: the loss's name.
    """

    default_name = "log_cosh"

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None) -> None:
        super().__init__(name, reduction)

    def of_error(self, error: Tensor) -> Tensor:
        """``log(cosh(e))``."""
        return error + _nn.softplus(error * -2.0) - math.log(2.0)


class Poisson(Loss):
    """``mean(y_pred - y_true * log(y_pred + eps))`` over the last axis, ``eps = 1e-7``.

    Args:
        reduction: see ``Loss``.
        name: the loss's name.
    """

    default_name = "poisson"

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None) -> None:
        super().__init__(name, reduction)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true, y_pred = self._true(y_true, y_pred)
        return _mean_last(y_pred - y_true * log(y_pred + EPSILON))


class KLDivergence(Loss):
    """The Kullback-Leibler divergence ``sum(y_true * log(y_true / y_pred))`` over the last axis,
    both clipped to ``[eps, 1]`` with ``eps = 1e-7``.

    Args:
        reduction: see ``Loss``.
        name: the loss's name.
    """

    default_name = "kl_divergence"

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None) -> None:
        super().__init__(name, reduction)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true, y_pred = self._true(y_true, y_pred)
        y_true = clip_by_value(y_true, EPSILON, 1.0)
        y_pred = clip_by_value(y_pred, EPSILON, 1.0)
        values = y_true * log(y_true / y_pred)
        return reduce_sum(values, axis=-1) if values.ndim >= 1 else values


def _l2_normalize(x: Tensor, axis: int) -> Tensor:
    """``x / max(||x||, eps)`` along ``axis`` (``eps = 1e-7``)."""
    return x / sqrt(maximum(reduce_sum(square(x), axis=axis, keepdims=True), EPSILON**2))


class CosineSimilarity(Loss):
    """The negated cosine similarity ``-sum(l2_normalize(y_true) * l2_normalize(y_pred))`` along
    ``axis``: -1 for vectors pointing the same way, 0 for orthogonal ones.

    Args:
        axis: the axis along which the similarity is computed.
        reduction: see ``Loss``.
        name: the loss's name.
    """

    default_name = "cosine_similarity"

    def __init__(
        self, axis: int = -1, reduction: str | None = "sum_over_batch_size", name: str | None = None
    ) -> None:
        super().__init__(name, reduction)
        self.axis = int(axis)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true, y_pred = self._true(y_true, y_pred)
        return -reduce_sum(
            _l2_normalize(y_true, self.axis) * _l2_normalize(y_pred, self.axis), axis=self.axis
        )


class Hinge(Loss):
    """``mean(max(1 - y_true * y_pred, 0))`` over the last axis; 0/1 targets are read as -1/1
    (when every target of the batch is 0 or 1, as Keras decides).

    Args:
        reduction: see ``Loss``.
        name: the loss's name.
    """

    default_name = "hinge"

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None) -> None:
        super().__init__(name, reduction)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true, y_pred = self._true(y_true, y_pred)
        # 1 when every target is 0 or 1 (then 2y - 1 = y + (y - 1)), else 0; a tensor, so a
        # tp.function decides on every call, not once at tracing
        binary = cast(reduce_all(logical_or(equal(y_true, 0.0), equal(y_true, 1.0))), y_pred.dtype)
        y_true = stop_gradient(y_true + binary * (y_true - 1.0))
        return _mean_last(maximum(1.0 - y_true * y_pred, 0.0))


class BinaryFocalCrossentropy(Loss):
    """Binary cross-entropy scaled by the focal factor ``(1 - p_t) ** gamma`` (Lin et al., 2017),
    ``p_t`` the probability given to the true label; averaged over ``axis``.

    Args:
        apply_class_balancing: weighs positives by ``alpha`` and negatives by ``1 - alpha``.
        alpha: the weight of positives with ``apply_class_balancing``.
        gamma: the focusing exponent (0 gives the binary cross-entropy).
        from_logits: whether ``y_pred`` holds logits (a sigmoid is applied).
        label_smoothing: squeezes the targets towards 0.5: ``y * (1 - s) + 0.5 * s``.
        axis: the axis averaged over.
        reduction: see ``Loss``.
        name: the loss's name.
    """

    default_name = "binary_focal_crossentropy"

    def __init__(
        self,
        apply_class_balancing: bool = False,
        alpha: float = 0.25,
        gamma: float = 2.0,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = None,
    ) -> None:
        super().__init__(name, reduction)
        self.apply_class_balancing = bool(apply_class_balancing)
        self.alpha = float(alpha)
        self.gamma = float(gamma)
        self.from_logits = bool(from_logits)
        self.label_smoothing = _smoothing(label_smoothing, "BinaryFocalCrossentropy")
        self.axis = int(axis)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true, y_pred = self._true(y_true, y_pred)
        if self.label_smoothing:
            y_true = y_true * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        if self.from_logits:
            y_pred = _nn.sigmoid(y_pred)
        eps = _clip_epsilon(y_pred.dtype)
        p = clip_by_value(y_pred, eps, 1.0 - eps)
        bce = -(y_true * log(p) + (1.0 - y_true) * log(1.0 - p))
        p_t = y_true * y_pred + (1.0 - y_true) * (1.0 - y_pred)
        focal = _power(1.0 - p_t, self.gamma) * bce
        if self.apply_class_balancing:
            focal = (y_true * self.alpha + (1.0 - y_true) * (1.0 - self.alpha)) * focal
        return reduce_mean(focal, axis=self.axis) if focal.ndim >= 1 else focal


def _power(x: Tensor, exponent: float) -> Tensor:
    """``x ** exponent`` for a constant exponent (0 gives ones, 1 gives ``x``)."""
    if exponent == 0.0:
        return x * 0.0 + 1.0
    if exponent == 1.0:
        return x
    if exponent == 2.0:
        return square(x)
    return pow(x, cast(as_tensor(exponent), x.dtype))


class CategoricalFocalCrossentropy(Loss):
    """Categorical cross-entropy of each class scaled by ``alpha * (1 - p) ** gamma``
    (Lin et al., 2017), ``p`` the class's renormalized, clipped probability; summed over ``axis``.

    Args:
        alpha: the weighting factor (a number, or one per class).
        gamma: the focusing exponent (0 gives ``alpha`` times the categorical cross-entropy).
        from_logits: whether ``y_pred`` holds logits (a softmax is applied).
        label_smoothing: mixes the targets with the uniform distribution: ``y * (1 - s) + s / classes``.
        axis: the class axis.
        reduction: see ``Loss``.
        name: the loss's name.
    """

    default_name = "categorical_focal_crossentropy"

    def __init__(
        self,
        alpha: float | list[float] = 0.25,
        gamma: float = 2.0,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = None,
    ) -> None:
        super().__init__(name, reduction)
        self.alpha = [float(a) for a in alpha] if isinstance(alpha, (list, tuple)) else float(alpha)
        self.gamma = float(gamma)
        self.from_logits = bool(from_logits)
        self.label_smoothing = _smoothing(label_smoothing, "CategoricalFocalCrossentropy")
        self.axis = int(axis)

    def call(self, y_true: Any, y_pred: Tensor) -> Tensor:
        """The per-sample losses."""
        y_true = cast(as_tensor(y_true), y_pred.dtype)
        if y_true.shape != y_pred.shape or y_pred.ndim == 0:
            raise ValueError(
                f"CategoricalFocalCrossentropy: y_true has shape {y_true.shape} but y_pred has shape "
                f"{y_pred.shape}; both need the class axis"
            )
        if self.label_smoothing:
            y_true = y_true * (1.0 - self.label_smoothing) + self.label_smoothing / y_true.shape[-1]
        if self.from_logits:
            y_pred = _nn.softmax(y_pred, axis=self.axis)
        output = _class_probabilities(y_pred, self.axis)
        alpha = cast(as_tensor(self.alpha), y_pred.dtype)
        focal = _power(1.0 - output, self.gamma) * alpha * (-y_true * log(output))
        return reduce_sum(focal, axis=self.axis)


# -- the function forms: per-sample values, as Keras's keras.losses.<name>(y_true, y_pred) -------------


def _values(loss: Loss, y_true: Any, y_pred: Any) -> Tensor:
    return loss.call(y_true, _prediction(y_pred, loss.default_name))


def mean_squared_error(y_true: Any, y_pred: Any) -> Tensor:
    """``mean((y_true - y_pred) ** 2)`` over the last axis: one value per sample."""
    return _values(MeanSquaredError(reduction="none"), y_true, y_pred)


def mean_absolute_error(y_true: Any, y_pred: Any) -> Tensor:
    """``mean(|y_true - y_pred|)`` over the last axis: one value per sample."""
    return _values(MeanAbsoluteError(reduction="none"), y_true, y_pred)


def mean_squared_logarithmic_error(y_true: Any, y_pred: Any) -> Tensor:
    """``MeanSquaredLogarithmicError``'s value per sample."""
    return _values(MeanSquaredLogarithmicError(reduction="none"), y_true, y_pred)


def mean_absolute_percentage_error(y_true: Any, y_pred: Any) -> Tensor:
    """``MeanAbsolutePercentageError``'s value per sample."""
    return _values(MeanAbsolutePercentageError(reduction="none"), y_true, y_pred)


def huber(y_true: Any, y_pred: Any, delta: float = 1.0) -> Tensor:
    """``Huber(delta)``'s value per sample."""
    return _values(Huber(delta, reduction="none"), y_true, y_pred)


def log_cosh(y_true: Any, y_pred: Any) -> Tensor:
    """``LogCosh``'s value per sample."""
    return _values(LogCosh(reduction="none"), y_true, y_pred)


def poisson(y_true: Any, y_pred: Any) -> Tensor:
    """``Poisson``'s value per sample."""
    return _values(Poisson(reduction="none"), y_true, y_pred)


def kl_divergence(y_true: Any, y_pred: Any) -> Tensor:
    """``KLDivergence``'s value per sample."""
    return _values(KLDivergence(reduction="none"), y_true, y_pred)


def cosine_similarity(y_true: Any, y_pred: Any, axis: int = -1) -> Tensor:
    """``CosineSimilarity(axis)``'s value per sample."""
    return _values(CosineSimilarity(axis, reduction="none"), y_true, y_pred)


def hinge(y_true: Any, y_pred: Any) -> Tensor:
    """``Hinge``'s value per sample."""
    return _values(Hinge(reduction="none"), y_true, y_pred)


def binary_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1
) -> Tensor:
    """``BinaryCrossentropy``'s value per sample (the mean over the last axis; ``axis`` must be -1)."""
    _last_axis_only(axis, "binary_crossentropy")
    return _values(BinaryCrossentropy(from_logits, label_smoothing, reduction="none"), y_true, y_pred)


def categorical_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1
) -> Tensor:
    """``CategoricalCrossentropy``'s value per sample."""
    return _values(
        CategoricalCrossentropy(from_logits, label_smoothing, axis, reduction="none"), y_true, y_pred
    )


def sparse_categorical_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, ignore_class: int | None = None, axis: int = -1
) -> Tensor:
    """``SparseCategoricalCrossentropy``'s value per sample (``ignore_class`` must be ``None``
    and ``axis`` -1: tapefit takes neither)."""
    if ignore_class is not None:
        raise ValueError("sparse_categorical_crossentropy: ignore_class is not taken by tapefit")
    _last_axis_only(axis, "sparse_categorical_crossentropy")
    return _values(SparseCategoricalCrossentropy(from_logits, reduction="none"), y_true, y_pred)


def binary_focal_crossentropy(
    y_true: Any,
    y_pred: Any,
    apply_class_balancing: bool = False,
    alpha: float = 0.25,
    gamma: float = 2.0,
    from_logits: bool = False,
    label_smoothing: float = 0.0,
    axis: int = -1,
) -> Tensor:
    """``BinaryFocalCrossentropy``'s value per sample."""
    loss = BinaryFocalCrossentropy(
        apply_class_balancing, alpha, gamma, from_logits, label_smoothing, axis, reduction="none"
    )
    return _values(loss, y_true, y_pred)


def categorical_focal_crossentropy(
    y_true: Any,
    y_pred: Any,
    alpha: float = 0.25,
    gamma: float = 2.0,
    from_logits: bool = False,
    label_smoothing: float = 0.0,
    axis: int = -1,
) -> Tensor:
    """``CategoricalFocalCrossentropy``'s value per sample."""
    loss = CategoricalFocalCrossentropy(alpha, gamma, from_logits, label_smoothing, axis, reduction="none")
    return _values(loss, y_true, y_pred)


def _last_axis_only(axis: int, what: str) -> None:
    if axis != -1:
        raise ValueError(f"{what}: tapefit reduces the last axis only (axis=-1), got axis={axis}")


registry: Registry[Callable[[], Loss]] = Registry(
    "loss",
    {
        "mse": MeanSquaredError,
        "mean_squared_error": MeanSquaredError,
        "mae": MeanAbsoluteError,
        "mean_absolute_error": MeanAbsoluteError,
        "huber": Huber,
        "huber_loss": Huber,
        "binary_crossentropy": BinaryCrossentropy,
        "categorical_crossentropy": CategoricalCrossentropy,
        "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
        "msle": MeanSquaredLogarithmicError,
        "mean_squared_logarithmic_error": MeanSquaredLogarithmicError,
        "mape": MeanAbsolutePercentageError,
        "mean_absolute_percentage_error": MeanAbsolutePercentageError,
        "log_cosh": LogCosh,
        "poisson": Poisson,
        "kld": KLDivergence,
        "kl_divergence": KLDivergence,
        "cosine_similarity": CosineSimilarity,
        "hinge": Hinge,
        "binary_focal_crossentropy": BinaryFocalCrossentropy,
        "categorical_focal_crossentropy": CategoricalFocalCrossentropy,
    },
    instantiate=True,
    callable_form=" (y_true, y_pred) -> scalar",
)
"""The loss classes by config name (``registry.names()``)."""


def get(identifier: str | Callable[..., Any]) -> Callable[..., Any]:
    """A loss from its config name (``"mse"``, ``"sparse_categorical_crossentropy"``, ...),
    its class name (``"MeanSquaredError"``), or a callable ``(y_true, y_pred) -> scalar`` (returned as is).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: neither a string nor a callable.
    """
    return registry.get(identifier)


def serialize(loss: Loss | Callable[..., Any]) -> dict[str, Any]:
    """``{"module", "class_name", "config"}`` of a loss, as model files hold it (Keras 3's
    ``keras.losses.serialize``); a function must be registered with ``tp.register_serializable``."""
    from tapefit.layers import serialization

    return serialization.serialize(loss, getattr(loss, "name", None) or type(loss).__name__)


def deserialize(config: dict[str, Any] | str) -> Callable[..., Any]:
    """The loss ``serialize`` described (a built-in class, or one registered with
    ``tp.register_serializable``); a name is taken as ``get`` takes it.

    Raises:
        tp.layers.serialization.ConfigError: an unknown class or a bad config.
    """
    from tapefit.layers import serialization

    if isinstance(config, str):
        return get(config)
    result: Callable[..., Any] = serialization.deserialize(config, serialization.layer_tables(), "loss")
    return result


__all__ = [
    "BinaryCrossentropy",
    "BinaryFocalCrossentropy",
    "CategoricalCrossentropy",
    "CategoricalFocalCrossentropy",
    "CosineSimilarity",
    "Hinge",
    "Huber",
    "KLDivergence",
    "LogCosh",
    "Loss",
    "MeanAbsoluteError",
    "MeanAbsolutePercentageError",
    "MeanSquaredError",
    "MeanSquaredLogarithmicError",
    "Poisson",
    "SparseCategoricalCrossentropy",
    "binary_crossentropy",
    "binary_focal_crossentropy",
    "categorical_crossentropy",
    "categorical_focal_crossentropy",
    "cosine_similarity",
    "deserialize",
    "get",
    "hinge",
    "huber",
    "kl_divergence",
    "log_cosh",
    "mean_absolute_error",
    "mean_absolute_percentage_error",
    "mean_squared_error",
    "mean_squared_logarithmic_error",
    "poisson",
    "registry",
    "serialize",
    "sparse_categorical_crossentropy",
]


def __dir__() -> list[str]:
    return sorted(__all__)
