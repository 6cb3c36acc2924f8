"""Streaming metrics (``tp.metrics``), as in Keras: ``update_state``, ``result``, ``reset_state``.

A metric accumulates a weighted sum and a weight total in float64 NumPy (metrics
are never differentiated, so nothing is recorded on a tape); ``result()`` is
their ratio as a float32 scalar Tensor (0 before any update).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core.function import host_call, tracing
from tapefit.core.messages import shown
from tapefit.core.naming import Registry
from tapefit.core.tensor import Tensor, _wrap
from tapefit.layers import losses as _losses


def _array(value: Any, what: str, metric: str) -> np.ndarray:
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{metric}: cannot read {what} as an array ({error})") from None


def _same_rank(y_true: Any, y_pred: Any, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """The arrays of ``y_true`` and ``y_pred``, with a trailing size-1 axis dropped from the one of
    higher rank (Keras's rule); then checks the shapes."""
    y_true, y_pred = _array(y_true, "y_true", metric), _array(y_pred, "y_pred", metric)
    if y_true.ndim == y_pred.ndim + 1 and y_true.shape[-1] == 1:
        y_true = y_true[..., 0]
    elif y_pred.ndim == y_true.ndim + 1 and y_pred.shape[-1] == 1:
        y_pred = y_pred[..., 0]
    if y_true.shape != y_pred.shape:
        raise ValueError(f"{metric}: y_true has shape {y_true.shape} but y_pred has shape {y_pred.shape}")
    return y_true, y_pred


def _call_method(method: Callable[..., Any], metric: Metric, args: Any, kwargs: Any) -> Any:
    return method(metric, *args, **kwargs)


def _hosted(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` as a ``tp.function`` trace records it: a host call, run on every replay with
    that call's values (a metric's state is Python numbers, which a trace cannot follow)."""
    if getattr(method, "_tapefit_hosted", False):
        return method

    @functools.wraps(method)
    def hosted(self: Metric, *args: Any, **kwargs: Any) -> Any:
        if tracing():
            return host_call(_call_method, method, self, args, kwargs)
        return method(self, *args, **kwargs)

    hosted._tapefit_hosted = True  # type: ignore[attr-defined]
    return hosted


class Metric:
    """Base class of streaming metrics.

    ``update_state``, ``result`` and ``reset_state`` (a subclass's too) run as host calls inside
    a ``tp.function``: a compiled training step updates its metrics on every call.

    Args:
        name: the metric's name (the key in training logs).
    """

    default_name = "metric"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("update_state", "result", "reset_state"):
            if name in cls.__dict__:
                setattr(cls, name, _hosted(cls.__dict__[name]))

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.default_name
        self.total = 0.0
        self.count = 0.0

    @_hosted
    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Adds a batch."""
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments as the metric holds them now (Keras's ``get_config``)."""
        from tapefit.layers import serialization

        return serialization.attribute_config(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Metric:
        """A metric from what ``get_config`` returned.

        Raises:
            ValueError: a key its constructor does not take (named).
        """
        from tapefit.layers import serialization

        return serialization.from_constructor_config(cls, config)

    def _accumulate(self, values: np.ndarray, sample_weight: Any) -> None:
        """Adds ``values`` (one or more per sample), weighted by ``sample_weight`` (broadcast)."""
        values = np.asarray(values, dtype=np.float64)
        if sample_weight is None:
            self.total += float(values.sum())
            self.count += float(values.size)
            return
        weights = np.asarray(sample_weight, dtype=np.float64)
        while weights.ndim > values.ndim and weights.shape[-1] == 1:
            weights = weights[..., 0]
        try:
            weights = np.broadcast_to(
                weights.reshape(weights.shape + (1,) * (values.ndim - weights.ndim)), values.shape
            )
        except ValueError:
            raise ValueError(
                f"{self.name}: sample_weight of shape {np.shape(sample_weight)} does not fit values of shape {values.shape}"
            ) from None
        self.total += float((values * weights).sum())
        self.count += float(weights.sum())

    @_hosted
    def result(self) -> Tensor:
        """The weighted mean so far, as a float32 scalar Tensor (0 when nothing was added)."""
        return _wrap(np.asarray(self.total / self.count if self.count else 0.0, dtype=np.float32))

    @_hosted
    def reset_state(self) -> None:
        """Forgets every batch."""
        self.total = 0.0
        self.count = 0.0

    def get_state(self) -> dict[str, Any]:
        """The running state: the weighted ``total`` and the weight ``count`` (sums, so the
        states of several processes add up)."""
        return {"total": float(self.total), "count": float(self.count)}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what ``get_state`` returned."""
        self.total, self.count = float(state["total"]), float(state["count"])

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor:
        """Updates the state with one batch and returns ``result()``."""
        self.update_state(*args, **kwargs)
        return self.result()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} result={float(self.result()):.6g}>"


class Mean(Metric):
    """The (weighted) mean of every value given to ``update_state(values, sample_weight=None)``."""

    default_name = "mean"

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        """Adds ``values``."""
        self._accumulate(_array(values, "values", self.name), sample_weight)


class MeanMetricWrapper(Metric):
    """The mean of ``fn(y_true, y_pred)`` over every sample seen.

    Args:
        fn: ``fn(y_true, y_pred)`` returning per-sample (or per-element) values.
        name: the metric's name.
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        super().__init__(name or getattr(fn, "__name__", None))
        self.fn = fn

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch of targets and predictions."""
        self._accumulate(_array(self.fn(y_true, y_pred), "the values", self.name), sample_weight)


class Accuracy(Metric):
    """How often ``y_pred`` equals ``y_true`` exactly (elementwise)."""

    default_name = "accuracy"

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _same_rank(y_true, y_pred, self.name)
        self._accumulate(y_true == y_pred, sample_weight)


class BinaryAccuracy(Metric):
    """How often ``y_pred > threshold`` matches the 0/1 ``y_true``.

    Args:
        name: the metric's name.
        threshold: the decision threshold on ``y_pred`` (default 0.5, for probabilities).
    """

    default_name = "binary_accuracy"

    def __init__(self, name: str | None = None, threshold: float = 0.5) -> None:
        super().__init__(name)
        self.threshold = float(threshold)

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _same_rank(y_true, y_pred, self.name)
        self._accumulate(y_true.astype(np.float64) == (y_pred > self.threshold), sample_weight)


class CategoricalAccuracy(Metric):
    """How often the arg max of ``y_pred`` equals the arg max of the one-hot ``y_true``."""

    default_name = "categorical_accuracy"

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _array(y_true, "y_true", self.name), _array(y_pred, "y_pred", self.name)
        if y_true.shape != y_pred.shape or y_pred.ndim == 0:
            raise ValueError(
                f"{self.name}: y_true of shape {y_true.shape} does not match y_pred of shape {y_pred.shape} "
                "(for integer labels use SparseCategoricalAccuracy)"
            )
        self._accumulate(np.argmax(y_true, -1) == np.argmax(y_pred, -1), sample_weight)


class SparseCategoricalAccuracy(Metric):
    """How often the arg max of ``y_pred`` equals the integer label ``y_true``."""

    default_name = "sparse_categorical_accuracy"

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _array(y_true, "y_true", self.name), _array(y_pred, "y_pred", self.name)
        if y_pred.ndim == 0:
            raise ValueError(f"{self.name}: y_pred needs a class axis, got a scalar")
        if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
            y_true = y_true[..., 0]
        if y_true.shape != y_pred.shape[:-1]:
            raise ValueError(
                f"{self.name}: y_true of shape {y_true.shape} does not fit y_pred of shape {y_pred.shape}; expected "
                f"integer labels of shape {y_pred.shape[:-1]} (for one-hot targets use CategoricalAccuracy)"
            )
        self._accumulate(y_true == np.argmax(y_pred, -1), sample_weight)


class MeanSquaredError(Metric):
    """The mean of ``(y_true - y_pred) ** 2``."""

    default_name = "mean_squared_error"

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _same_rank(y_true, y_pred, self.name)
        self._accumulate(_per_sample(np.square(y_pred.astype(np.float64) - y_true)), sample_weight)


class MeanAbsoluteError(Metric):
    """The mean of ``|y_true - y_pred|``."""

    default_name = "mean_absolute_error"

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _same_rank(y_true, y_pred, self.name)
        self._accumulate(_per_sample(np.abs(y_pred.astype(np.float64) - y_true)), sample_weight)


def _per_sample(values: np.ndarray) -> np.ndarray:
    return values.mean(axis=-1) if values.ndim >= 2 else values


class _Accuracy(Metric):
    """``"accuracy"`` with no loss to go by: picks the kind on the first batch by the shapes, as Keras.

    A last axis of size 1 in ``y_pred`` means binary; ``y_true`` of lower rank (or
    with a last axis of size 1) against several classes means sparse labels; else one-hot.
    """

    default_name = "accuracy"

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.chosen: Metric | None = None

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        if self.chosen is None:
            t, p = np.shape(y_true), np.shape(y_pred)
            if p and p[-1] == 1:
                self.chosen = BinaryAccuracy(self.name)
            elif len(t) < len(p) or (t and t[-1] == 1 and p and p[-1] > 1):
                self.chosen = SparseCategoricalAccuracy(self.name)
            else:
                self.chosen = CategoricalAccuracy(self.name)
        self.chosen.update_state(y_true, y_pred, sample_weight)

    def result(self) -> Tensor:
        """The accuracy so far."""
        return super().result() if self.chosen is None else self.chosen.result()

    def reset_state(self) -> None:
        """Forgets every batch (the chosen kind is kept)."""
        if self.chosen is not None:
            self.chosen.reset_state()

    def get_state(self) -> dict[str, Any]:
        """The chosen kind (or ``None``) and its ``total`` and ``count``."""
        kind = None if self.chosen is None else type(self.chosen).__name__
        state = super().get_state() if self.chosen is None else self.chosen.get_state()
        return {"kind": kind, **state}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what ``get_state`` returned."""
        kinds = {c.__name__: c for c in (BinaryAccuracy, SparseCategoricalAccuracy, CategoricalAccuracy)}
        kind = state.get("kind")
        if kind is None:
            self.chosen = None
            super().set_state(state)
            return
        if kind not in kinds:
            raise ValueError(f"{self.name}: unknown accuracy kind {shown(kind)}; known: {sorted(kinds)}")
        if not isinstance(self.chosen, kinds[kind]):
            self.chosen = kinds[kind](self.name)
        self.chosen.set_state(state)


def _mean_of_loss(loss_name: str) -> Callable[[str], Metric]:
    """A metric factory: the mean of the loss ``loss_name`` per sample, as Keras names a loss as a metric."""

    def make(name: str) -> Metric:
        loss_fn = _losses.get(loss_name)
        assert isinstance(loss_fn, _losses.Loss)  # a registered name gives a new Loss
        loss_fn.reduction = "none"
        return MeanMetricWrapper(loss_fn, name)

    return make


_OWN: dict[str, Callable[[str], Metric]] = {
    "accuracy": _Accuracy,
    "acc": _Accuracy,
    "mean": Mean,
    "binary_accuracy": BinaryAccuracy,
    "categorical_accuracy": CategoricalAccuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "mse": MeanSquaredError,
    "mean_squared_error": MeanSquaredError,
    "mae": MeanAbsoluteError,
    "mean_absolute_error": MeanAbsoluteError,
}

registry: Registry[Callable[[str], Metric]] = Registry(
    "metric",
    {**_OWN, **{name: _mean_of_loss(name) for name in _losses.registry if name not in _OWN}},
)
"""The metrics by config name (``registry.names()``), loss names included; each entry takes the
metric's name."""

# "accuracy" follows the loss, as Keras's compile does. Unlike Keras, a binary loss on logits
# gets the threshold 0 (a logit > 0 is a probability > 0.5), not 0.5 (tensorflow#41413).
_ACCURACY_FOR_LOSS: dict[type, Callable[[str, Any], Metric]] = {
    _losses.SparseCategoricalCrossentropy: lambda name, loss: SparseCategoricalAccuracy(name),
    _losses.CategoricalCrossentropy: lambda name, loss: CategoricalAccuracy(name),
    _losses.BinaryCrossentropy: lambda name, loss: BinaryAccuracy(
        name, threshold=0.0 if loss.from_logits else 0.5
    ),
}


def get(identifier: str | Metric | Callable[..., Any], loss: Any = None) -> Metric:
    """A metric from a name, a Metric, or a function ``fn(y_true, y_pred) -> values``.

    ``"accuracy"`` (or ``"acc"``) picks the right kind for ``loss`` (a loss object or
    name): sparse categorical, categorical or binary accuracy (thresholding at 0 for a
    binary loss with ``from_logits=True``); without a known loss it
    decides by the shapes of the first batch, as Keras does. Other spellings of it
    (``"Accuracy"``) give Keras's ``Accuracy`` class (exact equality). Loss names
    (``"sparse_categorical_crossentropy"``, ...) give the mean of that loss. A metric
    made from a name is named by it.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: anything else.
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        make = registry.lookup(identifier)
        if make is _Accuracy:
            if identifier not in ("accuracy", "acc"):
                return Accuracy(identifier)
            loss_obj = _losses.get(loss) if isinstance(loss, str) else loss
            for loss_type, make_for_loss in _ACCURACY_FOR_LOSS.items():
                if isinstance(loss_obj, loss_type):
                    return make_for_loss(identifier, loss_obj)
        return make(identifier)
    if callable(identifier):
        return MeanMetricWrapper(identifier)
    raise TypeError(
        f"a metric must be a name, a Metric or a callable (y_true, y_pred) -> values, got {shown(identifier)}"
    )


__all__ = [
    "Accuracy",
    "BinaryAccuracy",
    "CategoricalAccuracy",
    "Mean",
    "MeanAbsoluteError",
    "MeanMetricWrapper",
    "MeanSquaredError",
    "Metric",
    "SparseCategoricalAccuracy",
    "get",
    "registry",
]
