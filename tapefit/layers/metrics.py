"""Streaming metrics (``tp.metrics``), as in Keras: ``update_state``, ``result``, ``reset_state``.

A mean-like metric accumulates a weighted sum and a weight total in two float64 Variables
(read as the floats ``total`` and ``count``; metrics are never differentiated, so no tape
records their ops);
``result()`` is their ratio as a float32 scalar Tensor (0 before any update). A metric may also
keep state variables made with ``add_variable`` (Keras 3's way: ``assign_add`` in
``update_state``, ``result()`` from them); the confusion-matrix metrics (``AUC``,
``Precision``, ``Recall``) and the F-scores keep their counts that way. Every state variable is
part of ``get_state``, so checkpoints resume it.

The built-in metrics compute with tapefit ops and ``assign*`` alone, so a ``tp.function`` (a
compiled training step) traces their updates and results into its replay. A subclass's own
``update_state``, ``result`` and ``reset_state``, which may compute in NumPy, run as host calls
instead: Python again on every replay, with that call's values.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.function import guard, host_call, tracing, unchanged
from tapefit.core.messages import shown
from tapefit.core.naming import Registry
from tapefit.core.ops import math as _math
from tapefit.core.ops import reduce as _reduce
from tapefit.core.ops import shape as _shape
from tapefit.core.record import active_tapes, pause_recording
from tapefit.core.registry import OpDef, execute, not_differentiable
from tapefit.core.tensor import Tensor, Variable
from tapefit.layers import losses as _losses


def _tensor(value: Any, what: str, metric: str) -> Tensor:
    """``value`` as a Tensor: a Tensor as it is, anything else read by ``np.asarray`` (so Python
    floats stay float64)."""
    if isinstance(value, Tensor):
        return value
    try:
        return Tensor(np.asarray(value))
    except (TypeError, ValueError) as error:
        raise TypeError(f"{metric}: cannot read {what} as an array ({error})") from None


def _common(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``a`` and ``b`` cast to the dtype NumPy would compare them in."""
    dtype = np.result_type(a.dtype, b.dtype)
    return _math.cast(a, dtype), _math.cast(b, dtype)


def _drop_last(t: Tensor) -> Tensor:
    return _shape.reshape(t, t.shape[:-1])


def _same_rank(y_true: Any, y_pred: Any, metric: str) -> tuple[Tensor, Tensor]:
    """``y_true`` and ``y_pred`` as Tensors, with a trailing size-1 axis dropped from the one of
    higher rank (Keras's rule); then checks the shapes."""
    y_true, y_pred = _tensor(y_true, "y_true", metric), _tensor(y_pred, "y_pred", metric)
    if y_true.ndim == y_pred.ndim + 1 and y_true.shape[-1] == 1:
        y_true = _drop_last(y_true)
    elif y_pred.ndim == y_true.ndim + 1 and y_pred.shape[-1] == 1:
        y_pred = _drop_last(y_pred)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"{metric}: y_true has shape {y_true.shape} but y_pred has shape {y_pred.shape}")
    return y_true, y_pred


def _weights_shape(weights: tuple[int, ...], values: tuple[int, ...], metric: str) -> tuple[int, ...]:
    """The shape that sample weights of shape ``weights`` take to broadcast over values of
    shape ``values``: trailing size-1 axes beyond the values' rank dropped, then size-1 axes
    added after the given ones (weights per sample cover all of a sample's values)."""
    shape = tuple(weights)
    while len(shape) > len(values) and shape[-1] == 1:
        shape = shape[:-1]
    shape += (1,) * (len(values) - len(shape))
    try:
        fits = np.broadcast_shapes(shape, values) == tuple(values)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{metric}: sample_weight of shape {weights} does not fit values of shape {values}")
    return shape


def _weights_like(sample_weight: Any, values: Tensor, metric: str) -> Tensor:
    """``sample_weight`` as float64, broadcast to ``values``'s shape (see ``_weights_shape``)."""
    weights = _math.cast(_tensor(sample_weight, "sample_weight", metric), _dt.float64)
    shape = _weights_shape(tuple(weights.shape), tuple(values.shape), metric)
    return _shape.broadcast_to(_shape.reshape(weights, shape), tuple(values.shape))


def _call_method(method: Callable[..., Any], metric: Metric, args: Any, kwargs: Any) -> Any:
    out = method(metric, *args, **kwargs)
    # A trace follows a Tensor a host call returns; a Python or NumPy number would be frozen.
    return (
        _tensor(out, "the result", metric.name)
        if isinstance(out, (int, float, np.number, np.ndarray))
        else out
    )


def trace_aware(method: Any) -> bool:
    """Whether a ``tp.function`` trace may call ``method`` (a function or a bound method) as it
    is: its ops run in the replay (``_in_replay``), or it arranges its own host call (``_hosted``)."""
    function = getattr(method, "__func__", method)
    return bool(getattr(function, "_tapefit_in_replay", False) or getattr(function, "_tapefit_hosted", False))


