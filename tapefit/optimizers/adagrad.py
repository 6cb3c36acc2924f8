"""Adagrad: per-coordinate learning rates from accumulated squared gradients."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.ops.math import sqrt, square
from tapefit.core.tensor import Tensor, Variable
from tapefit.optimizers import _config
from tapefit.optimizers.optimizer import LearningRate, Optimizer, value_array

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """Adagrad, as ``keras.optimizers.Adagrad`` (Keras 3 update rule).

    ``acc += g*g``, then ``w -= lr * g / sqrt(acc + epsilon)``; ``acc`` starts at
    ``initial_accumulator_value``.

    Args:
        learning_rate: a float or a schedule (see ``Optimizer``).
        initial_accumulator_value: the accumulators' starting value, >= 0.
        epsilon: added inside the square root for stability.
        weight_decay: decoupled weight decay coefficient, or ``None`` (see ``Optimizer``).
        clipnorm: clip each gradient to this L2 norm.
        clipvalue: clip each gradient's elements to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clip all gradients together to this global L2 norm.
        name: the optimizer's name.
    """

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        initial_accumulator_value: float = 0.1,
        epsilon: float = 1e-7,
        weight_decay: float | None = None,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
        name: str = "adagrad",
    ) -> None:
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        self.initial_accumulator_value = _config.check_float(
            "initial_accumulator_value", initial_accumulator_value, low=0.0
        )
        self.epsilon = _config.check_float("epsilon", epsilon, low=0.0)

    def slot_initial_values(self) -> dict[str, float]:
        """``accumulator``, filled with ``initial_accumulator_value``."""
        return {"accumulator": self.initial_accumulator_value}

    def update_step(self, gradient: np.ndarray, variable: Variable, learning_rate: float) -> None:
        """One Adagrad step for ``variable``, with two work arrays the optimizer keeps."""
        acc = self._slots_of(variable)["accumulator"]
        a = np.square(gradient, out=self._work(gradient))
        acc.assign_add(a)
        np.add(value_array(acc), self.epsilon, out=a)
        np.sqrt(a, out=a)
        b = np.multiply(gradient, learning_rate, out=self._work(gradient, 1))
        b /= a
        variable.assign_sub(b)

    def _inline_form(self) -> Any:
        """Adagrad traces as ops unless ``update_step`` is replaced (see ``SGD._inline_form``)."""
        return "adagrad" if self._owns_update_step(Adagrad) else None

    def _inline_attributes(self) -> tuple[str, ...]:
        """``epsilon`` and ``update_step``."""
        return ("epsilon", "update_step")

    def _inline_update(self, grads: list[Tensor], variables: list[Variable], rate: Tensor) -> None:
        """``update_step`` as ops, in its order."""
        for gradient, variable in zip(grads, variables):
            accumulator = self._slots_of(variable)["accumulator"]
            accumulator.assign_add(square(gradient))
            variable.assign_sub(gradient * rate / sqrt(accumulator + self.epsilon))

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments."""
        return {
            **super().get_config(),
            "initial_accumulator_value": self.initial_accumulator_value,
            "epsilon": self.epsilon,
        }
