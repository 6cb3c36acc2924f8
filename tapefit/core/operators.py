"""Binds Python's operators on ``Tensor`` to tapefit ops, so ``x * y`` is recorded."""

from __future__ import annotations

from typing import Any

from tapefit.core.ops import math as m
from tapefit.core.ops.linalg import matmul
from tapefit.core.ops.shape import getitem
from tapefit.core.tensor import Tensor


def _reflected(op: Any) -> Any:
    def method(self: Tensor, other: Any) -> Tensor:
        return op(other, self)

    return method


def _comparison(op: Any) -> Any:
    def method(self: Tensor, other: Any) -> Any:
        if other is None:
            return NotImplemented
        try:
            return op(self, other)
        except TypeError:
            if isinstance(other, (Tensor, int, float, bool, list, tuple)) or hasattr(other, "__array__"):
                raise
            return NotImplemented  # an unrelated object: let Python decide

    return method


_BINARY = {
    "add": m.add,
    "sub": m.subtract,
    "mul": m.multiply,
    "truediv": m.divide,
    "floordiv": m.floordiv,
    "mod": m.floormod,
    "pow": m.pow,
    "matmul": matmul,
    "and": m.logical_and,
    "or": m.logical_or,
}

for _name, _op in _BINARY.items():
    setattr(Tensor, f"__{_name}__", _op)
    setattr(Tensor, f"__r{_name}__", _reflected(_op))

for _name, _op in {
    "lt": m.less,
    "le": m.less_equal,
    "gt": m.greater,
    "ge": m.greater_equal,
    "eq": m.equal,
    "ne": m.not_equal,
}.items():
    setattr(Tensor, f"__{_name}__", _comparison(_op))

# Tensor declares these for type checkers only (under TYPE_CHECKING), and mypy does not let a
# method be assigned to; the ops' signatures are the declared ones.
Tensor.__neg__ = m.negative  # type: ignore[method-assign]
Tensor.__abs__ = m.abs  # type: ignore[method-assign]
Tensor.__invert__ = m.logical_not  # type: ignore[method-assign]
Tensor.__getitem__ = getitem  # type: ignore[method-assign]