def _hosted(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` as a ``tp.function`` trace records it: a host call, run on every replay with
    that call's values (it may compute in NumPy, which a trace cannot follow)."""
    if trace_aware(method):
        return method

    @functools.wraps(method)
    def hosted(self: Metric, *args: Any, **kwargs: Any) -> Any:
        if tracing():
            return host_call(_call_method, method, self, args, kwargs)
        return method(self, *args, **kwargs)

    hosted._tapefit_hosted = True  # type: ignore[attr-defined]
    return hosted


def _in_replay(method: Callable[..., Any]) -> Callable[..., Any]:
    """Marks a metric method made of tapefit ops and assignments alone: a ``tp.function`` traces
    it into its replay instead of calling it as Python on every call (see ``_hosted``). The
    trace then holds the metric's settings as they were (a threshold, ``k``, a curve): a
    replay first checks that they still are, and traces again if one changed."""

    @functools.wraps(method)
    def traced(self: Metric, *args: Any, **kwargs: Any) -> Any:
        if tracing():
            guard(_settings_unchanged(self))
        if active_tapes:  # a metric is never differentiated: keep its ops off the tapes
            with pause_recording():
                return method(self, *args, **kwargs)
        return method(self, *args, **kwargs)

    traced._tapefit_in_replay = True  # type: ignore[attr-defined]
    return traced


_PLAIN_SETTINGS = (type(None), bool, int, float, str, tuple, list)
_SETTING_NAMES: dict[type, tuple[str, ...]] = {}


def _settings_unchanged(metric: Metric) -> Callable[[], bool]:
    """A guard's check: each constructor argument the metric keeps as an attribute of its name
    (its config) still holds what it holds now. Arrays are left out (no cheap comparison)."""
    cls = type(metric)
    names = _SETTING_NAMES.get(cls)
    if names is None:
        # Every class's constructor up to Metric: a subclass may fix a setting it does not take.
        found = {
            p.name: None
            for klass in cls.__mro__
            if issubclass(klass, Metric) and "__init__" in klass.__dict__
            for p in inspect.signature(klass.__dict__["__init__"]).parameters.values()
            if p.name not in ("self", "name", "dtype") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        names = _SETTING_NAMES[cls] = tuple(found)
    watched = [
        (metric, n)
        for n in names
        if isinstance(getattr(metric, n, np), _PLAIN_SETTINGS) or callable(getattr(metric, n, None))
    ]
    return unchanged(*watched)


def _zeros(variables: list[Variable]) -> None:
    for variable in variables:
        variable.assign(np.zeros(variable.shape, variable.dtype))


class Metric:
    """Base class of streaming metrics.

    ``total`` and ``count`` (the weighted sum and the weight total of a mean-like metric) read
    and set two float64 Variables as floats, which the built-in metrics update with tapefit
    ops; ``result`` is their ratio. A subclass may set them to Variables of its own (Keras 3's
    ``self.total = self.add_variable(...)``), which they then hold.
    The built-in metrics update and read their state inside a ``tp.function``'s replay. A
    subclass's own ``update_state``, ``result`` and ``reset_state`` run as host calls there
    (they may compute in NumPy): a compiled training step updates its metrics on every call.

    A subclass may keep its state in variables made with ``add_variable`` (zeros by
    default); the base ``reset_state`` sets them back to zero, and ``get_state`` holds them.

    Args:
        name: the metric's name (the key in training logs).
        dtype: the dtype of the state variables ``add_variable`` makes (default float32).
    """

    default_name = "metric"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("update_state", "result", "reset_state"):
            if name in cls.__dict__:
                setattr(cls, name, _hosted(cls.__dict__[name]))

    def __init__(self, name: str | None = None, dtype: Any = None) -> None:
        self.name = name or self.default_name
        self.dtype = None if dtype is None else _dt.as_dtype(dtype).name
        self._sums = (
            Variable(np.float64(0.0), trainable=False, name="total"),
            Variable(np.float64(0.0), trainable=False, name="count"),
        )

    @property
    def total(self) -> Any:
        """The weighted sum of the values so far (a float; or what a subclass set it to)."""
        return self._get_sum(0, "total")

    @total.setter
    def total(self, value: Any) -> None:
        self._set_sum(0, "total", value)

    @property
    def count(self) -> Any:
        """The sum of the weights so far (the number of values, unweighted; a float; or what a
        subclass set it to)."""
        return self._get_sum(1, "count")

    @count.setter
    def count(self, value: Any) -> None:
        self._set_sum(1, "count", value)

    def _get_sum(self, index: int, name: str) -> Any:
        own = self.__dict__.get("_own_sums")
        if own is not None and name in own:
            return own[name]
        return float(self._sums[index]._value)

    def _set_sum(self, index: int, name: str, value: Any) -> None:
        """A number goes into the float64 Variable (or a Variable the subclass put there); a
        subclass's own Variable or array (Keras 3's ``self.total = self.add_variable(...)``)
        is kept as it is, and read back as it is."""
        own = self.__dict__.setdefault("_own_sums", {})
        number = isinstance(value, (int, float, np.number)) or (
            isinstance(value, np.ndarray) and value.ndim == 0
        )
        if not number:
            own[name] = value
        elif isinstance(own.get(name), Variable):
            own[name].assign(np.asarray(value, own[name].dtype))
        else:
            own.pop(name, None)
            self._sums[index].assign(np.float64(value))

    @property
    def variables(self) -> list[Variable]:
        """The state variables ``add_variable`` made, in order."""
        return list(self.__dict__.get("_state_variables", []))

    def add_variable(
        self,
        shape: Any,
        initializer: Any,
        dtype: Any = None,
        aggregation: str = "sum",
        name: str | None = None,
    ) -> Variable:
        """A state variable of this metric (Keras 3's ``Metric.add_variable``): not trainable,
        part of ``get_state`` (so checkpointed), set to zero by ``reset_state``.

        Args:
            shape: its shape (``()`` or ``None`` for a scalar).
            initializer: an initializer or its name (``"zeros"``).
            dtype: its dtype (default: the metric's, float32).
            aggregation: how processes combine it (``"sum"``, ``"mean"``, ...; kept for Keras's
                signature: tapefit sums only ``total`` and ``count`` across processes).
            name: its name.
        """
        from tapefit.layers import initializers

        shape = () if shape is None else tuple(int(n) for n in shape)
        dtype = _dt.as_dtype(dtype if dtype is not None else self.__dict__.get("dtype") or _dt.float32)
        value = initializers.get(initializer)(shape, dtype)
        variable = Variable(value, trainable=False, name=name or "variable", dtype=dtype)
        self.__dict__.setdefault("_state_variables", []).append(variable)
        return variable

    def add_weight(
        self, shape: Any = (), initializer: Any = "zeros", dtype: Any = None, name: str | None = None
    ) -> Variable:
        """``add_variable`` under Keras's older name."""
        return self.add_variable(shape, initializer, dtype=dtype, name=name)

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

    def _accumulate(self, values: Any, sample_weight: Any) -> None:
        """Adds ``values`` (one or more per sample), weighted by ``sample_weight`` (broadcast)."""
        values = _math.cast(_tensor(values, "the values", self.name), _dt.float64)
        total, count = self._sums
        if sample_weight is None:
            total.assign_add(_reduce.reduce_sum(values))
            count.assign_add(np.float64(values.size))
            return
        weights = _weights_like(sample_weight, values, self.name)
        total.assign_add(_reduce.reduce_sum(values * weights))
        count.assign_add(_reduce.reduce_sum(weights))

    def _mean(self) -> Tensor:
        """``total / count`` in float64 (0 when nothing was added)."""
        total, count = self._sums
        return _divide_no_nan(total, count)

    @_in_replay
    def result(self) -> Tensor:
        """The weighted mean so far, as a float32 scalar Tensor (0 when nothing was added)."""
        return _math.cast(self._mean(), _dt.float32)

    @_in_replay
    def reset_state(self) -> None:
        """Forgets every batch: ``total`` and ``count``, and each state variable set to zero."""
        variables = self.variables
        # A replay resets the variables the metric had when traced: trace again when it has others.
        guard(lambda: len(self.__dict__.get("_state_variables", ())) == len(variables))
        _zeros([*self._sums, *variables])

    def get_state(self) -> dict[str, Any]:
        """The running state: the weighted ``total`` and the weight ``count`` (sums, so the
        states of several processes add up), and the state variables' values (``variables``,
        in the order ``add_variable`` made them) when there are any."""
        state: dict[str, Any] = {"total": float(self.total), "count": float(self.count)}
        if self.variables:
            state["variables"] = [np.array(v.numpy(), copy=True) for v in self.variables]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what ``get_state`` returned.

        Raises:
            ValueError: the state's variables do not match this metric's (count or shapes).
        """
        self.total, self.count = float(state["total"]), float(state["count"])
        values = state.get("variables", [])
        if len(values) != len(self.variables) and (values or self.variables):
            raise ValueError(
                f"{self.name}: the state holds {len(values)} variables, the metric has {len(self.variables)}"
            )
        for variable, value in zip(self.variables, values):
            value = np.asarray(value)
            if value.shape != tuple(variable.shape):
                raise ValueError(
                    f"{self.name}: a state variable of shape {value.shape} for {variable.name!r} of shape "
                    f"{tuple(variable.shape)}"
                )
            variable.assign(value.astype(variable.dtype))

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor:
        """Updates the state with one batch and returns ``result()``."""
        self.update_state(*args, **kwargs)
        return self.result()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} result={float(self.result()):.6g}>"


class Mean(Metric):
    """The (weighted) mean of every value given to ``update_state(values, sample_weight=None)``."""

    default_name = "mean"

    @_in_replay
    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        """Adds ``values``, weighted by ``sample_weight`` (broadcast to them) when given."""
        self._accumulate(_tensor(values, "values", self.name), sample_weight)


def _replay_safe(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` computes with tapefit ops alone, so a trace may follow it: a tapefit
    ``Loss`` or loss function. Anything else may compute in NumPy."""
    if isinstance(fn, _losses.Loss):
        return type(fn).__module__ == _losses.__name__
    return inspect.isfunction(fn) and fn.__module__ == _losses.__name__ and fn.__name__ in _losses.__all__


class MeanMetricWrapper(Metric):
    """The mean of ``fn(y_true, y_pred)`` over every sample seen.

    A tapefit loss (``tp.losses.MeanSquaredError(reduction="none")``, ``tp.losses.mean_squared_error``)
    runs in a compiled step's replay; any other ``fn`` runs as Python on every call (it may use
    NumPy), and only the averaging in the replay.

    Args:
        fn: ``fn(y_true, y_pred)`` returning per-sample (or per-element) values.
        name: the metric's name.
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        super().__init__(name or getattr(fn, "__name__", None))
        self.fn = fn

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch of targets and predictions."""
        if _replay_safe(self.fn):
            self._accumulate(_tensor(self.fn(y_true, y_pred), "the values", self.name), sample_weight)
        else:  # one host call: fn may give another number of values on every call
            host_call(self._add_values_of_fn, y_true, y_pred, sample_weight)

    def _add_values_of_fn(self, y_true: Any, y_pred: Any, sample_weight: Any) -> None:
        self._accumulate(_tensor(self.fn(y_true, y_pred), "the values", self.name), sample_weight)


class Accuracy(Metric):
    """How often ``y_pred`` equals ``y_true`` exactly (elementwise)."""

    default_name = "accuracy"

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch (numbers, or strings: those are compared as Python code, no Tensor holds them)."""
        if _text(y_true) or _text(y_pred):
            host_call(self._add_text_matches, y_true, y_pred, sample_weight)
            return
        y_true, y_pred = _same_rank(y_true, y_pred, self.name)
        self._accumulate(_math.equal(*_common(y_true, y_pred)), sample_weight)

    def _add_text_matches(self, y_true: Any, y_pred: Any, sample_weight: Any) -> None:
        t, p = np.asarray(y_true), np.asarray(y_pred)
        if t.ndim == p.ndim + 1 and t.shape[-1] == 1:
            t = t[..., 0]
        elif p.ndim == t.ndim + 1 and p.shape[-1] == 1:
            p = p[..., 0]
        if t.shape != p.shape:
            raise ValueError(f"{self.name}: y_true has shape {t.shape} but y_pred has shape {p.shape}")
        self._accumulate(t == p, sample_weight)


