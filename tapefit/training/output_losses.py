"""A loss per output of a model with several outputs, as Keras's ``compile(loss=..., loss_weights=...)``.

``resolve_losses`` turns the trainer's ``loss`` and ``loss_weights`` arguments into one
callable ``loss(y_true, y_pred)``: for a model with one output and no weights, the loss
itself; otherwise an ``OutputLosses`` that sums each output's loss times its weight, with one
``OutputLoss`` metric per output that logs that output's loss without its loss weight (with
the sample weights) as ``<output name>_loss`` (a mean over the epoch's samples), as Keras 3
logs it.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core.ops import reduce_mean
from tapefit.core.tensor import Tensor
from tapefit.layers.metrics import Metric

__all__ = ["OutputLoss", "OutputLosses", "resolve_losses"]


def _output_names(model: Any) -> list[str] | None:
    """The model's output names (a functional ``Model``'s), or ``None`` for other models. The
    outputs of one layer (an RNN's output and states) share its name: the second and later
    ones get ``_1``, ``_2``..., so that each output keeps its own loss."""
    names = getattr(model, "output_names", None)
    if not isinstance(names, (list, tuple)):
        return None
    unique: list[str] = []
    for name in names:
        candidate, k = name, 0
        while candidate in unique:
            k += 1
            candidate = f"{name}_{k}"
        unique.append(candidate)
    return unique


def _pick(structure: Any, names: list[str], index: int, what: str) -> Any:
    """Output ``index`` of ``structure``: by name from a dict, by position from a list or tuple."""
    if isinstance(structure, dict):
        try:
            return structure[names[index]]
        except KeyError:
            raise ValueError(
                f"{what} has no entry '{names[index]}' (it has {sorted(structure)}); the outputs are {names}"
            ) from None
    if isinstance(structure, (list, tuple)):
        if len(structure) != len(names):
            raise ValueError(
                f"{what} has {len(structure)} entries, the model has {len(names)} outputs {names}"
            )
        return structure[index]
    if len(names) != 1:
        raise ValueError(
            f"{what} is one array, the model has {len(names)} outputs {names}; give a list or dict"
        )
    return structure


class OutputLoss(Metric):
    """The loss of one output without its loss weight, averaged over the samples (logged as
    ``<name>_loss``).

    Args:
        output: the output's name.
        index: the output's position among the model's outputs.
        names: every output's name, in order.
        loss: the output's loss ``(y_true, y_pred) -> scalar``.
    """

    def __init__(self, output: str, index: int, names: list[str], loss: Callable[..., Any]) -> None:
        super().__init__(f"{output}_loss")
        self.output = output
        self.index = index
        self.names = names
        self.loss = loss

    def value(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        """This output's loss in a batch (a scalar Tensor)."""
        y = _pick(y_true, self.names, self.index, "y")
        p = _pick(y_pred, self.names, self.index, "the model's outputs")
        value = self.loss(y, p) if sample_weight is None else self.loss(y, p, sample_weight=sample_weight)
        if getattr(value, "ndim", 0):  # a loss function's per-sample values: their mean, as Keras's
            value = reduce_mean(value)
        return value

    takes_sample_weight = True  # the batch's sample weights weigh it, as they weigh the loss

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Adds a batch's loss (weighted by ``sample_weight``, as the total loss is), counted by
        its number of samples (as Keras's loss trackers)."""
        p = _pick(y_pred, self.names, self.index, "the model's outputs")
        n = float(np.shape(p)[0]) if np.ndim(p) else 1.0
        self.total += float(self.value(y_true, y_pred, sample_weight)) * n
        self.count += n


class OutputLosses:
    """The weighted sum of the outputs' losses: ``sum(weight_i * loss_i(y_i, y_pred_i))``.

    Attributes:
        outputs: one ``OutputLoss`` per output that has a loss.
        weights: the weight of each, in the same order.
    """

    def __init__(self, outputs: list[OutputLoss], weights: list[float]) -> None:
        self.outputs = outputs
        self.weights = weights

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        total: Any = None
        for output, weight in zip(self.outputs, self.weights):
            value = output.value(y_true, y_pred, sample_weight)
            term = value if weight == 1.0 else value * weight
            total = term if total is None else total + term
        return total

    def __repr__(self) -> str:
        parts = ", ".join(f"{o.output}: {o.loss!r} x {w}" for o, w in zip(self.outputs, self.weights))
        return f"OutputLosses({parts})"


def _weights(loss_weights: Any, names: list[str], with_loss: list[str]) -> list[float]:
    """One weight per output with a loss, from ``None``, a number, a list or a dict."""
    if loss_weights is None:
        return [1.0] * len(with_loss)
    if isinstance(loss_weights, numbers.Real) and not isinstance(loss_weights, bool):
        if len(names) != 1:
            raise ValueError(
                f"loss_weights is one number, the model has {len(names)} outputs {names}; give a list or dict"
            )
        return [float(loss_weights)]
    if isinstance(loss_weights, dict):
        unknown = sorted(set(loss_weights) - set(names))
        if unknown:
            raise ValueError(f"loss_weights names {unknown}, which are not outputs of the model ({names})")
        return [float(loss_weights.get(name, 1.0)) for name in with_loss]
    if isinstance(loss_weights, (list, tuple)):
        if len(loss_weights) != len(names):
            raise ValueError(
                f"loss_weights has {len(loss_weights)} entries, the model has {len(names)} outputs {names}"
            )
        by_name = dict(zip(names, loss_weights))
        return [float(by_name[name]) for name in with_loss]
    raise TypeError(f"loss_weights must be a number, a list or a dict of numbers, got {loss_weights!r}")


def resolve_losses(
    loss: Any, loss_weights: Any, model: Any, resolve_one: Callable[[Any], Any]
) -> tuple[Any, list[OutputLoss]]:
    """The trainer's loss callable and the per-output loss metrics to log.

    Args:
        loss: one loss (for every output), a list (one per output, ``None`` for an output
            without a loss) or a dict keyed by output name.
        loss_weights: ``None``, a number (one output), a list or a dict keyed by output name.
        model: the model; a functional ``Model`` gives its ``output_names``.
        resolve_one: turns one loss name or object into a callable.

    Raises:
        ValueError: a loss or weight names an output the model does not have, or a list's
            length differs from the number of outputs.
    """
    names = _output_names(model)
    several = isinstance(loss, (list, tuple, dict))
    if not several and (names is None or len(names) == 1) and loss_weights is None:
        return resolve_one(loss), []
    if names is None:
        if isinstance(loss, dict):
            names = sorted(loss)
        elif isinstance(loss, (list, tuple)):
            names = [f"output_{i}" for i in range(len(loss))]
        else:
            names = ["output"]
    if isinstance(loss, dict):
        unknown = sorted(set(loss) - set(names))
        if unknown:
            raise ValueError(f"loss names {unknown}, which are not outputs of the model ({names})")
        chosen = {name: loss[name] for name in names if loss.get(name) is not None}
    elif isinstance(loss, (list, tuple)):
        if len(loss) != len(names):
            raise ValueError(f"loss has {len(loss)} entries, the model has {len(names)} outputs {names}")
        chosen = {name: one for name, one in zip(names, loss) if one is not None}
    else:
        chosen = dict.fromkeys(names, loss)
    if not chosen:
        raise ValueError("loss gives no output a loss")
    outputs = [OutputLoss(name, names.index(name), names, resolve_one(one)) for name, one in chosen.items()]
    weights = _weights(loss_weights, names, list(chosen))
    return OutputLosses(outputs, weights), outputs if len(outputs) > 1 else []
