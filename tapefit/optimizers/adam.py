"""Adam: adaptive moment estimation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tapefit.core.function import host_call
from tapefit.core.ops.math import maximum, sqrt, square
from tapefit.core.tensor import Tensor, Variable, _wrap
from tapefit.optimizers import _config
from tapefit.optimizers.optimizer import LearningRate, Optimizer, value_array

__all__ = ["Adam"]


class Adam(Optimizer):
    """Adam, as ``keras.optimizers.Adam`` (Keras 3 update rule).

    At step ``t`` (1-based): ``m += (1 - beta_1) * (g - m)``, ``v += (1 - beta_2) * (g*g - v)``,
    ``alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)``, then
    ``w -= alpha * m / (sqrt(v) + epsilon)``; with ``amsgrad``, ``v_hat = max(v_hat, v)``
    replaces ``v`` in the last formula.

    Args:
        learning_rate: a float or a schedule (see ``Optimizer``).
        beta_1: decay of the first moment, in ``[0, 1)``.
        beta_2: decay of the second moment, in ``[0, 1)``.
        epsilon: added to the denominator for stability.
        amsgrad: use the AMSGrad variant.
        weight_decay: decoupled weight decay coefficient, or ``None`` (see ``Optimizer``).
        clipnorm: clip each gradient to this L2 norm.
        clipvalue: clip each gradient's elements to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clip all gradients together to this global L2 norm.
        name: the optimizer's name.
    """

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        weight_decay: float | None = None,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
        name: str = "adam",
    ) -> None:
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        self.beta_1 = _config.check_float("beta_1", beta_1, low=0.0, high=1.0, high_open=True)
        self.beta_2 = _config.check_float("beta_2", beta_2, low=0.0, high=1.0, high_open=True)
        self.epsilon = _config.check_float("epsilon", epsilon, low=0.0)
        self.amsgrad = bool(amsgrad)

    def slot_initial_values(self) -> dict[str, float]:
        """``momentum`` and ``velocity`` (and ``velocity_hat`` with ``amsgrad``)."""
        slots = {"momentum": 0.0, "velocity": 0.0}
        if self.amsgrad:
            slots["velocity_hat"] = 0.0
        return slots

    def update_step(self, gradient: np.ndarray, variable: Variable, learning_rate: float) -> None:
        """One Adam step for ``variable``, with one work array the optimizer keeps."""
        slots = self._slots_of(variable)
        m, v = slots["momentum"], slots["velocity"]
        t = int(self._iterations) + 1
        alpha = learning_rate * math.sqrt(1.0 - self.beta_2**t) / (1.0 - self.beta_1**t)

        # `work` is the one work array; the slots are read inline so that assign* find
        # their arrays unshared and update them in place.
        work = np.subtract(gradient, value_array(m), out=self._work(gradient))
        work *= 1.0 - self.beta_1
        m.assign_add(work)
        np.square(gradient, out=work)
        work -= value_array(v)
        work *= 1.0 - self.beta_2
        v.assign_add(work)
        if self.amsgrad:
            v_hat = slots["velocity_hat"]
            np.maximum(value_array(v_hat), value_array(v), out=work)
            v_hat.assign(work)
            v = v_hat
        np.sqrt(value_array(v), out=work)
        work += self.epsilon
        np.divide(value_array(m), work, out=work)
        work *= alpha
        variable.assign_sub(work)

    def _alpha(self, dtype: np.dtype) -> Tensor:
        """This step's ``learning_rate * sqrt(1 - beta_2**t) / (1 - beta_1**t)``, as a 0-d
        Tensor of ``dtype``: what ``update_step`` computes in Python."""
        iterations = int(self._iterations._value)
        rate = self._learning_rate_at(iterations)
        t = iterations + 1
        return _wrap(np.asarray(rate * math.sqrt(1.0 - self.beta_2**t) / (1.0 - self.beta_1**t), dtype))

    def _inline_form(self) -> Any:
        """Adam traces as ops unless ``update_step`` is replaced (see ``SGD._inline_form``)."""
        return "adam" if self._owns_update_step(Adam) else None

    def _inline_attributes(self) -> tuple[str, ...]:
        """The hyperparameters and ``update_step``."""
        return ("beta_1", "beta_2", "epsilon", "amsgrad", "update_step")

    def _inline_update(self, grads: list[Tensor], variables: list[Variable], rate: Tensor) -> None:
        """``update_step`` as ops, in its order (the step size from one host call)."""
        alpha = host_call(self._alpha, variables[0].dtype)
        for gradient, variable in zip(grads, variables):
            slots = self._slots_of(variable)
            m, v = slots["momentum"], slots["velocity"]
            m.assign_add((gradient - m) * (1.0 - self.beta_1))
            v.assign_add((square(gradient) - v) * (1.0 - self.beta_2))
            if self.amsgrad:
                v_hat = slots["velocity_hat"]
                v_hat.assign(maximum(v_hat, v))
                v = v_hat
            variable.assign_sub(m / (sqrt(v) + self.epsilon) * alpha)

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments."""
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "amsgrad": self.amsgrad,
        }