def _text(value: Any) -> bool:
    """Whether ``value`` holds strings (a list of them, or an array of strings)."""
    if isinstance(value, Tensor):
        return False
    return np.asarray(value).dtype.kind in "USO"


def _floating(t: Tensor) -> Tensor:
    """``t``, or ``t`` as float64 when it is not floating (as NumPy compares it with a float)."""
    return t if t.dtype.kind == "f" else _math.cast(t, _dt.float64)


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

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _same_rank(y_true, y_pred, self.name)
        predicted = _math.cast(_math.greater(_floating(y_pred), self.threshold), _dt.float64)
        self._accumulate(_math.equal(_math.cast(y_true, _dt.float64), predicted), sample_weight)


def _class_axis(y_pred: Tensor, metric: str) -> None:
    if y_pred.ndim == 0:
        raise ValueError(f"{metric}: y_pred needs a class axis, got a scalar")


def _sparse_labels(y_true: Any, y_pred: Tensor, metric: str, hint: str) -> Tensor:
    """Integer labels of ``y_pred.shape[:-1]`` (a trailing axis of size 1 dropped), shapes checked."""
    y_true = _tensor(y_true, "y_true", metric)
    _class_axis(y_pred, metric)
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
        y_true = _drop_last(y_true)
    if y_true.shape != y_pred.shape[:-1]:
        raise ValueError(
            f"{metric}: y_true of shape {y_true.shape} does not fit y_pred of shape {y_pred.shape}; expected "
            f"integer labels of shape {y_pred.shape[:-1]}{hint}"
        )
    return y_true


def _one_hot_targets(y_true: Any, y_pred: Any, metric: str, sparse: str) -> tuple[Tensor, Tensor]:
    y_true, y_pred = _tensor(y_true, "y_true", metric), _tensor(y_pred, "y_pred", metric)
    if y_true.shape != y_pred.shape or y_pred.ndim == 0:
        raise ValueError(
            f"{metric}: y_true of shape {y_true.shape} does not match y_pred of shape {y_pred.shape} "
            f"(for integer labels use {sparse})"
        )
    return y_true, y_pred


class CategoricalAccuracy(Metric):
    """How often the arg max of ``y_pred`` equals the arg max of the one-hot ``y_true``."""

    default_name = "categorical_accuracy"

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _one_hot_targets(y_true, y_pred, self.name, "SparseCategoricalAccuracy")
        hits = _math.equal(_reduce.argmax(y_true, -1), _reduce.argmax(y_pred, -1))
        self._accumulate(hits, sample_weight)


class SparseCategoricalAccuracy(Metric):
    """How often the arg max of ``y_pred`` equals the integer label ``y_true``."""

    default_name = "sparse_categorical_accuracy"

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_pred = _tensor(y_pred, "y_pred", self.name)
        labels = _sparse_labels(y_true, y_pred, self.name, " (for one-hot targets use CategoricalAccuracy)")
        self._accumulate(_math.equal(*_common(labels, _reduce.argmax(y_pred, -1))), sample_weight)


def _per_sample(values: Tensor) -> Tensor:
    return _reduce.reduce_mean(values, axis=-1) if values.ndim >= 2 else values


def _error(y_true: Any, y_pred: Any, metric: str) -> Tensor:
    """``y_pred - y_true`` in float64, of the shapes ``_same_rank`` made one."""
    y_true, y_pred = _same_rank(y_true, y_pred, metric)
    return _math.cast(y_pred, _dt.float64) - _math.cast(y_true, _dt.float64)


class MeanSquaredError(Metric):
    """The mean of ``(y_true - y_pred) ** 2``."""

    default_name = "mean_squared_error"

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        self._accumulate(_per_sample(_math.square(_error(y_true, y_pred, self.name))), sample_weight)


class MeanAbsoluteError(Metric):
    """The mean of ``|y_true - y_pred|``."""

    default_name = "mean_absolute_error"

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        self._accumulate(_per_sample(_math.abs(_error(y_true, y_pred, self.name))), sample_weight)


