"""The trainer's ``metrics`` and ``weighted_metrics``, resolved per output as Keras 3 compiles them.

``resolve_metrics`` turns the two arguments into one flat list of metric objects, each under
the name it logs by:

- a model with one output: every metric (a list, or a list of lists, flattened) applies to it;
- several outputs: a list with one entry per output (a metric, a list of them or ``None``), or
  a dict keyed by output name; each logs as ``<output>_<metric>``;
- ``metrics`` are updated without the batch's sample weights, ``weighted_metrics`` with them
  (``sample_weight`` and the weights ``class_weight`` gives);
- a name already logged gets ``_1``, ``_2``, ... when it is an unweighted metric's, and the
  ``weighted_`` prefix (``<output>_weighted_<metric>``) when it is a weighted metric's.

A metric that needs neither another name, an output picked, nor the weights is the object
given; the others are wrapped in a ``RoutedMetric``, which keeps the object inside.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tapefit.core.function import host_call
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.layers.metrics import trace_aware
from tapefit.training.output_losses import _output_names, _pick

__all__ = ["RoutedMetric", "read_result", "resolve_metrics", "update_metrics"]


def _update(metric: Any, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
    """``metric.update_state`` with the batch (and ``sample_weight`` when given). In a compiled
    step, a metric that is not tapefit's (it may compute in NumPy) runs as a host call, with
    every replay's values."""
    args = (y_true, y_pred) if sample_weight is None else (y_true, y_pred, sample_weight)
    if trace_aware(metric.update_state):
        metric.update_state(*args)
    else:
        host_call(metric.update_state, *args)


def _result_tensor(metric: Any) -> Tensor:
    return as_tensor(metric.result())


def read_result(metric: Any) -> Any:
    """``metric.result()``, as a compiled step can return it: a metric that is not tapefit's runs
    as a host call whose result is a Tensor (a Python number would be the trace's forever)."""
    if trace_aware(metric.result):
        return metric.result()
    return host_call(_result_tensor, metric)


class RoutedMetric:
    """One compiled metric as the trainer logs it: of one output, under its log name, and
    updated with the sample weights or without them.

    Args:
        metric: the metric object (its own ``name`` is left as it is).
        name: the name it logs by.
        index: the output it measures, by position (``None``: the model's only output).
        names: every output's name, in order (to pick an output from a dict).
        weighted: a ``weighted_metrics`` entry: updated with the batch's sample weights.
    """

    def __init__(self, metric: Any, name: str, index: int | None, names: list[str], weighted: bool) -> None:
        self.metric = metric
        self.name = name
        self.index = index
        self.names = names
        self.weighted = weighted

    takes_sample_weight = True  # it decides itself whether the weights reach the metric

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Updates the metric with its output of the batch (and the weights, when weighted)."""
        if self.index is not None:
            y_true = _pick(y_true, self.names, self.index, "y")
            y_pred = _pick(y_pred, self.names, self.index, "the model's outputs")
            if isinstance(sample_weight, (dict, list, tuple)):
                sample_weight = _pick(sample_weight, self.names, self.index, "sample_weight")
        _update(self.metric, y_true, y_pred, sample_weight if self.weighted else None)

    def result(self) -> Any:
        return read_result(self.metric)

    update_state._tapefit_in_replay = True  # type: ignore[attr-defined]  # it routes by _update
    result._tapefit_in_replay = True  # type: ignore[attr-defined]

    def reset_state(self) -> None:
        self.metric.reset_state()

    def get_state(self) -> Any:
        """The metric's state (``None`` when it has no ``get_state``: it restarts on a resume)."""
        get_state = getattr(self.metric, "get_state", None)
        return get_state() if callable(get_state) else None

    def set_state(self, state: Any) -> None:
        self.metric.set_state(state)

    def __repr__(self) -> str:
        kind = "weighted " if self.weighted else ""
        return f"<RoutedMetric {self.name!r}: {kind}{self.metric!r}>"


