"""Reductions over axes, with their gradients.

A reduction's gradient broadcasts ``dy`` back over the reduced axes:
``_spread(dy, op)`` reshapes it to the kept-dims shape and broadcasts it to the input's.
"""

from __future__ import annotations

import math as _pymath
from typing import Any

import numpy as np

from tapefit.core.ops.math import abs, cast, equal, exp, log, sqrt
from tapefit.core.ops.shape import broadcast_to, reshape
from tapefit.core.record import Op
from tapefit.core.registry import OpDef, execute, not_differentiable, register_gradient
from tapefit.core.tensor import Tensor, convert_to_tensor

Axis = int | list[int] | tuple[int, ...] | None


def normalize_axes(axis: Any, ndim: int, name: str = "axis") -> tuple[int, ...]:
    """``axis`` (None, an int or a list) as sorted non-negative ints, checked against ``ndim``."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, Tensor):
        axis = axis.numpy().tolist()
    items = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    axes = set()
    for a in items:
        a = int(a)
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"{name} {a} is out of range for a tensor of rank {ndim}")
        axes.add(a % ndim if ndim else 0)
    return tuple(sorted(axes))


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _spread(dy: Tensor, op: Op) -> Tensor:
    """``dy`` broadcast back to the reduced input's shape."""
    shape = op.input_shapes[0]
    return broadcast_to(reshape(dy, _kept_shape(shape, op.attrs["axis"])), shape)


def _reducer(name: str, forward: Any, save: str) -> Any:
    opdef = OpDef(name, forward, save)

    def reduce(input_tensor: Any, axis: Axis = None, keepdims: bool = False) -> Tensor:
        x = convert_to_tensor(input_tensor)
        axes = normalize_axes(axis, x.ndim)
        return execute(opdef, (x,), {"axis": axes, "keepdims": bool(keepdims)})

    reduce.__name__ = reduce.__qualname__ = name
    return reduce


def _sum(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype if x.dtype.kind != "b" else np.int32)