class _Accuracy(Metric):
    """``"accuracy"`` with no loss to go by: picks the kind on the first batch by the shapes, as Keras.

    A last axis of size 1 in ``y_pred`` means binary; ``y_true`` of lower rank (or
    with a last axis of size 1) against several classes means sparse labels; else one-hot.
    """

    default_name = "accuracy"

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.chosen: Metric | None = None

    def _keep_choice(self) -> None:
        # A replay works on the kind chosen when traced: trace again when set_state changes it.
        guard(unchanged((self, "chosen")))

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        if self.chosen is None:
            t = _tensor(y_true, "y_true", self.name).shape
            p = _tensor(y_pred, "y_pred", self.name).shape
            if p and p[-1] == 1:
                self.chosen = BinaryAccuracy(self.name)
            elif len(t) < len(p) or (t and t[-1] == 1 and p and p[-1] > 1):
                self.chosen = SparseCategoricalAccuracy(self.name)
            else:
                self.chosen = CategoricalAccuracy(self.name)
        self._keep_choice()
        self.chosen.update_state(y_true, y_pred, sample_weight)

    @_in_replay
    def result(self) -> Tensor:
        """The accuracy so far."""
        self._keep_choice()
        return super().result() if self.chosen is None else self.chosen.result()

    @_in_replay
    def reset_state(self) -> None:
        """Forgets every batch (the chosen kind is kept)."""
        self._keep_choice()
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


# -- the Keras metrics built on the mean -------------------------------------------------


class RootMeanSquaredError(Metric):
    """The square root of the (weighted) mean of ``(y_true - y_pred) ** 2`` over every element.

    Args:
        name: the metric's name.
        dtype: see ``Metric``.
    """

    default_name = "root_mean_squared_error"

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        self._accumulate(_math.square(_error(y_true, y_pred, self.name)), sample_weight)

    @_in_replay
    def result(self) -> Tensor:
        """The root of the mean so far (0 when nothing was added)."""
        return _math.cast(_math.sqrt(self._mean()), _dt.float32)


class MeanAbsolutePercentageError(Metric):
    """The mean of ``100 * |y_true - y_pred| / max(|y_true|, 1e-7)`` (per sample over the last axis).

    Args:
        name: the metric's name.
        dtype: see ``Metric``.
    """

    default_name = "mean_absolute_percentage_error"

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _same_rank(y_true, y_pred, self.name)
        y_true, y_pred = _math.cast(y_true, _dt.float64), _math.cast(y_pred, _dt.float64)
        error = _math.abs((y_true - y_pred) / _math.maximum(_math.abs(y_true), _losses.EPSILON))
        self._accumulate(100.0 * _per_sample(error), sample_weight)


class _LossMetric(Metric):
    """The (weighted) mean of a loss's per-sample values, the loss made from this metric's arguments."""

    loss_class: type[_losses.Loss] = _losses.Loss

    def _loss(self) -> _losses.Loss:
        raise NotImplementedError

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_pred = _math.cast(_tensor(y_pred, "y_pred", self.name), _dt.float32)
        self._accumulate(self._loss()(y_true, y_pred), sample_weight)


