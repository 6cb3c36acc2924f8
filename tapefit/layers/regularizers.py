"""Weight penalties (``kernel_regularizer=`` of a layer), by Keras's names and defaults.

A regularizer maps a weight to a scalar penalty; a layer's penalties are
collected, computed fresh, in ``module.losses``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tapefit.core.naming import Registry
from tapefit.core.ops.math import abs, square
from tapefit.core.ops.reduce import reduce_sum
from tapefit.core.tensor import Tensor


class Regularizer:
    """Base class: ``regularizer(weight) -> scalar Tensor``."""

    def __call__(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments as the regularizer holds them now (Keras's ``get_config``)."""
        from tapefit.layers import serialization

        return serialization.attribute_config(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Regularizer:
        """A regularizer from what ``get_config`` returned.

        Raises:
            ValueError: a key its constructor does not take (named).
        """
        from tapefit.layers import serialization

        return serialization.from_constructor_config(cls, config)


class L1L2(Regularizer):
    """``l1 * sum(|x|) + l2 * sum(x ** 2)``.

    Args:
        l1: the L1 factor.
        l2: the L2 factor.
    """

    def __init__(self, l1: float = 0.0, l2: float = 0.0) -> None:
        if l1 < 0 or l2 < 0:
            raise ValueError(f"regularization factors must be >= 0, got l1={l1!r}, l2={l2!r}")
        self.l1, self.l2 = float(l1), float(l2)

    def __call__(self, x: Tensor) -> Tensor:
        penalty = None
        if self.l1:
            penalty = reduce_sum(abs(x)) * self.l1
        if self.l2 or penalty is None:
            term = reduce_sum(square(x)) * self.l2
            penalty = term if penalty is None else penalty + term
        return penalty

    def __repr__(self) -> str:
        return f"{type(self).__name__}(l1={self.l1}, l2={self.l2})"


class L1(L1L2):
    """``l1 * sum(|x|)`` (Keras default factor 0.01)."""

    def __init__(self, l1: float = 0.01) -> None:
        super().__init__(l1=l1)


class L2(L1L2):
    """``l2 * sum(x ** 2)`` (Keras default factor 0.01)."""

    def __init__(self, l2: float = 0.01) -> None:
        super().__init__(l2=l2)


registry: Registry[Callable[[], Regularizer]] = Registry(
    "regularizer", {"l1": L1, "l2": L2, "l1_l2": lambda: L1L2(0.01, 0.01)}, instantiate=True, none=None
)
"""The regularizers by name (``registry.names()``); each entry makes one with Keras's factors."""


def get(identifier: str | Callable[..., Any] | None) -> Callable[..., Any] | None:
    """A regularizer from ``None``, a name (``"l1"``, ``"l2"``, ``"l1_l2"``) or a callable.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: anything else.
    """
    return registry.get(identifier)


__all__ = ["L1", "L1L2", "L2", "Regularizer", "get", "registry"]
