"""Weight penalties (``kernel_regularizer=`` of a layer), by Keras's names and defaults.

A regularizer maps a weight to a scalar penalty; a layer's penalties are
collected, computed fresh, in ``module.losses``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core.messages import shown
from tapefit.core.naming import Registry
from tapefit.core.ops.linalg import matmul, transpose
from tapefit.core.ops.math import abs, maximum, sqrt, square
from tapefit.core.ops.reduce import reduce_sum
from tapefit.core.tensor import Tensor, as_tensor


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
            raise ValueError(f"regularization factors must be >= 0, got l1={shown(l1)}, l2={shown(l2)}")
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


class OrthogonalRegularizer(Regularizer):
    """Pushes the rows (or columns) of a matrix toward orthogonality: with ``u`` the rows
    scaled to unit L2 norm (norms below 1e-7 count as 1e-7), the penalty is
    ``factor * 0.5 * sum(|u @ u.T| off the diagonal) / (n * (n - 1) / 2)`` for ``n`` rows.

    Args:
        factor: the factor (Keras default 0.01).
        mode: ``"rows"`` or ``"columns"``: which vectors should be orthogonal; for a ``Dense``
            kernel ``(input_dim, units)``, ``"columns"`` acts on the units' weight vectors.
    """

    def __init__(self, factor: float = 0.01, mode: str = "rows") -> None:
        if (
            isinstance(factor, bool)
            or not isinstance(factor, numbers.Real)
            or not math.isfinite(factor)
            or factor < 0
        ):
            raise ValueError(
                f"OrthogonalRegularizer: factor must be a finite number >= 0, got {shown(factor)}"
            )
        if mode not in ("rows", "columns"):
            raise ValueError(f"OrthogonalRegularizer: mode must be 'rows' or 'columns', got {shown(mode)}")
        self.factor: float = float(factor)
        self.mode: str = mode

    def __call__(self, x: Tensor) -> Tensor:
        x = as_tensor(x)
        if x.ndim != 2:
            raise ValueError(f"OrthogonalRegularizer needs a matrix (rank 2), got shape {x.shape}")
        vectors = x if self.mode == "rows" else transpose(x)
        size = vectors.shape[0]
        # Keras's normalize: x * min(rsqrt(sum(x**2)), 1 / 1e-7), i.e. x / sqrt(max(sum, 1e-14)).
        squares = reduce_sum(square(vectors), axis=1, keepdims=True)
        unit = vectors / sqrt(maximum(squares, 1e-14))
        product = matmul(unit, transpose(unit)) * (1.0 - np.eye(size, dtype=x.dtype.name))
        pairs = size * (size - 1.0) / 2.0
        return reduce_sum(abs(product)) * (self.factor * 0.5) / pairs

    def __repr__(self) -> str:
        return f"OrthogonalRegularizer(factor={self.factor}, mode={self.mode!r})"


registry: Registry[Callable[[], Regularizer]] = Registry(
    "regularizer",
    {
        "l1": L1,
        "l2": L2,
        "l1_l2": lambda: L1L2(0.01, 0.01),
        "l1l2": L1L2,
        "orthogonal_regularizer": OrthogonalRegularizer,
    },
    instantiate=True,
    none=None,
)
"""The regularizers by name (``registry.names()``); each entry makes one with Keras's factors."""


def get(identifier: str | Callable[..., Any] | None) -> Callable[..., Any] | None:
    """A regularizer from ``None``, a name (``"l1"``, ``"l2"``, ``"l1_l2"``, ``"l1l2"``,
    ``"orthogonal_regularizer"``, or a class name) or a callable.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: anything else.
    """
    return registry.get(identifier)


def serialize(regularizer: Any) -> Any:
    """``{"module", "class_name", "config"}`` of a regularizer, as model files hold it (Keras 3's
    ``serialize``); ``None`` gives ``None``."""
    from tapefit.layers import serialization

    if regularizer is None:
        return None
    return serialization.serialize(regularizer, type(regularizer).__name__)


def deserialize(config: Any) -> Any:
    """The regularizer ``serialize`` described (a built-in class, or one registered with
    ``tp.register_serializable``); a name or ``None`` is taken as ``get`` takes it.

    Raises:
        tp.layers.serialization.ConfigError: an unknown class or a bad config.
    """
    from tapefit.layers import serialization

    if config is None or isinstance(config, str):
        return get(config)
    return serialization.deserialize(config, serialization.layer_tables(), "regularizer")


# Keras's function-style names: tp.regularizers.l2(0.01) is L2(0.01)
l1 = L1
l2 = L2
l1_l2 = L1L2
orthogonal_regularizer = OrthogonalRegularizer


__all__ = [
    "L1",
    "L1L2",
    "L2",
    "OrthogonalRegularizer",
    "Regularizer",
    "deserialize",
    "get",
    "l1",
    "l1_l2",
    "l2",
    "orthogonal_regularizer",
    "registry",
    "serialize",
]


def __dir__() -> list[str]:
    return sorted(__all__)