class BinaryCrossentropy(_LossMetric):
    """The mean binary cross-entropy per sample (``tp.losses.BinaryCrossentropy``'s values).

    Args:
        name: the metric's name.
        dtype: see ``Metric``.
        from_logits: whether ``y_pred`` holds logits.
        label_smoothing: squeezes the targets towards 0.5.
    """

    default_name = "binary_crossentropy"

    def __init__(
        self,
        name: str | None = None,
        dtype: Any = None,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(name, dtype)
        self.from_logits = bool(from_logits)
        self.label_smoothing = float(label_smoothing)

    def _loss(self) -> _losses.Loss:
        return _losses.BinaryCrossentropy(self.from_logits, self.label_smoothing, reduction="none")


class CategoricalCrossentropy(_LossMetric):
    """The mean categorical cross-entropy per sample (``tp.losses.CategoricalCrossentropy``'s values).

    Args:
        name: the metric's name.
        dtype: see ``Metric``.
        from_logits: whether ``y_pred`` holds logits.
        label_smoothing: mixes the targets with the uniform distribution.
        axis: the class axis.
    """

    default_name = "categorical_crossentropy"

    def __init__(
        self,
        name: str | None = None,
        dtype: Any = None,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
    ) -> None:
        super().__init__(name, dtype)
        self.from_logits = bool(from_logits)
        self.label_smoothing = float(label_smoothing)
        self.axis = int(axis)

    def _loss(self) -> _losses.Loss:
        return _losses.CategoricalCrossentropy(
            self.from_logits, self.label_smoothing, self.axis, reduction="none"
        )


def _in_top_k(scores: Tensor, targets: Tensor, k: int) -> Tensor:
    """Whether each target class is among the ``k`` highest scores of its row: fewer than ``k``
    classes score strictly higher (ties at the boundary count as in, as TensorFlow's ``in_top_k``)."""
    # A target outside the classes is never in the top k (as TensorFlow's in_top_k).
    valid = _math.logical_and(_math.greater_equal(targets, 0), _math.less(targets, scores.shape[-1]))
    index = _shape.reshape(_math.where(valid, targets, 0), (*targets.shape, 1))
    target_scores = _shape.gather(scores, index, axis=-1, batch_dims=targets.ndim)
    higher = _reduce.reduce_sum(_math.greater(scores, target_scores), axis=-1)
    return _math.logical_and(valid, _math.less(higher, k))


class TopKCategoricalAccuracy(Metric):
    """How often the one-hot ``y_true``'s class is among the ``k`` highest scores of ``y_pred``.

    Args:
        k: how many of the highest scores count (default 5).
        name: the metric's name.
        dtype: see ``Metric``.
    """

    default_name = "top_k_categorical_accuracy"

    def __init__(self, k: int = 5, name: str | None = None, dtype: Any = None) -> None:
        super().__init__(name, dtype)
        self.k = int(k)

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_true, y_pred = _one_hot_targets(y_true, y_pred, self.name, "SparseTopKCategoricalAccuracy")
        scores = _math.cast(y_pred, _dt.float32)
        self._accumulate(_in_top_k(scores, _reduce.argmax(y_true, -1), self.k), sample_weight)


class SparseTopKCategoricalAccuracy(Metric):
    """How often the integer label ``y_true`` is among the ``k`` highest scores of ``y_pred``.

    Args:
        k: how many of the highest scores count (default 5).
        name: the metric's name.
        dtype: see ``Metric``.
        from_sorted_ids: ``y_pred`` holds class ids sorted by score (the top ones first), not scores.
    """

    default_name = "sparse_top_k_categorical_accuracy"

    def __init__(
        self, k: int = 5, name: str | None = None, dtype: Any = None, from_sorted_ids: bool = False
    ) -> None:
        super().__init__(name, dtype)
        self.k = int(k)
        self.from_sorted_ids = bool(from_sorted_ids)

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch."""
        y_pred = _tensor(y_pred, "y_pred", self.name)
        labels = _math.cast(_sparse_labels(y_true, y_pred, self.name, ""), _dt.int64)
        if self.from_sorted_ids:
            top = _math.cast(y_pred[..., : self.k], _dt.int64)
            hits = _reduce.reduce_any(_math.equal(top, _shape.reshape(labels, (*labels.shape, 1))), axis=-1)
        else:
            hits = _in_top_k(_math.cast(y_pred, _dt.float32), labels, self.k)
        self._accumulate(hits, sample_weight)


# -- the confusion-matrix metrics ----------------------------------------------------------

_NEG_INF = -1e10  # Keras's stand-in for minus infinity: the predictions outside the top k


def _thresholds(thresholds: Any, default: float) -> list[float]:
    if thresholds is None:
        return [default]
    values = [
        float(t) for t in (thresholds if isinstance(thresholds, (list, tuple, np.ndarray)) else [thresholds])
    ]
    if any(not 0.0 <= t <= 1.0 for t in values):
        raise ValueError(f"thresholds must lie in [0, 1], got {values}")
    return values


def _evenly_spaced(thresholds: list[float]) -> bool:
    """Whether ``thresholds`` are ``0, 1/(n-1), ..., 1`` (to within 1e-7), which Keras counts by buckets."""
    n = len(thresholds)
    if n < 3:
        return False
    even = np.arange(n, dtype=np.float32) / (n - 1)
    return bool(np.allclose(thresholds, even, atol=1e-7))


def _with_last(t: Tensor) -> Tensor:
    return _shape.reshape(t, (*t.shape, 1))


def _same_rank_float(y_true: Any, y_pred: Any, metric: str) -> tuple[Tensor, Tensor]:
    """``y_true`` and ``y_pred`` as float32 of one rank: a trailing axis of size 1 dropped from the
    one of higher rank, or (ranks apart by one otherwise) one added to the one of lower rank."""
    y_true = _math.cast(_tensor(y_true, "y_true", metric), _dt.float32)
    y_pred = _math.cast(_tensor(y_pred, "y_pred", metric), _dt.float32)
    if y_true.ndim == y_pred.ndim + 1:
        y_true = _drop_last(y_true) if y_true.shape[-1] == 1 else y_true
        y_pred = y_pred if y_true.ndim == y_pred.ndim else _with_last(y_pred)
    elif y_pred.ndim == y_true.ndim + 1:
        y_pred = _drop_last(y_pred) if y_pred.shape[-1] == 1 else y_pred
        y_true = y_true if y_true.ndim == y_pred.ndim else _with_last(y_true)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"{metric}: y_true has shape {y_true.shape} but y_pred has shape {y_pred.shape}")
    return y_true, y_pred


def _bucket_counts(buckets: Tensor, weights: Tensor, n: int) -> Tensor:
    """The weight of the predictions in each of ``n`` buckets (a negative bucket counts in none),
    then summed from the top down: a prediction in bucket b is above thresholds 0..b. Per label
    (shape ``(n, labels)``) for 2-D ``weights``."""
    if weights.ndim == 1:
        per_bucket = _reduce.unsorted_segment_sum(weights, buckets, n)
    else:
        labels = weights.shape[1]
        # one segment per (bucket, label): bucket * labels + label
        ids = _math.where(buckets >= 0, buckets * labels + np.arange(labels, dtype=np.int64), -1)
        per_bucket = _shape.reshape(_reduce.unsorted_segment_sum(weights, ids, n * labels), (n, labels))
    return _reduce.cumsum(per_bucket, 0, reverse=True)


def _confusion_counts(
    y_true: Tensor,
    y_pred: Tensor,
    thresholds: np.ndarray,
    weights: Tensor | None,
    evenly: bool,
    multi_label: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(tp, fp, tn, fn)`` of a batch at each threshold (a prediction is positive when it is
    greater than the threshold; a label is positive when it is not 0), weighted (float64); per
    label (shape ``(thresholds, labels)``) with ``multi_label``, else over every element;
    ``weights`` of ``y_pred``'s shape, or ``None`` for ones.

    With evenly spaced thresholds, the predictions are clipped to ``[0, 1]`` and counted by
    bucket, as Keras does (the outer thresholds ``-1e-7`` and ``1 + 1e-7`` taking every
    prediction in ``[0, 1]`` and none)."""
    positive = _math.cast(_math.not_equal(y_true, 0.0), _dt.float64)
    shape = (-1,) if not multi_label else (-1, y_pred.shape[-1])
    positive, y_pred = _shape.reshape(positive, shape), _shape.reshape(y_pred, shape)
    true_w, false_w = positive, 1.0 - positive
    if weights is not None:
        weights = _shape.reshape(weights, shape)
        true_w, false_w = true_w * weights, false_w * weights
    n = len(thresholds)
    if evenly:
        with_epsilon = thresholds[0] < 0.0 or thresholds[-1] > 1.0
        y_pred = _math.clip_by_value(y_pred, 0.0, 1.0)
        # ceil(y * (n - 1)) - 1, as -1 - floor(y * -(n - 1)): the same bits in fewer ops
        raw = -1.0 - _math.floor(y_pred * np.float32(1 - n))
        buckets = _math.cast(_math.maximum(raw, 0.0) if with_epsilon else raw, _dt.int64)
        tp, fp = _bucket_counts(buckets, true_w, n), _bucket_counts(buckets, false_w, n)
    else:
        cut = thresholds.astype(np.float32).reshape((n,) + (1,) * y_pred.ndim)
        above = _math.cast(_math.greater(y_pred, cut), _dt.float64)
        tp = _reduce.reduce_sum(above * true_w, axis=1)
        fp = _reduce.reduce_sum(above * false_w, axis=1)
    return tp, fp, _reduce.reduce_sum(false_w, axis=0) - fp, _reduce.reduce_sum(true_w, axis=0) - tp


def _weights_of(sample_weight: Any, y_pred: Tensor, metric: str) -> Tensor | None:
    """``sample_weight`` (one per sample, or of ``y_pred``'s rank) broadcast to ``y_pred``'s
    shape, as float64; ``None`` without it."""
    if sample_weight is None:
        return None
    weights = _math.cast(_tensor(sample_weight, "sample_weight", metric), _dt.float64)
    shape = tuple(weights.shape)
    while len(shape) > y_pred.ndim and shape[-1] == 1:
        shape = shape[:-1]
    shape += (1,) * (y_pred.ndim - len(shape))
    try:
        fits = np.broadcast_shapes(shape, y_pred.shape) == y_pred.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"{metric}: sample_weight of shape {tuple(weights.shape)} does not fit y_pred of shape {y_pred.shape}"
        )
    return _shape.broadcast_to(_shape.reshape(weights, shape), y_pred.shape)


def _top_k_mask(y_pred: np.ndarray, k: int) -> np.ndarray:
    order = np.argsort(-y_pred, axis=-1, kind="stable")[..., :k]
    keep = np.zeros(y_pred.shape, bool)
    np.put_along_axis(keep, order, True, axis=-1)
    return keep


_TOP_K_MASK = OpDef("TopKMask", _top_k_mask, save="")
not_differentiable("TopKMask")


