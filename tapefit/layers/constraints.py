"""Weight constraints (``kernel_constraint=`` of a layer), by Keras's names, defaults and formulas.

A constraint maps a weight to its projection, a Tensor of the same shape. A layer gives its
constraint to the variable (``Variable.constraint``); every optimizer assigns
``constraint(variable)`` to the variable right after updating it, as Keras 3 does.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

from tapefit.core.messages import shown
from tapefit.core.naming import Registry
from tapefit.core.ops.math import clip_by_value, maximum, sqrt, square
from tapefit.core.ops.reduce import reduce_sum
from tapefit.core.tensor import Tensor, as_tensor

EPSILON = 1e-7
"""Added to the norms before dividing by them (Keras's ``backend.epsilon()``)."""


def _axis(value: Any, cls: str) -> int | tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in value):
            raise ValueError(
                f"{cls}: axis must be an integer or a non-empty list of them, got {shown(value)}"
            )
        return tuple(int(a) for a in value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{cls}: axis must be an integer or a non-empty list of them, got {shown(value)}")
    return int(value)


def _number(value: Any, what: str, cls: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
        raise ValueError(f"{cls}: {what} must be a number >= 0, got {shown(value)}")
    return value  # type: ignore[return-value]  # kept as given, for get_config


class Constraint:
    """Base class: ``constraint(weight) -> projected weight`` (the identity here)."""

    def __call__(self, w: Any) -> Tensor:
        return as_tensor(w)

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments as the constraint holds them now (Keras's ``get_config``)."""
        from tapefit.layers import serialization

        return serialization.attribute_config(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Constraint:
        """A constraint from what ``get_config`` returned.

        Raises:
            ValueError: a key its constructor does not take (named).
        """
        from tapefit.layers import serialization

        return serialization.from_constructor_config(cls, config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _norms(w: Tensor, axis: int | tuple[int, ...]) -> Tensor:
    return sqrt(reduce_sum(square(w), axis=axis, keepdims=True))


class MaxNorm(Constraint):
    """Rescales each slice along ``axis`` whose L2 norm exceeds ``max_value`` to norm ``max_value``:
    ``w * clip(norm, 0, max_value) / (1e-7 + norm)``.

    Args:
        max_value: the largest norm allowed.
        axis: the axis (or axes) the norms are taken over: 0 for a ``Dense`` kernel
            ``(input_dim, units)`` constrains each unit's incoming weights; ``[0, 1, 2]`` for a
            ``Conv2D`` kernel ``(rows, cols, in, out)``.
    """

    def __init__(self, max_value: float = 2, axis: int | list[int] | tuple[int, ...] = 0) -> None:
        self.max_value = _number(max_value, "max_value", "MaxNorm")
        self.axis = axis
        self._axes = _axis(axis, "MaxNorm")

    def __call__(self, w: Any) -> Tensor:
        w = as_tensor(w)
        norms = _norms(w, self._axes)
        return w * (clip_by_value(norms, 0.0, self.max_value) / (norms + EPSILON))


class NonNeg(Constraint):
    """Sets the negative weights to 0: ``maximum(w, 0)``."""

    def __call__(self, w: Any) -> Tensor:
        return maximum(as_tensor(w), 0.0)


class UnitNorm(Constraint):
    """Scales each slice along ``axis`` to L2 norm 1: ``w / (1e-7 + norm)``.

    Args:
        axis: the axis (or axes) the norms are taken over (as ``MaxNorm``'s).
    """

    def __init__(self, axis: int | list[int] | tuple[int, ...] = 0) -> None:
        self.axis = axis
        self._axes = _axis(axis, "UnitNorm")

    def __call__(self, w: Any) -> Tensor:
        w = as_tensor(w)
        return w / (_norms(w, self._axes) + EPSILON)


class MinMaxNorm(Constraint):
    """Moves each slice's L2 norm toward ``[min_value, max_value]``:
    ``w * (rate * clip(norm, min_value, max_value) + (1 - rate) * norm) / (1e-7 + norm)``.

    Args:
        min_value: the smallest norm.
        max_value: the largest norm.
        rate: 1.0 enforces the bounds at once; a smaller rate moves the norm part of the way.
        axis: the axis (or axes) the norms are taken over (as ``MaxNorm``'s).
    """

    def __init__(
        self,
        min_value: float = 0.0,
        max_value: float = 1.0,
        rate: float = 1.0,
        axis: int | list[int] | tuple[int, ...] = 0,
    ) -> None:
        self.min_value = _number(min_value, "min_value", "MinMaxNorm")
        self.max_value = _number(max_value, "max_value", "MinMaxNorm")
        if max_value < min_value:
            raise ValueError(
                f"MinMaxNorm: max_value must be >= min_value, got {shown(max_value)} < {shown(min_value)}"
            )
        self.rate = _number(rate, "rate", "MinMaxNorm")
        self.axis = axis
        self._axes = _axis(axis, "MinMaxNorm")

    def __call__(self, w: Any) -> Tensor:
        w = as_tensor(w)
        norms = _norms(w, self._axes)
        desired = clip_by_value(norms, self.min_value, self.max_value) * self.rate + norms * (1.0 - self.rate)
        return w * (desired / (norms + EPSILON))


registry: Registry[type[Constraint]] = Registry(
    "constraint",
    {
        "constraint": Constraint,
        "max_norm": MaxNorm,
        "non_neg": NonNeg,
        "unit_norm": UnitNorm,
        "min_max_norm": MinMaxNorm,
    },
    instantiate=True,
    none=None,
    callable_form=" (weight) -> weight",
)
"""The constraint classes by Keras's names (``registry.names()``); ``"MaxNorm"`` works too."""


def get(identifier: str | Callable[..., Any] | None) -> Callable[..., Any] | None:
    """A constraint from ``None``, a name (``"max_norm"``, ``"non_neg"``, ``"unit_norm"``,
    ``"min_max_norm"``, or the class name) with Keras's defaults, or a callable.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: anything else.
    """
    return registry.get(identifier)


def serialize(constraint: Any) -> Any:
    """``{"module", "class_name", "config"}`` of a constraint, as model files hold it (Keras 3's
    ``serialize``); ``None`` gives ``None``."""
    from tapefit.layers import serialization

    if constraint is None:
        return None
    return serialization.serialize(constraint, type(constraint).__name__)


def deserialize(config: Any) -> Any:
    """The constraint ``serialize`` described (a built-in class, or one registered with
    ``tp.register_serializable``); a name or ``None`` is taken as ``get`` takes it.

    Raises:
        tp.layers.serialization.ConfigError: an unknown class or a bad config.
    """
    from tapefit.layers import serialization

    if config is None or isinstance(config, str):
        return get(config)
    return serialization.deserialize(config, serialization.layer_tables(), "constraint")


__all__ = [
    "Constraint",
    "MaxNorm",
    "MinMaxNorm",
    "NonNeg",
    "UnitNorm",
    "deserialize",
    "get",
    "registry",
    "serialize",
]


def __dir__() -> list[str]:
    return sorted(__all__)
