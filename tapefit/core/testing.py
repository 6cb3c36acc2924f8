"""``check_gradients``: tape gradients against central finite differences, in float64."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import nest
from tapefit.core.ops import concat, reduce_sum, reshape, zeros_like
from tapefit.core.tape import GradientTape
from tapefit.core.tensor import Tensor, _wrap, to_array


def _prepare(arg: Any) -> tuple[Any, bool]:
    """Floating arguments become float64 Tensors (differentiated); others pass through."""
    if isinstance(arg, (bool, int, str)) or arg is None:
        return arg, False
    if isinstance(arg, (Tensor, np.ndarray, np.generic, float, list, tuple)):
        array = to_array(arg)
        if array.dtype.kind == "f":
            return _wrap(array.astype(np.float64)), True
        return arg, False
    return arg, False


class _Projection:
    """A fixed random weighting that turns any outputs into one scalar."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(1234)
        self.weights: dict[int, np.ndarray] = {}

    def __call__(self, outputs: Any) -> Tensor:
        total = None
        for k, y in enumerate(nest.flatten(outputs)):
            if y is None:
                continue
            if not isinstance(y, Tensor):
                raise TypeError(f"check_gradients: f must return Tensors, got {type(y).__name__}")
            if y.dtype.kind != "f":
                continue
            w = self.weights.get(k)
            if w is None or w.shape != y.shape:
                w = self.weights[k] = self.rng.uniform(0.5, 1.5, y.shape)
            term = reduce_sum(y * _wrap(w.astype(y.dtype)))
            total = term if total is None else total + term
        if total is None:
            raise ValueError("check_gradients: f returned no floating-point tensor")
        return total


def _scalar(f: Callable[..., Any], projection: _Projection, args: list[Any]) -> float:
    return float(projection(f(*args)).numpy())


def _tape_gradients(
    f: Callable[..., Any], projection: _Projection, args: list[Any], index: list[int]
) -> list[Tensor]:
    with GradientTape() as tape:
        sources = [args[i] for i in index]
        tape.watch(sources)
        s = projection(f(*args))
    grads = tape.gradient(s, sources)
    return [zeros_like(x) if g is None else g for g, x in zip(grads, sources)]


def _compare(
    f: Callable[..., Any], args: list[Any], index: list[int], eps: float, atol: float, rtol: float, label: str
) -> None:
    projection = _Projection()
    analytic = [g.numpy() for g in _tape_gradients(f, projection, args, index)]
    worst: tuple[float, str] | None = None
    for k, i in enumerate(index):
        base = args[i].numpy()
        for pos in np.ndindex(base.shape):
            values = []
            for step in (eps, -eps):
                moved = base.copy()
                moved[pos] += step
                values.append(_scalar(f, projection, [*args[:i], _wrap(moved), *args[i + 1 :]]))
            numeric = (values[0] - values[1]) / (2 * eps)
            got = float(analytic[k][pos])
            excess = abs(got - numeric) - (atol + rtol * abs(numeric))
            # A non-finite value on either side is a mismatch (NaN on both sides agrees):
            # finite differences that hit NaN mean the check proves nothing at this point.
            both_nan = np.isnan(got) and np.isnan(numeric)
            if not (np.isfinite(got) and np.isfinite(numeric)) and not both_nan:
                excess = np.inf
            if excess > 0 and (worst is None or excess > worst[0]):
                worst = (excess, f"argument {i} at index {pos}: tape {got!r}, finite differences {numeric!r}")
    if worst is not None:
        raise AssertionError(f"{label} gradient mismatch (atol={atol}, rtol={rtol}); worst at {worst[1]}")


def check_gradients(
    f: Callable[..., Any],
    *args: Any,
    order: int = 1,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Checks the tape's gradients of ``f`` at ``args`` against central finite differences.

    Floating arguments (Tensors, ndarrays, lists, Python floats) are converted to
    float64 and differentiated; ints, strings and ``None`` are passed as they are.
    Outputs are reduced to a scalar with fixed random weights, so every output
    element counts. ``order=2`` also checks the gradients of the gradients
    (through nested tapes), and so on.

    Raises:
        AssertionError: showing the worst mismatch.
        ValueError: ``order`` is not an int >= 1, or no argument is floating.
    """
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"check_gradients: order must be an int >= 1, got {order!r}")
    prepared = [_prepare(a) for a in args]
    values = [p[0] for p in prepared]
    index = [i for i, p in enumerate(prepared) if p[1]]
    if not index:
        raise ValueError("check_gradients: no floating-point argument to differentiate")
    level_f = f
    for level in range(1, order + 1):
        _compare(level_f, values, index, eps, atol, rtol, _ORDINALS.get(level, f"order-{level}"))
        level_f = _gradient_function(level_f, index)


_ORDINALS = {1: "first-order", 2: "second-order", 3: "third-order"}


def _gradient_function(f: Callable[..., Any], index: list[int]) -> Callable[..., Tensor]:
    """``f``'s (projected) gradients as one flat tensor: the next order's function to check."""
    projection = _Projection()

    def gradients(*xs: Any) -> Tensor:
        grads = _tape_gradients(f, projection, list(xs), index)
        return concat([reshape(g, [-1]) for g in grads], axis=0)

    return gradients


__all__ = ["check_gradients"]


def __dir__() -> list[str]:
    return sorted(__all__)