def _top_k_only(y_pred: Tensor, k: int) -> Tensor:
    """``y_pred`` with every value outside the ``k`` highest of its last axis set to -1e10 (ties
    kept in the order of the axis, as a stable sort keeps them)."""
    return _math.where(execute(_TOP_K_MASK, (y_pred,), {"k": int(k)}), y_pred, _NEG_INF)


class _Confusion(Metric):
    """Precision and Recall: true and false positives (or negatives) at each threshold, kept in
    state variables, with Keras's ``thresholds``, ``top_k`` and ``class_id``."""

    def __init__(
        self,
        thresholds: Any = None,
        top_k: int | None = None,
        class_id: int | None = None,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name, dtype)
        self.thresholds = (
            thresholds if thresholds is None or isinstance(thresholds, float) else list(thresholds)
        )
        self.top_k = None if top_k is None else int(top_k)
        self.class_id = None if class_id is None else int(class_id)
        self._thresholds = _thresholds(thresholds, 0.5 if top_k is None else _NEG_INF)
        self._evenly = _evenly_spaced(self._thresholds)
        size = (len(self._thresholds),)
        self.true_positives = self.add_variable(size, "zeros", name="true_positives")
        self.other = self.add_variable(size, "zeros", name=self._other_name)

    _other_name = "false_positives"

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch (``y_true`` is read as booleans: nonzero is positive)."""
        y_true, y_pred = _same_rank_float(y_true, y_pred, self.name)
        weights = _weights_of(sample_weight, y_pred, self.name)
        if self.top_k is not None:
            _class_axis(y_pred, self.name)
            y_pred = _top_k_only(y_pred, self.top_k)
        if self.class_id is not None:
            if y_pred.ndim < 2:
                raise ValueError(
                    f"{self.name}: class_id needs y_pred of shape (samples, classes), got {y_pred.shape}"
                )
            index = (..., slice(self.class_id, self.class_id + 1))
            y_true, y_pred = y_true[index], y_pred[index]
            weights = None if weights is None else weights[index]
        tp, fp, _, fn = _confusion_counts(
            y_true, y_pred, np.asarray(self._thresholds), weights, self._evenly, multi_label=False
        )
        self.true_positives.assign_add(_math.cast(tp, _dt.float32))
        other = fp if self._other_name == "false_positives" else fn
        self.other.assign_add(_math.cast(other, _dt.float32))

    @_in_replay
    def result(self) -> Tensor:
        """``tp / (tp + other)`` at each threshold (0 where nothing counted); a scalar for one threshold."""
        value = _divide_no_nan(self.true_positives, self.true_positives + self.other, positive=True)
        return value[0] if len(self._thresholds) == 1 else value


class Precision(_Confusion):
    """The fraction of predicted positives that are positive: ``tp / (tp + fp)``.

    A prediction is positive when it is above the threshold; ``y_true`` is read as booleans.

    Args:
        thresholds: a threshold or a list of them in ``[0, 1]`` (a result per threshold);
            default 0.5, or, with ``top_k``, any value in the top k.
        top_k: counts only the ``k`` highest predictions of each sample as predicted.
        class_id: looks at this class (last axis) only.
        name: the metric's name.
        dtype: see ``Metric``.
    """

    default_name = "precision"


class Recall(_Confusion):
    """The fraction of positives predicted positive: ``tp / (tp + fn)``.

    Args:
        thresholds: a threshold or a list of them in ``[0, 1]`` (a result per threshold);
            default 0.5, or, with ``top_k``, any value in the top k.
        top_k: counts only the ``k`` highest predictions of each sample as predicted.
        class_id: looks at this class (last axis) only.
        name: the metric's name.
        dtype: see ``Metric``.
    """

    default_name = "recall"
    _other_name = "false_negatives"


_CURVES = ("ROC", "PR")
_SUMMATIONS = ("interpolation", "minoring", "majoring")


def _ratio(a: np.ndarray, b: np.ndarray, positive: bool) -> np.ndarray:
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape), np.result_type(a, b))
    return np.divide(a, b, out=out, where=b > 0 if positive else b != 0)


# One op, not the four of where(b != 0, a / where(b != 0, b, 1), 0): every logged result pays it.
_RATIO = OpDef("MetricRatio", _ratio, save="")
not_differentiable("MetricRatio")


def _divide_no_nan(a: Tensor, b: Tensor, positive: bool = False) -> Tensor:
    """``a / b``, and 0 where ``b`` is 0 (or, with ``positive``, not above 0)."""
    return execute(_RATIO, (a, b), {"positive": positive})


def _float64(variable: Variable) -> Tensor:
    return _math.cast(variable, _dt.float64)


class AUC(Metric):
    """The area under the ROC or precision-recall curve, from counts at ``num_thresholds``
    thresholds (a Riemann sum, as Keras).

    Args:
        num_thresholds: how many thresholds, evenly spaced over ``[0, 1]`` (default 200; the
            outer two are ``-1e-7`` and ``1 + 1e-7``).
        curve: ``"ROC"`` or ``"PR"``.
        summation_method: ``"interpolation"`` (the trapezoids; for ``"PR"``, Keras's
            interpolation of precision between thresholds), ``"minoring"`` or ``"majoring"``.
        name: the metric's name.
        dtype: see ``Metric``.
        thresholds: thresholds in ``[0, 1]`` to use instead of ``num_thresholds``.
        multi_label: a curve per label (the last axis), their areas averaged; else every
            element counts as one prediction.
        num_labels: the number of labels with ``multi_label`` (else read from the first batch).
        label_weights: weights of the labels: in the average of ``multi_label``, else of
            each element's count.
        from_logits: whether ``y_pred`` holds logits (a sigmoid is applied).
    """

    default_name = "auc"

    def __init__(
        self,
        num_thresholds: int = 200,
        curve: str = "ROC",
        summation_method: str = "interpolation",
        name: str | None = None,
        dtype: Any = None,
        thresholds: Any = None,
        multi_label: bool = False,
        num_labels: int | None = None,
        label_weights: Any = None,
        from_logits: bool = False,
    ) -> None:
        super().__init__(name, dtype)
        curve, summation_method = str(curve).upper(), str(summation_method).lower()
        if curve not in _CURVES:
            raise ValueError(f"AUC: curve must be one of {_CURVES}, got {shown(curve)}")
        if summation_method not in _SUMMATIONS:
            raise ValueError(
                f"AUC: summation_method must be one of {_SUMMATIONS}, got {shown(summation_method)}"
            )
        if thresholds is not None:
            inner = sorted(_thresholds(thresholds, 0.5))
            self.num_thresholds = len(inner) + 2
            self._evenly = _evenly_spaced([0.0, *inner, 1.0])
            self.thresholds: list[float] | None = inner
        else:
            if int(num_thresholds) <= 1:
                raise ValueError(f"AUC: num_thresholds must be an integer > 1, got {shown(num_thresholds)}")
            self.num_thresholds = int(num_thresholds)
            inner = [(i + 1) / (self.num_thresholds - 1) for i in range(self.num_thresholds - 2)]
            self._evenly = True
            self.thresholds = None
        self._all_thresholds = np.asarray([0.0 - _losses.EPSILON, *inner, 1.0 + _losses.EPSILON])
        self.curve = curve
        self.summation_method = summation_method
        self.multi_label = bool(multi_label)
        if num_labels is not None and not self.multi_label:
            raise ValueError("AUC: num_labels is needed only when multi_label is True")
        self.num_labels = None if num_labels is None else int(num_labels)
        self.label_weights = None if label_weights is None else [float(w) for w in np.ravel(label_weights)]
        self.from_logits = bool(from_logits)
        self._built = False
        if not self.multi_label:
            self._build(None)
        elif self.num_labels:
            self._build(self.num_labels)

    def _build(self, labels: int | None) -> None:
        shape = (self.num_thresholds,) if labels is None else (self.num_thresholds, labels)
        self.true_positives = self.add_variable(shape, "zeros", name="true_positives")
        self.false_positives = self.add_variable(shape, "zeros", name="false_positives")
        self.true_negatives = self.add_variable(shape, "zeros", name="true_negatives")
        self.false_negatives = self.add_variable(shape, "zeros", name="false_negatives")
        self._built = True

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch (``y_true`` is read as booleans: nonzero is positive)."""
        y_true, y_pred = _same_rank_float(y_true, y_pred, self.name)
        if self.multi_label and y_pred.ndim != 2:
            raise ValueError(f"{self.name}: multi_label needs y_pred of rank 2, got shape {y_pred.shape}")
        if not self._built:
            self._build(y_pred.shape[-1])
        elif self.multi_label and y_pred.shape[-1] != self.true_positives.shape[-1]:
            raise ValueError(
                f"{self.name}: y_pred has {y_pred.shape[-1]} labels, the metric counts "
                f"{self.true_positives.shape[-1]}"
            )
        if self.from_logits:
            y_pred = _math.cast(1.0 / (1.0 + _math.exp(-_math.cast(y_pred, _dt.float64))), _dt.float32)
        weights = _weights_of(sample_weight, y_pred, self.name)
        if self.label_weights is not None and not self.multi_label:
            label_weights = np.broadcast_to(np.asarray(self.label_weights), y_pred.shape)
            weights = Tensor(label_weights.copy()) if weights is None else weights * label_weights
        counts = _confusion_counts(
            y_true, y_pred, self._all_thresholds, weights, self._evenly, self.multi_label
        )
        for variable, value in zip(self.variables, counts):
            variable.assign_add(_math.cast(value, _dt.float32))

    def _by_label(self, terms: Tensor) -> Tensor:
        if not self.multi_label:
            return _reduce.reduce_sum(terms)
        areas = _reduce.reduce_sum(terms, axis=0)
        if self.label_weights is None:
            return _reduce.reduce_mean(areas)
        weights = np.asarray(self.label_weights)
        total = weights.sum()
        return _reduce.reduce_sum(areas * weights) / total if total else Tensor(np.float64(0.0))

    def _interpolated_pr(self, tp: Tensor, fp: Tensor, fn: Tensor) -> Tensor:
        # Precision interpolated between thresholds (Davis and Goadrich, 2006): with P = TP + FP
        # linear in each interval, the area of the interval has a closed form.
        dtp = tp[:-1] - tp[1:]
        p = tp + fp
        dp = p[:-1] - p[1:]
        slope = _divide_no_nan(dtp, _math.maximum(dp, 0.0))
        intercept = tp[1:] - slope * p[1:]
        both = _math.logical_and(_math.greater(p[:-1], 0.0), _math.greater(p[1:], 0.0))
        ratio = _math.where(both, _divide_no_nan(p[:-1], _math.maximum(p[1:], 0.0)), 1.0)
        increments = _divide_no_nan(
            slope * (dtp + intercept * _math.log(ratio)), _math.maximum(tp[1:] + fn[1:], 0.0)
        )
        return self._by_label(increments)

    @_in_replay
    def result(self) -> Tensor:
        """The area so far (0 before any update)."""
        if not self._built:
            guard(unchanged((self, "_built")))  # a replay of this would answer 0 for good
            return Tensor(np.float32(0.0))
        tp, fp, tn, fn = (_float64(v) for v in self.variables)
        if self.curve == "PR" and self.summation_method == "interpolation":
            return _math.cast(self._interpolated_pr(tp, fp, fn), _dt.float32)
        recall = _divide_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = _divide_no_nan(fp, fp + tn), recall
        else:
            x, y = recall, _divide_no_nan(tp, tp + fp)
        if self.summation_method == "interpolation":
            heights = (y[:-1] + y[1:]) / 2.0
        elif self.summation_method == "minoring":
            heights = _math.minimum(y[:-1], y[1:])
        else:
            heights = _math.maximum(y[:-1], y[1:])
        return _math.cast(self._by_label((x[:-1] - x[1:]) * heights), _dt.float32)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what ``get_state`` returned (building the per-label counts it holds)."""
        values = state.get("variables", [])
        if not self._built and values:
            self._build(int(np.shape(values[0])[-1]))
        super().set_state(state)


_AVERAGES = (None, "micro", "macro", "weighted")


class FBetaScore(Metric):
    """The F-beta score: ``(1 + beta**2) * precision * recall / (beta**2 * precision + recall)``,
    per class (the last axis of ``(samples, classes)`` inputs), from counts in state variables.

    Args:
        average: ``None`` (a score per class), ``"micro"`` (from the counts over every class),
            ``"macro"`` (the mean of the per-class scores) or ``"weighted"`` (their mean
            weighted by each class's weight of positives).
        beta: the weight of recall against precision (a float > 0).
        threshold: predictions above it are positive; ``None`` takes each sample's highest.
        name: the metric's name.
        dtype: see ``Metric``.
    """

    default_name = "fbeta_score"

    def __init__(
        self,
        average: str | None = None,
        beta: float = 1.0,
        threshold: float | None = None,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name, dtype)
        if average not in _AVERAGES:
            raise ValueError(
                f"{type(self).__name__}: average must be one of {_AVERAGES}, got {shown(average)}"
            )
        if not isinstance(beta, (int, float)) or isinstance(beta, bool) or beta <= 0:
            raise ValueError(f"{type(self).__name__}: beta must be a number > 0, got {shown(beta)}")
        if threshold is not None and not 0.0 < float(threshold) <= 1.0:
            raise ValueError(
                f"{type(self).__name__}: threshold must satisfy 0 < threshold <= 1, got {shown(threshold)}"
            )
        self.average = average
        self.beta = float(beta)
        self.threshold = None if threshold is None else float(threshold)
        self._built = False
        self._classes: int | None = None

    def _build(self, classes: int) -> None:
        shape = () if self.average == "micro" else (classes,)
        for name in ("true_positives", "false_positives", "false_negatives", "intermediate_weights"):
            setattr(self, name, self.add_variable(shape, "zeros", name=name))
        self._classes = None if self.average == "micro" else classes  # micro sums every class
        self._built = True

    @_in_replay
    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch of ``(samples, classes)`` targets and predictions."""
        y_true = _math.cast(_tensor(y_true, "y_true", self.name), _dt.float32)
        y_pred = _math.cast(_tensor(y_pred, "y_pred", self.name), _dt.float32)
        if y_true.ndim != 2 or y_pred.ndim != 2 or y_true.shape != y_pred.shape:
            raise ValueError(
                f"{self.name}: expects y_true and y_pred of one shape (samples, classes), got {y_true.shape} "
                f"and {y_pred.shape}"
            )
        if not self._built:
            self._build(y_pred.shape[-1])
        elif self._classes is not None and y_pred.shape[-1] != self._classes:
            raise ValueError(
                f"{self.name}: y_pred has {y_pred.shape[-1]} classes, the metric counts {self._classes}"
            )
        if self.threshold is None:
            highest = _math.greater_equal(y_pred, _reduce.reduce_max(y_pred, axis=-1, keepdims=True))
            predicted = _math.logical_and(highest, _math.greater(_math.abs(y_pred), 1e-9))
        else:
            predicted = _math.greater(y_pred, self.threshold)
        predicted_f = _math.cast(predicted, _dt.float64)
        truth = _math.cast(y_true, _dt.float64)
        weights = None
        if sample_weight is not None:
            weights = _math.cast(_tensor(sample_weight, "sample_weight", self.name), _dt.float64)
            if weights.size not in (1, y_pred.shape[0]):
                raise ValueError(
                    f"{self.name}: sample_weight of shape {weights.shape} does not fit y_pred of shape "
                    f"{y_pred.shape} (one weight per sample)"
                )
            weights = _shape.reshape(weights, (-1, 1))
        axis = None if self.average == "micro" else 0
        for variable, values in zip(
            self.variables,
            (predicted_f * truth, predicted_f * (1.0 - truth), (1.0 - predicted_f) * truth, truth),
        ):
            weighted = values if weights is None else values * weights
            variable.assign_add(_math.cast(_reduce.reduce_sum(weighted, axis=axis), _dt.float32))

    @_in_replay
    def result(self) -> Tensor:
        """The score (per class with ``average=None``); 0 before any update."""
        if not self._built:
            guard(unchanged((self, "_built")))  # a replay of this would answer 0 for good
            return Tensor(np.float32(0.0))
        eps = _losses.EPSILON
        tp, fp, fn, support = (_float64(v) for v in self.variables)
        precision = tp / (tp + fp + eps)
        recall = tp / (tp + fn + eps)
        b2 = self.beta**2
        score = precision * recall / (b2 * precision + recall + eps) * (1 + b2)
        if self.average == "weighted":
            score = _reduce.reduce_sum(score * support / (_reduce.reduce_sum(support) + eps))
        elif self.average is not None:
            score = _reduce.reduce_mean(score)
        return _math.cast(score, _dt.float32)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what ``get_state`` returned (building the per-class counts it holds)."""
        values = state.get("variables", [])
        if not self._built and values:
            shape = np.shape(values[0])
            self._build(int(shape[0]) if shape else 1)
        super().set_state(state)


class F1Score(FBetaScore):
    """The F1 score: the harmonic mean of precision and recall (``FBetaScore`` with ``beta=1``).

    Args:
        average: ``None``, ``"micro"``, ``"macro"`` or ``"weighted"`` (see ``FBetaScore``).
        threshold: predictions above it are positive; ``None`` takes each sample's highest.
        name: the metric's name.
        dtype: see ``Metric``.
    """

    default_name = "f1_score"

    def __init__(
        self,
        average: str | None = None,
        threshold: float | None = None,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(average, 1.0, threshold, name, dtype)


def _mean_of_loss(loss_name: str) -> Callable[[str], Metric]:
    """A metric factory: the mean of the loss ``loss_name`` per sample, as Keras names a loss as a metric."""

    def make(name: str) -> Metric:
        loss_fn = _losses.get(loss_name)
        assert isinstance(loss_fn, _losses.Loss)  # a registered name gives a new Loss
        loss_fn.reduction = "none"
        return MeanMetricWrapper(loss_fn, name)

    return make


_OWN: dict[str, Callable[..., Metric]] = {
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
    "rmse": RootMeanSquaredError,
    "root_mean_squared_error": RootMeanSquaredError,
    "mape": MeanAbsolutePercentageError,
    "mean_absolute_percentage_error": MeanAbsolutePercentageError,
    "top_k_categorical_accuracy": TopKCategoricalAccuracy,
    "sparse_top_k_categorical_accuracy": SparseTopKCategoricalAccuracy,
    "binary_crossentropy": BinaryCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "auc": AUC,
    "precision": Precision,
    "recall": Recall,
    "f1_score": F1Score,
    "fbeta_score": FBetaScore,
}

# Class names whose snake_case is not their registered name.
_CLASS_NAMES: dict[str, Callable[..., Metric]] = {"FBetaScore": FBetaScore}

registry: Registry[Callable[..., Metric]] = Registry(
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
        make = _CLASS_NAMES.get(identifier) or registry.lookup(identifier)
        if make is _Accuracy:
            if identifier not in ("accuracy", "acc"):
                return Accuracy(identifier)
            loss_obj = _losses.get(loss) if isinstance(loss, str) else loss
            for loss_type, make_for_loss in _ACCURACY_FOR_LOSS.items():
                if isinstance(loss_obj, loss_type):
                    return make_for_loss(identifier, loss_obj)
        if isinstance(make, type):
            # a class's own name gives its default name, as in Keras ("AUC": auc)
            return make() if identifier == make.__name__ else make(name=identifier)
        return make(identifier)
    if callable(identifier):
        return MeanMetricWrapper(identifier)
    raise TypeError(
        f"a metric must be a name, a Metric or a callable (y_true, y_pred) -> values, got {shown(identifier)}"
    )


__all__ = [
    "AUC",
    "Accuracy",
    "BinaryAccuracy",
    "BinaryCrossentropy",
    "CategoricalAccuracy",
    "CategoricalCrossentropy",
    "F1Score",
    "FBetaScore",
    "Mean",
    "MeanAbsoluteError",
    "MeanAbsolutePercentageError",
    "MeanMetricWrapper",
    "MeanSquaredError",
    "Metric",
    "Precision",
    "Recall",
    "RootMeanSquaredError",
    "SparseCategoricalAccuracy",
    "SparseTopKCategoricalAccuracy",
    "TopKCategoricalAccuracy",
    "deserialize",
    "get",
    "registry",
    "serialize",
]


def serialize(metric: Metric) -> dict[str, Any]:
    """``{"module", "class_name", "config"}`` of a metric, as model files hold it (Keras 3's
    ``keras.metrics.serialize``)."""
    from tapefit.layers import serialization

    return serialization.serialize(metric, type(metric).__name__)


def deserialize(config: dict[str, Any]) -> Metric:
    """The metric ``serialize`` described (a built-in class, or one registered with
    ``tp.register_serializable``); a name is taken as ``get`` takes it.

    Raises:
        tp.layers.serialization.ConfigError: an unknown class or a bad config.
    """
    from tapefit.layers import serialization

    if isinstance(config, str):
        return get(config)
    return serialization.deserialize(config, serialization.layer_tables(), "metric")


def __dir__() -> list[str]:
    return sorted(__all__)
