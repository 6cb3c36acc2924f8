"""Marks on op forwards that tell a ``tp.function`` replay how it may run them.

``writes_into``: the forward takes ``out=`` (``planning`` then gives it a buffer planned once);
``replay_source``: the replay writes the forward's NumPy calls out in its own source
(``emit``); ``elementwise``: one element of the result as an expression, so that
``tp.function(jit_compile=True)`` can fuse it with its neighbours (``fuse``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = ["elementwise", "elementwise_template", "overwrites", "replay_source", "source_of", "writes_into"]

F = TypeVar("F", bound=Callable[..., Any])


# Forwards that take ``out=``: see ``writes_into``.
_WRITES_INTO: dict[Any, tuple[int, ...]] = {}


def writes_into(*over: int) -> Callable[[F], F]:
    """Marks an op's forward as taking ``out=``, an array of its result's shape and dtype
    (C-contiguous) that it writes its result into and returns, bit for bit what it returns
    without ``out``. A planned replay then writes the op's result into a buffer allocated once
    (``plan``). ``over``: the positions of the inputs whose array ``out`` may be (the forward
    reads them elementwise, before writing each element); ``out`` is never any other input's
    array. NumPy ufuncs need no mark (any input may be ``out``).
    """

    def mark(forward: F) -> F:
        _WRITES_INTO[forward] = over
        return forward

    return mark


def overwrites(forward: Any, attrs: Any) -> tuple[int, ...] | None:
    """The input positions whose array ``forward`` may write its result over (``writes_into``),
    or ``None`` if it does not take ``out=``."""
    if attrs and ("out" in attrs or "where" in attrs):
        return None
    if isinstance(forward, np.ufunc):
        return tuple(range(forward.nin)) if forward.nout == 1 else None
    try:
        return _WRITES_INTO.get(forward)
    except TypeError:  # an unhashable callable
        return None


# Forwards a replay writes out in its own source: see ``replay_source``.
_SOURCES: dict[Any, Callable[..., list[str]]] = {}


def replay_source(
    source: Callable[[Callable[[Any], str], list[str], dict[str, Any], str], list[str]],
) -> Callable[[F], F]:
    """Marks an op's forward as one a replay writes out in its own source instead of calling
    it: a forward of a few NumPy calls then costs those calls and no Python call of its own.

    ``source(name, args, attrs, out)`` returns lines of Python that leave in ``_r`` what
    ``forward(*args, **attrs, out=out)`` returns, by the same NumPy calls (so the same bits);
    ``args`` and ``out`` are expressions (``out`` may be ``"None"``), and ``name(value)`` gives
    the name of a global of the replay bound to ``value``.
    """

    def mark(forward: F) -> F:
        _SOURCES[forward] = source
        return forward

    return mark


def source_of(forward: Any) -> Callable[..., list[str]] | None:
    try:
        return _SOURCES.get(forward)
    except TypeError:  # an unhashable callable
        return None


# Forward -> the expression of one element of its result (see ``elementwise``).
_ELEMENTWISE: dict[Any, str] = {
    np.add: "{0} + {1}",
    np.subtract: "{0} - {1}",
    np.multiply: "{0} * {1}",
    np.true_divide: "{0} / {1}",
    np.negative: "-{0}",
    np.square: "{0} * {0}",
    np.sqrt: "math.sqrt({0})",
    np.exp: "math.exp({0})",
    np.log: "math.log({0})",
    np.tanh: "math.tanh({0})",
    np.abs: "abs({0})",
    # NaN in either input gives NaN, as NumPy's maximum and minimum do.
    np.maximum: "({0} if {0} >= {1} or {0} != {0} else {1})",
    np.minimum: "({0} if {0} <= {1} or {0} != {0} else {1})",
}


def elementwise(template: str) -> Callable[[F], F]:
    """Marks an op's forward as elementwise for ``tp.function(jit_compile=True)``: ``template``
    is one element of its result as a Python expression over ``{0}``, ``{1}``, ... (the
    inputs' elements, positionally), ``zero`` (0 of the dtype) and ``math``'s functions. The
    forward's inputs all have its result's dtype."""

    def mark(forward: F) -> F:
        _ELEMENTWISE[forward] = template
        return forward

    return mark


def elementwise_template(forward: Any) -> str | None:
    """``forward``'s template (see ``elementwise``), or ``None``."""
    try:
        return _ELEMENTWISE.get(forward)
    except TypeError:  # an unhashable callable
        return None
