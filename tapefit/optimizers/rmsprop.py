"""RMSprop: gradients scaled by a moving root mean square."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.ops.math import sqrt, square
from tapefit.core.tensor import Tensor, Variable
from tapefit.optimizers import _config
from tapefit.optimizers.optimizer import LearningRate, Optimizer, value_array

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop, as ``keras.optimizers.RMSprop`` (Keras 3 update rule).

    ``v = rho * v + (1 - rho) * g*g``; centered: ``mg = rho * mg + (1 - rho) * g`` and
    ``denom = v - mg*mg + epsilon``, else ``denom = v + epsilon``;
    ``inc = lr * g / sqrt(denom)``; with momentum ``m = momentum * m + inc`` and ``w -= m``,
    else ``w -= inc``.

    Args:
        learning_rate: a float or a schedule (see ``Optimizer``).
        rho: decay of the moving average of squared gradients, in ``[0, 1]``.
        momentum: in ``[0, 1]``.
        epsilon: added inside the square root for stability.
        centered: divide by the estimated variance instead of the second moment.
        weight_decay: decoupled weight decay coefficient, or ``None`` (see ``Optimizer``).
        clipnorm: clip each gradient to this L2 norm.
        clipvalue: clip each gradient's elements to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clip all gradients together to this global L2 norm.
        name: the optimizer's name.
    """

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-7,
        centered: bool = False,
        weight_decay: float | None = None,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
        name: str = "rmsprop",
    ) -> None:
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        self.rho = _config.check_float("rho", rho, low=0.0, high=1.0)
        self.momentum = _config.check_float("momentum", momentum, low=0.0, high=1.0)
        self.epsilon = _config.check_float("epsilon", epsilon, low=0.0)
        self.centered = bool(centered)

    def slot_initial_values(self) -> dict[str, float]:
        """``velocity``, plus ``momentum`` (momentum > 0) and ``average_gradient`` (centered)."""
        slots = {"velocity": 0.0}
        if self.momentum > 0:
            slots["momentum"] = 0.0
        if self.centered:
            slots["average_gradient"] = 0.0
        return slots

    def update_step(self, gradient: np.ndarray, variable: Variable, learning_rate: float) -> None:
        """One RMSprop step for ``variable``, with two work arrays the optimizer keeps (three when centered)."""
        slots = self._slots_of(variable)
        rho = self.rho
        a = np.square(gradient, out=self._work(gradient))
        a *= 1.0 - rho
        b = np.multiply(value_array(slots["velocity"]), rho, out=self._work(gradient, 1))
        b += a
        slots["velocity"].assign(b)  # v = rho * v + (1 - rho) * g*g; b keeps v
        if self.centered:
            mg = slots["average_gradient"]
            np.multiply(gradient, 1.0 - rho, out=a)
            c = np.multiply(value_array(mg), rho, out=self._work(gradient, 2))
            c += a
            mg.assign(c)  # mg = rho * mg + (1 - rho) * g
            np.square(c, out=c)
            b -= c
        b += self.epsilon  # denom
        np.sqrt(b, out=b)
        np.multiply(gradient, learning_rate, out=a)
        a /= b  # inc = lr * g / sqrt(denom)
        if self.momentum > 0:
            m = slots["momentum"]
            np.multiply(value_array(m), self.momentum, out=b)
            b += a
            m.assign(b)
            variable.assign_sub(b)
        else:
            variable.assign_sub(a)

    def _inline_form(self) -> Any:
        """RMSprop traces as ops unless ``update_step`` is replaced (see ``SGD._inline_form``)."""
        return "rmsprop" if self._owns_update_step(RMSprop) else None

    def _inline_attributes(self) -> tuple[str, ...]:
        """The hyperparameters and ``update_step``."""
        return ("rho", "momentum", "epsilon", "centered", "update_step")

    def _inline_update(self, grads: list[Tensor], variables: list[Variable], rate: Tensor) -> None:
        """``update_step`` as ops, in its order."""
        rho = self.rho
        for gradient, variable in zip(grads, variables):
            slots = self._slots_of(variable)
            velocity = slots["velocity"] * rho + square(gradient) * (1.0 - rho)
            slots["velocity"].assign(velocity)
            if self.centered:
                mg = slots["average_gradient"] * rho + gradient * (1.0 - rho)
                slots["average_gradient"].assign(mg)
                velocity = velocity - square(mg)
            increment = gradient * rate / sqrt(velocity + self.epsilon)
            if self.momentum > 0:
                increment = slots["momentum"] * self.momentum + increment
                slots["momentum"].assign(increment)
            variable.assign_sub(increment)

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments."""
        return {
            **super().get_config(),
            "rho": self.rho,
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "centered": self.centered,
        }