def update_metrics(metrics: list[Any], y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
    """Updates each compiled metric with a batch: ``RoutedMetric`` entries (and the outputs'
    losses) decide about the weights themselves; the others (``metrics``) never get them."""
    for metric in metrics:
        weighted = getattr(metric, "takes_sample_weight", False) is True
        _update(metric, y_true, y_pred, sample_weight if weighted else None)


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _flatten(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _flatten(v)]
    return [] if value is None else [value]


def _per_output(
    given: Any, names: list[str] | None, argument: str
) -> tuple[list[list[Any]], list[str] | None] | None:
    """The metrics of each output (``None`` when they all apply to the one output), and the
    output names that prefix their log names (``None``: no prefix)."""
    if isinstance(given, dict):
        if names is None:
            names = sorted(given)
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ValueError(f"{argument} names {unknown}, which are not outputs of the model ({names})")
        if len(names) == 1:
            return None
        return [_flatten(given.get(name)) for name in names], names
    if not isinstance(given, (list, tuple)):
        return None
    nested = any(entry is None or isinstance(entry, (list, tuple, dict)) for entry in given)
    if names is None:
        if not nested:
            return None  # a model of unknown outputs with a flat list: one output, as Keras
        return [_flatten(entry) for entry in given], None
    if len(names) == 1:
        return None
    if len(given) != len(names):
        raise ValueError(
            f"{argument} has {len(given)} entries, the model has {len(names)} outputs {names}: give one "
            "entry (a metric, a list of them or None) per output, or a dict keyed by output name"
        )
    return [_flatten(entry) for entry in given], names


def _output_loss(loss: Any, names: list[str] | None, index: int) -> Any:
    """The loss given for output ``index`` (what ``"accuracy"`` resolves against)."""
    if isinstance(loss, dict):
        return loss.get(names[index]) if names is not None else None
    if isinstance(loss, (list, tuple)):
        return loss[index] if index < len(loss) else None
    return loss


def resolve_metrics(
    metrics: Any,
    weighted_metrics: Any,
    loss: Any,
    model: Any,
    resolve_one: Callable[[Any, Any], Any],
) -> list[Any]:
    """The trainer's compiled metrics, in Keras's order: ``metrics`` of each output, then
    ``weighted_metrics`` of each output, each under its log name (see the module's rules).

    Args:
        metrics: a metric, a list of them, a list with one entry per output, or a dict keyed
            by output name.
        weighted_metrics: likewise.
        loss: the loss as the trainer was given it (one, or one per output).
        model: the model; a functional ``Model`` gives its ``output_names``.
        resolve_one: ``(metric name or object, the output's loss) -> metric object``.

    Raises:
        ValueError: an entry names an output the model does not have, a list's length differs
            from the number of outputs, or a metric is named ``loss``.
        TypeError: ``weighted_metrics`` is not a list, a tuple or a dict (Keras's rule).
    """
    if weighted_metrics is not None and not isinstance(weighted_metrics, (list, tuple, dict)):
        raise TypeError(
            f"weighted_metrics must be a list, a tuple or a dict, got {type(weighted_metrics).__name__} "
            f"{weighted_metrics!r}"
        )
    names = _output_names(model)
    resolved: list[Any] = []
    seen: dict[str, int] = {}
    for given, weighted in ((metrics, False), (weighted_metrics, True)):
        argument = "weighted_metrics" if weighted else "metrics"
        if given is None:
            continue
        if not isinstance(given, (list, tuple, dict)):
            given = [given]
        split = _per_output(given, names, argument)
        groups: list[tuple[int | None, str | None, list[Any]]]
        if split is None:
            groups = [(None, None, _flatten(given))]
        else:
            per_output, prefixes = split
            groups = [
                (i, None if prefixes is None else prefixes[i], entries)
                for i, entries in enumerate(per_output)
            ]
        picked_by = names if names is not None else [f"output_{i}" for i in range(len(groups))]
        for index, prefix, entries in groups:
            output_loss = loss if index is None else _output_loss(loss, names, index)
            for entry in entries:
                metric = resolve_one(entry, output_loss)
                resolved.append(_named(metric, index, prefix, picked_by, weighted, seen))
    if any(m.name == "loss" for m in resolved):
        raise ValueError("a metric may not be named 'loss': the logs keep that name for the loss")
    return resolved


def _named(
    metric: Any,
    index: int | None,
    prefix: str | None,
    names: list[str],
    weighted: bool,
    seen: dict[str, int],
) -> Any:
    """``metric`` under its log name (Keras's ``CompileMetrics.result`` rule), wrapped when it
    needs another name, an output picked or the weights."""
    own = str(metric.name)
    name = own if prefix is None else f"{prefix}_{own}"
    if name not in seen:
        seen[name] = 1
    elif not weighted:
        count = seen[name]
        seen[name] += 1
        name = f"{name}_{count}"
    else:
        name = f"weighted_{own}" if prefix is None else f"{prefix}_weighted_{own}"
        if name not in seen:
            seen[name] = 1
        else:
            count = seen[name]
            seen[name] += 1
            name = f"{name}_{count}"
    if name == own and index is None and not weighted:
        return metric
    return RoutedMetric(metric, name, index, names, weighted)
