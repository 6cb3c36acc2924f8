"""The training step: Keras's step methods, what a step returns, and the loss tracker.

A model may override ``train_step(data)``, ``test_step(data)`` and ``predict_step(data)``
(``tp.Module`` defines them); ``fit``, ``evaluate`` and ``predict`` then run the override on
every batch. ``data`` is the batch as Keras packs it (``pack_x_y_sample_weight``). Whatever the
step does, each optimizer update in it passes through ``Trainer.apply`` (gradient transforms,
the boundary, the update), so plugins, checkpoints and exact resume hold for a custom step as
for the default one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tapefit.core.tensor import Tensor, _wrap
from tapefit.layers.metrics import Mean, _weights_shape
from tapefit.training.compiled_metrics import update_metrics
from tapefit.training.state import TrainState

__all__ = [
    "STEP_METHODS",
    "CompiledMetrics",
    "LossTracker",
    "metric_results",
    "overridden_step",
    "pack_x_y_sample_weight",
    "step_logs",
    "unpack_x_y_sample_weight",
]

STEP_METHODS = ("train_step", "test_step", "predict_step")


def pack_x_y_sample_weight(x: Any, y: Any = None, sample_weight: Any = None) -> Any:
    """A batch as a step receives it (Keras's rule): ``x`` alone when there are no targets
    (``(x,)`` when ``x`` is itself a tuple or list), else ``(x, y)`` or ``(x, y, sample_weight)``."""
    if y is None:
        return (x,) if isinstance(x, (tuple, list)) else x
    return (x, y) if sample_weight is None else (x, y, sample_weight)


def unpack_x_y_sample_weight(data: Any) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` of a batch a step receives, ``None`` for what it lacks
    (``keras.utils.unpack_x_y_sample_weight``).

    Raises:
        ValueError: a tuple or list of more than three items.
    """
    if isinstance(data, list):
        data = tuple(data)
    if not isinstance(data, tuple):
        return data, None, None
    if len(data) == 1:
        return data[0], None, None
    if len(data) == 2:
        return data[0], data[1], None
    if len(data) == 3:
        return data[0], data[1], data[2]
    raise ValueError(
        f"unpack_x_y_sample_weight: expected x, (x,), (x, y) or (x, y, sample_weight), got a tuple of "
        f"{len(data)} items"
    )


def overridden_step(model: Any, name: str) -> Callable[[Any], Any] | None:
    """``model``'s own ``name`` step (bound) when its class overrides ``tp.Module``'s, else ``None``.

    Raises:
        TypeError: the override cannot be called with one batch, named with its signature.
    """
    from tapefit.layers import Module

    if not isinstance(model, Module) or getattr(type(model), name, None) is getattr(Module, name):
        return None
    method = getattr(model, name)
    owner = f"{type(model).__name__}.{name}"
    if not callable(method):
        raise TypeError(f"{owner} must be a method {name}(self, data), got {type(method).__name__}")
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return method  # a builtin or C callable: it says itself what it takes
    try:
        signature.bind(None)
    except TypeError:
        raise TypeError(
            f"{owner}{signature} cannot be called with one batch: the trainer calls {name}(data), as "
            f"Keras does; define it as def {name}(self, data)"
        ) from None
    return method


def _log_value(owner: str, key: Any, value: Any) -> float:
    if not isinstance(key, str):
        raise TypeError(f"{owner} returned a log key {key!r}; log keys are strings")
    try:
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{owner} returned {type(value).__name__} for {key!r}; a log value is a number or a scalar tensor"
        ) from None
    if array.size != 1:
        raise ValueError(
            f"{owner} returned a value of shape {array.shape} for {key!r}; a log value is a number or a "
            "scalar tensor (reduce it, e.g. with tp.reduce_mean)"
        )
    return float(array.reshape(()))