def _mean(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if x.dtype.kind == "f":
        return np.mean(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
    count = _pymath.prod(x.shape[a] for a in axis)
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype) // max(count, 1)  # integer mean truncates, as TF


def _prod(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _max(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if x.size == 0:
        raise ValueError(f"reduce_max of an empty tensor of shape {x.shape}")
    return np.max(x, axis=axis, keepdims=keepdims)


def _min(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if x.size == 0:
        raise ValueError(f"reduce_min of an empty tensor of shape {x.shape}")
    return np.min(x, axis=axis, keepdims=keepdims)


reduce_sum = _reducer("Sum", _sum, save="")
reduce_mean = _reducer("Mean", _mean, save="")
reduce_prod = _reducer("Prod", _prod, save="x")
reduce_max = _reducer("Max", _max, save="x out")
reduce_min = _reducer("Min", _min, save="x out")
reduce_any = _reducer("Any", lambda x, axis, keepdims: np.any(x, axis=axis, keepdims=keepdims), save="")
reduce_all = _reducer("All", lambda x, axis, keepdims: np.all(x, axis=axis, keepdims=keepdims), save="")
not_differentiable("Any")
not_differentiable("All")


@register_gradient("Sum")
def _sum_grad(op: Op, dy: Tensor) -> Tensor:
    return _spread(dy, op)


@register_gradient("Mean")
def _mean_grad(op: Op, dy: Tensor) -> Tensor:
    count = _pymath.prod(op.input_shapes[0][a] for a in op.attrs["axis"])
    return _spread(dy, op) / max(count, 1)


def _extremum_grad(op: Op, dy: Tensor) -> Tensor:
    # Ties share the gradient equally, as in TensorFlow.
    x = op.inputs[0]
    out = reshape(op.outputs[0], _kept_shape(x.shape, op.attrs["axis"]))
    hits = cast(equal(x, out), x.dtype)
    return _spread(dy, op) * hits / reduce_sum(hits, op.attrs["axis"], keepdims=True)


register_gradient("Max")(_extremum_grad)
register_gradient("Min")(_extremum_grad)


def _prod_others(x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    """For each element, the product of the other elements along ``axis`` (exact with zeros)."""
    zero = x == 0
    zeros = np.sum(zero, axis=axis, keepdims=True)
    safe = np.where(zero, x.dtype.type(1), x)
    nonzero_prod = np.prod(safe, axis=axis, keepdims=True, dtype=x.dtype)
    no_zero = nonzero_prod / safe
    return np.where(zeros == 0, no_zero, np.where((zeros == 1) & zero, nonzero_prod, x.dtype.type(0)))


_PROD_OTHERS = OpDef("ProdOthers", _prod_others, save="x out")


@register_gradient("Prod")
def _prod_grad(op: Op, dy: Tensor) -> Tensor:
    others = execute(_PROD_OTHERS, (op.inputs[0],), {"axis": op.attrs["axis"]})
    return _spread(dy, op) * others


@register_gradient("ProdOthers")
def _prod_others_grad(op: Op, dy: Tensor) -> Tensor:
    # d(P / x_i)/dx_j = P / (x_i x_j) for j != i: exact only where x has no zeros.
    x, out = op.inputs[0], op.outputs[0]
    axes = op.attrs["axis"]
    return (reduce_sum(dy * out, axes, keepdims=True) - dy * out) / x


def reduce_logsumexp(input_tensor: Any, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """``log(reduce_sum(exp(x)))`` computed without overflow."""
    x = convert_to_tensor(input_tensor)
    axes = normalize_axes(axis, x.ndim)
    # Shifting by the (constant) max changes nothing mathematically and keeps exp finite.
    shift = np.max(x._value, axis=axes, keepdims=True) if x.size else np.zeros(_kept_shape(x.shape, axes), x.dtype)
    shift = Tensor(np.where(np.isfinite(shift), shift, 0).astype(x.dtype))
    out = log(reduce_sum(exp(x - shift), axes, keepdims=True)) + shift
    return out if keepdims else reshape(out, [n for i, n in enumerate(x.shape) if i not in axes])


def _arg(name: str, fn: Any) -> Any:
    opdef = OpDef(name, lambda x, axis, dtype: fn(x, axis=axis).astype(dtype), save="")
    not_differentiable(name)

    def arg(input: Any, axis: int = 0, output_type: Any = np.int64) -> Tensor:  # noqa: A002
        x = convert_to_tensor(input)
        (a,) = normalize_axes(int(axis), x.ndim)
        if x.shape[a] == 0:
            raise ValueError(f"{name.lower()} over an empty axis {a} of shape {x.shape}")
        return execute(opdef, (x,), {"axis": a, "dtype": np.dtype(output_type)})

    arg.__name__ = arg.__qualname__ = name.lower()
    return arg


argmax = _arg("ArgMax", np.argmax)
argmin = _arg("ArgMin", np.argmin)


def norm(tensor: Any, ord: Any = "euclidean", axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A002
    """Vector norms (``ord`` 1, 2/``"euclidean"``, ``np.inf``, any p > 0) and the Frobenius norm.

    With ``axis`` a pair, ``ord`` may also be 1 or ``np.inf`` (matrix norms), as ``tf.norm``.
    """
    x = convert_to_tensor(tensor)
    axes = normalize_axes(axis, x.ndim)
    if isinstance(axis, (list, tuple)) and len(axis) == 2 and ord in (1, np.inf):
        rows, cols = (int(a) % x.ndim for a in axis)
        inner, outer = (rows, cols) if ord == 1 else (cols, rows)
        out = reduce_max(reduce_sum(abs(x), inner, keepdims=True), outer, keepdims=True)
    elif ord in ("euclidean", "fro", 2, 2.0):
        if ord == 2 and isinstance(axis, (list, tuple)) and len(axis) == 2:
            raise ValueError("norm: the spectral norm (ord=2 over two axes) is not supported; use 'fro'")
        out = sqrt(reduce_sum(x * x, axes, keepdims=True))
    elif ord == 1:
        out = reduce_sum(abs(x), axes, keepdims=True)
    elif ord == np.inf:
        out = reduce_max(abs(x), axes, keepdims=True)
    elif isinstance(ord, (int, float)) and ord > 0:
        out = reduce_sum(abs(x) ** ord, axes, keepdims=True) ** (1.0 / ord)
    else:
        raise ValueError(f"norm: ord must be 'euclidean', 'fro', np.inf or a number > 0, got {ord!r}")
    return out if keepdims else reshape(out, [n for i, n in enumerate(x.shape) if i not in axes])


__all__ = [
    "argmax",
    "argmin",
    "norm",
    "reduce_all",
    "reduce_any",
    "reduce_logsumexp",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_prod",
    "reduce_sum",
]
