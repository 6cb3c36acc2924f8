"""Stochastic gradient descent, with optional (Nesterov) momentum."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.tensor import Tensor, Variable
from tapefit.optimizers import _config
from tapefit.optimizers.optimizer import LearningRate, Optimizer, value_array

__all__ = ["SGD"]


class SGD(Optimizer):
    """Gradient descent, as ``keras.optimizers.SGD``.

    With ``momentum == 0``: ``w -= lr * g``. Otherwise ``m = momentum * m - lr * g``, then
    ``w += m``, or with ``nesterov=True`` ``w += momentum * m - lr * g``.

    Args:
        learning_rate: a float or a schedule (see ``Optimizer``).
        momentum: in ``[0, 1]``.
        nesterov: use Nesterov momentum.
        weight_decay: decoupled weight decay coefficient, or ``None`` (see ``Optimizer``).
        clipnorm: clip each gradient to this L2 norm.
        clipvalue: clip each gradient's elements to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clip all gradients together to this global L2 norm.
        name: the optimizer's name.
    """

    def __init__(
        self,
        learning_rate: LearningRate = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float | None = None,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
        name: str = "SGD",
    ) -> None:
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        self.momentum = _config.check_float("momentum", momentum, low=0.0, high=1.0)
        self.nesterov = bool(nesterov)

    def slot_initial_values(self) -> dict[str, float]:
        """``momentum`` when ``momentum > 0``."""
        return {"momentum": 0.0} if self.momentum else {}

    def update_step(self, gradient: np.ndarray, variable: Variable, learning_rate: float) -> None:
        """One SGD step for ``variable``; it allocates nothing (see ``Optimizer._work``)."""
        lent = self._lent_gradient(gradient)
        if lent is None and not self.momentum:
            variable._subtract_product(gradient, learning_rate, self._work(gradient))
            return
        # lr * g, into the gradient itself when the caller lent it (a tp.function replay)
        step = np.multiply(gradient, learning_rate, out=self._work(gradient) if lent is None else lent)
        if not self.momentum:
            variable.assign_sub(step)
            return
        m = self._slots_of(variable)["momentum"]
        new_m = np.multiply(value_array(m), self.momentum, out=self._work(gradient, 1))
        new_m -= step
        m.assign(new_m)
        if self.nesterov:
            new_m *= self.momentum  # momentum * m - lr * g, with the new m
            new_m -= step
        variable.assign_add(new_m)

    def _inline_form(self) -> Any:
        """SGD traces as ops, unless a subclass or the instance replaces ``update_step``
        (eager steps call the instance's)."""
        return "sgd" if self._owns_update_step(SGD) else None

    def _inline_attributes(self) -> tuple[str, ...]:
        """``momentum``, ``nesterov`` and ``update_step``."""
        return ("momentum", "nesterov", "update_step")

    def _inline_update(self, grads: list[Tensor], variables: list[Variable], rate: Tensor) -> None:
        """``update_step`` as ops: the same products and differences, in its order."""
        for gradient, variable in zip(grads, variables):
            step = gradient * rate
            if not self.momentum:
                variable.assign_sub(step)
                continue
            m = self._slots_of(variable)["momentum"]
            new_m = m * self.momentum - step
            m.assign(new_m)
            if self.nesterov:
                new_m = new_m * self.momentum - step
            variable.assign_add(new_m)

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments."""
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}