def step_logs(owner: str, result: Any) -> dict[str, float]:
    """The logs of a step's result: a mapping of names to numbers or scalar tensors (a value
    that is itself such a mapping, as ``CompiledMetrics.result()`` gives, adds its keys).

    Args:
        owner: the step that returned it (``GAN.train_step``), for the error.
        result: what it returned.

    Raises:
        TypeError, ValueError: ``result`` is not such a mapping, named.
    """
    if not isinstance(result, Mapping):
        raise TypeError(
            f"{owner} returned {type(result).__name__}; a step returns a dict of log values, such as "
            "{m.name: m.result() for m in self.metrics}"
        )
    logs: dict[str, float] = {}
    for key, value in result.items():
        if isinstance(value, Mapping):
            logs.update({k: _log_value(owner, k, v) for k, v in value.items()})
        else:
            logs[key] = _log_value(owner, key, value)
    return logs


def metric_results(metrics: list[Any]) -> dict[str, Any]:
    """``{name: result}`` of ``metrics``, a ``CompiledMetrics``'s members by their own names
    (Keras's ``get_metrics_result``)."""
    results: dict[str, Any] = {}
    for metric in metrics:
        value = metric.result()
        if isinstance(value, Mapping):
            results.update(value)
        else:
            results[metric.name] = value
    return results


class CompiledMetrics:
    """The trainer's compiled metrics as one entry of ``model.metrics`` (Keras's
    ``compile_metrics``): ``update_state(y, y_pred, sample_weight)`` updates each of them
    (``weighted_metrics`` with ``sample_weight``, ``metrics`` without it), and ``result()`` is
    ``{name: result}`` of each, by the names they log. Their states are checkpointed one by
    one, not through it.
    """

    name = "compile_metrics"

    def __init__(self, metrics: list[Any]) -> None:
        self.metrics = metrics

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        update_metrics(self.metrics, y_true, y_pred, sample_weight)

    def result(self) -> dict[str, Any]:
        return {metric.name: metric.result() for metric in self.metrics}

    def reset_state(self) -> None:
        for metric in self.metrics:
            metric.reset_state()

    def __repr__(self) -> str:
        return f"<CompiledMetrics {[m.name for m in self.metrics]}>"


class LossTracker(Mean):
    """The epoch's running loss (Keras's loss tracker, named ``loss``, first in ``model.metrics``).

    Its sums are the trainer's ``TrainState``'s, so the checkpoint, the epoch's global sums
    under MPI and the progress bar all read the one running loss. The default step adds each
    batch's loss weighted by its size; a custom step adds what it passes to ``update_state``.
    """

    def __init__(self, state: Callable[[], TrainState]) -> None:
        self._state = state
        super().__init__(name="loss")

    # Its sums are the train state's Python numbers, not Mean's Variables: a compiled custom
    # step updates, reads and resets it as Python on every replay (host calls).
    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        """Adds ``values`` (a custom step's loss), weighted by ``sample_weight`` when given."""
        values = np.asarray(values, dtype=np.float64)
        if sample_weight is None:
            self.total += float(values.sum())
            self.count += float(values.size)
            return
        weights = np.asarray(sample_weight, dtype=np.float64)
        shape = _weights_shape(weights.shape, values.shape, self.name)
        weights = np.broadcast_to(weights.reshape(shape), values.shape)
        self.total += float((values * weights).sum())
        self.count += float(weights.sum())

    def result(self) -> Tensor:
        """The mean loss so far, as a float32 scalar Tensor (0 when nothing was added)."""
        return _wrap(np.asarray(self.total / self.count if self.count else 0.0, dtype=np.float32))

    def reset_state(self) -> None:
        """Forgets every batch."""
        self.total = 0.0
        self.count = 0.0

    def add(self, loss: float, samples: int) -> None:
        """Adds a batch of ``samples`` samples whose mean loss was ``loss`` (the default steps)."""
        state = self._state()
        state.loss_sum += loss * samples
        state.loss_count += samples

    @property
    def total(self) -> float:
        return self._state().loss_sum

    @total.setter
    def total(self, value: float) -> None:
        self._state().loss_sum = float(value)

    @property
    def count(self) -> float:
        return float(self._state().loss_count)

    @count.setter
    def count(self, value: float) -> None:
        # Batch sizes and batch counts are whole; the checkpoint keeps the count as an integer.
        self._state().loss_count = int(value) if float(value).is_integer() else value  # type: ignore[assignment]
