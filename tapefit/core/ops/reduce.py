"""Reductions over axes, with their gradients.

A reduction's gradient broadcasts ``dy`` back over the reduced axes:
``_spread(dy, op)`` reshapes it to the kept-dims shape and broadcasts it to the input's.
"""

from __future__ import annotations

import math as _pymath
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core.function import replay_source, writes_into
from tapefit.core.ops.math import abs, cast, equal, exp, log, sqrt, where
from tapefit.core.ops.shape import _BROADCAST_TO, _RESHAPE, gather, reshape
from tapefit.core.record import Op
from tapefit.core.registry import OpDef, execute, not_differentiable, register_gradient
from tapefit.core.tensor import Tensor, as_tensor

Axis = int | list[int] | tuple[int, ...] | None


def normalize_axes(axis: Any, ndim: int, name: str = "axis") -> tuple[int, ...]:
    """``axis`` (None, an int or a list) as sorted non-negative ints, checked against ``ndim``."""
    if axis is None:
        return tuple(range(ndim))
    if axis.__class__ is int and -ndim <= axis < ndim:  # the common case, checked in full below
        return (axis % ndim,)
    if isinstance(axis, Tensor):
        axis = axis.numpy().tolist()
    items = [axis] if isinstance(axis, (int, np.integer)) else axis
    if not isinstance(items, (list, tuple, np.ndarray)) or not all(
        isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)) for a in items
    ):
        raise TypeError(f"{name} must be None, an int or a list of ints, got {axis!r}")
    axes = set()
    for a in items:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"{name} {a} is out of range for a tensor of rank {ndim}")
        axes.add(a % ndim)
    return tuple(sorted(axes))


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _spread(dy: Tensor, op: Op) -> Tensor:
    """``dy`` broadcast back to the reduced input's shape (the ops without their argument checks:
    the forward op fixed these shapes)."""
    shape = op.input_shapes[0]
    kept = _kept_shape(shape, op.attrs["axis"])
    if dy.shape != kept:
        dy = execute(_RESHAPE, (dy,), {"shape": kept})
    if kept == shape and not dy._is_variable:  # a Variable's gradient is a Tensor, as reshape gives
        return dy
    return execute(_BROADCAST_TO, (dy,), {"shape": shape})


def _reducer(name: str, public: str, what: str, forward: Any, save: str) -> Any:
    opdef = OpDef(name, forward, save)

    def reduce(input_tensor: Any, axis: Axis = None, keepdims: bool = False) -> Tensor:
        x = as_tensor(input_tensor)
        axes = normalize_axes(axis, x.ndim)
        return execute(opdef, (x,), {"axis": axes, "keepdims": bool(keepdims)})

    reduce.__name__ = reduce.__qualname__ = public
    reduce.__doc__ = (
        f"The {what} of the elements over ``axis`` (all axes if ``None``; an int or a list,\n"
        "    negative values count from the end); ``keepdims`` keeps the reduced axes with size 1.\n"
    )
    return reduce


def _sum_source(name: Callable[[Any], str], args: list[str], attrs: dict[str, Any], out: str) -> list[str]:
    (x,) = args
    dtype = f"({x}.dtype if {x}.dtype.kind != 'b' else {name(np.int32)})"
    axis, keepdims = name(attrs["axis"]), bool(attrs["keepdims"])
    return [f"_r = {name(_add_reduce)}({x}, axis={axis}, keepdims={keepdims}, dtype={dtype}, out={out})"]


@replay_source(_sum_source)
@writes_into()
def _sum(x: np.ndarray, axis: tuple[int, ...], keepdims: bool, out: np.ndarray | None = None) -> np.ndarray:
    # np.add.reduce is what np.sum calls, without its Python wrapper (half the cost of a small sum)
    dtype = x.dtype if x.dtype.kind != "b" else np.int32
    return _add_reduce(x, axis=axis, keepdims=keepdims, dtype=dtype, out=out)


_add_reduce: Callable[..., np.ndarray] = np.add.reduce


def _mean(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if x.dtype.kind == "f":
        if 0 in x.shape:  # the mean of nothing is nan, as TF, without NumPy's warning
            return np.full(np.sum(x, axis=axis, keepdims=keepdims).shape, np.nan, x.dtype)
        # float16 accumulates in float32 (as TF's and Keras' means): its sum overflows at 65504
        work = np.float32 if x.dtype == np.float16 else x.dtype
        return np.mean(x, axis=axis, keepdims=keepdims, dtype=work).astype(x.dtype, copy=False)
    if x.dtype.kind == "b":
        raise TypeError("reduce_mean needs a numeric tensor, got bool; use tp.cast(x, tp.float32)")
    count = max(_pymath.prod(x.shape[a] for a in axis), 1)
    total = np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
    # integer mean rounds toward zero (C division, as TensorFlow), not toward -inf as // does
    return (np.sign(total) * (np.abs(total) // count)).astype(x.dtype, copy=False)


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


reduce_sum = _reducer("Sum", "reduce_sum", "sum (bool counts as int32)", _sum, save="")
reduce_mean = _reducer("Mean", "reduce_mean", "mean (integer means round toward zero, as TF)", _mean, save="")
reduce_prod = _reducer("Prod", "reduce_prod", "product", _prod, save="x")
reduce_max = _reducer("Max", "reduce_max", "maximum", _max, save="x out")
reduce_min = _reducer("Min", "reduce_min", "minimum", _min, save="x out")


def _logical_reducer(name: str, fn: Any) -> Any:
    def forward(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
        if x.dtype.kind != "b":
            raise TypeError(f"{name} needs a bool tensor, got {x.dtype.name}; compare first, e.g. x > 0")
        return fn(x, axis=axis, keepdims=keepdims)

    return forward


reduce_any = _reducer(
    "Any", "reduce_any", "logical or (bool only)", _logical_reducer("reduce_any", np.any), save=""
)
reduce_all = _reducer(
    "All", "reduce_all", "logical and (bool only)", _logical_reducer("reduce_all", np.all), save=""
)
not_differentiable("Any")
not_differentiable("All")


@register_gradient("Sum")
def _sum_grad(op: Op, dy: Tensor) -> Tensor:
    return _spread(dy, op)


@register_gradient("Mean")
def _mean_grad(op: Op, dy: Tensor) -> Tensor:
    count = _pymath.prod(op.input_shapes[0][a] for a in op.attrs["axis"])
    # Times the reciprocal: a count above 65504 is inf in float16 (dy / inf = 0), 1 / count is not.
    return _spread(dy, op) * (1 / max(count, 1))


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


def _logsumexp_shift(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if not x.size:
        return np.zeros(_kept_shape(x.shape, axes), x.dtype)
    shift = np.max(x, axis=axes, keepdims=True)
    return np.where(np.isfinite(shift), shift, 0).astype(x.dtype)


_LOGSUMEXP_SHIFT = OpDef("LogSumExpShift", _logsumexp_shift, save="")
not_differentiable("LogSumExpShift")


def reduce_logsumexp(input_tensor: Any, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """``log(reduce_sum(exp(x)))`` over ``axis``, computed without overflow (floating tensors only)."""
    x = as_tensor(input_tensor)
    if x.dtype.kind != "f":
        raise TypeError(
            f"reduce_logsumexp needs a floating tensor, got {x.dtype.name}; use tp.cast(x, tp.float32)"
        )
    axes = normalize_axes(axis, x.ndim)
    # Shifting by the (constant: not differentiated) max changes nothing mathematically and
    # keeps exp finite. An op, so that tp.function computes it from each call's values.
    shift = execute(_LOGSUMEXP_SHIFT, (x,), {"axes": axes})
    total = reduce_sum(exp(x - shift), axes, keepdims=True)
    with np.errstate(divide="ignore"):  # all -inf (or empty): log(0) = -inf is the answer
        out = log(total) + shift
    return out if keepdims else reshape(out, [n for i, n in enumerate(x.shape) if i not in axes])


def _arg(name: str, what: str, fn: Any) -> Any:
    opdef = OpDef(name, lambda x, axis, dtype: fn(x, axis=axis).astype(dtype), save="")
    not_differentiable(name)
    public = name.lower()

    def arg(input: Any, axis: int | None = None, output_type: Any = np.int64) -> Tensor:
        x = as_tensor(input)
        if not isinstance(axis, (int, np.integer, Tensor, type(None))):
            raise TypeError(f"{public}: axis must be an int, got {axis!r}")
        axes = normalize_axes(0 if axis is None else axis, x.ndim)
        if len(axes) != 1:
            raise TypeError(f"{public}: axis must be one int, got {axis!r}")
        (a,) = axes
        if x.shape[a] == 0:
            raise ValueError(f"{public} over an empty axis {a} of shape {x.shape}")
        output_type = np.dtype(output_type)
        if output_type not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise TypeError(f"{public}: output_type must be tp.int32 or tp.int64, got {output_type.name}")
        return execute(opdef, (x,), {"axis": a, "dtype": output_type})

    arg.__name__ = arg.__qualname__ = public
    arg.__doc__ = (
        f"The index of the {what} value along ``axis`` (0 when ``None``, as TensorFlow 2);\n"
        "    the first one on ties. ``output_type`` is ``tp.int64`` (default) or ``tp.int32``.\n"
    )
    return arg


argmax = _arg("ArgMax", "largest", np.argmax)
argmin = _arg("ArgMin", "smallest", np.argmin)


def norm(tensor: Any, ord: Any = "euclidean", axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Vector norms (``ord`` 1, 2/``"euclidean"``, ``np.inf``, any p > 0) and the Frobenius norm.

    With ``axis`` a pair, ``ord`` may also be 1 or ``np.inf`` (matrix norms), as ``tf.norm``.
    The gradient at an all-zero input is nan for the 2-norm, as in TensorFlow.
    """
    x = as_tensor(tensor)
    if x.dtype.kind != "f":
        raise TypeError(f"norm needs a floating tensor, got {x.dtype.name}; use tp.cast(x, tp.float32)")
    axes = normalize_axes(axis, x.ndim)
    pair = list(axis) if isinstance(axis, (list, tuple)) and len(axis) == 2 else None
    if pair is not None and len(axes) != 2:
        raise ValueError(f"norm: axis {pair} must name two different axes of a rank-{x.ndim} tensor")
    if pair is not None and ord in (1, np.inf):
        rows, cols = (int(a) % x.ndim for a in pair)
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


# -- running sums and sums by segment (the metrics' counts) -----------------------------


def _cumsum(x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    if not reverse:
        return np.cumsum(x, axis=axis, dtype=x.dtype)
    return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)


_CUMSUM = OpDef("Cumsum", _cumsum, save="")


def cumsum(x: Any, axis: int = 0, reverse: bool = False) -> Tensor:
    """The running sums of ``x`` along ``axis``, as ``tf.math.cumsum``; ``reverse`` sums from
    the end (``out[i]`` is the sum of ``x[i:]``). Numeric tensors only; the dtype is ``x``'s."""
    t = as_tensor(x)
    if t.dtype.kind not in "iuf":
        raise TypeError(f"cumsum needs a numeric tensor, got {t.dtype.name}")
    if not t.ndim:
        raise ValueError("cumsum needs a tensor of rank >= 1, got a scalar")
    (a,) = normalize_axes(operator.index(axis), t.ndim)
    return execute(_CUMSUM, (t,), {"axis": a, "reverse": bool(reverse)})


@register_gradient("Cumsum")
def _cumsum_grad(op: Op, dy: Tensor) -> Tensor:
    # out[i] = sum of x[j] for j <= i: each x[j] reaches every later out, so its gradient is
    # the sum of dy from j on (the running sum the other way).
    return cumsum(dy, op.attrs["axis"], reverse=not op.attrs["reverse"])


def _check_segments(ids: np.ndarray, num_segments: int) -> None:
    if ids.size and ids.max() >= num_segments:
        raise IndexError(
            f"segment id {ids.max()} is out of range: there are {num_segments} segments "
            "(negative ids are dropped)"
        )


def _segment_sum(data: np.ndarray, ids: np.ndarray, num_segments: int) -> np.ndarray:
    # Checked here, in the op, so that a tp.function replay checks every call's ids too.
    _check_segments(ids, num_segments)
    keep = ids >= 0
    if data.dtype == np.float64 and data.shape == ids.shape:
        # bincount adds each weight in order, in float64: what np.add.at does, faster
        return np.bincount(ids[keep], data[keep], minlength=num_segments)
    out = np.zeros((num_segments, *data.shape[ids.ndim :]), data.dtype)
    np.add.at(out, ids[keep], data[keep])
    return out


_SEGMENT_SUM = OpDef("UnsortedSegmentSum", _segment_sum, save="y")


def unsorted_segment_sum(data: Any, segment_ids: Any, num_segments: int) -> Tensor:
    """Sums of the slices of ``data`` by segment, as ``tf.math.unsorted_segment_sum``:
    ``out[s]`` is the sum of ``data[i]`` over every index ``i`` (of ``segment_ids``'s shape, a
    leading part of ``data``'s) with ``segment_ids[i] == s``, in index order; slices with a
    negative id are dropped. The result has shape ``(num_segments,) + data.shape[ids.ndim:]``.

    Raises:
        TypeError: ``data`` is not numeric, or ``segment_ids`` not integers.
        ValueError: ``segment_ids``'s shape does not lead ``data``'s.
        IndexError: an id is ``num_segments`` or more.
    """
    x, ids = as_tensor(data), as_tensor(segment_ids)
    if x.dtype.kind not in "iuf":
        raise TypeError(f"unsorted_segment_sum needs numeric data, got {x.dtype.name}")
    if ids.dtype.kind not in "iu":
        raise TypeError(f"unsorted_segment_sum: segment_ids must be integers, got {ids.dtype.name}")
    if x.shape[: ids.ndim] != ids.shape:
        raise ValueError(
            f"unsorted_segment_sum: segment_ids of shape {ids.shape} do not lead data of shape {x.shape}"
        )
    return execute(_SEGMENT_SUM, (x, ids), {"num_segments": operator.index(num_segments)})


@register_gradient("UnsortedSegmentSum")
def _segment_sum_grad(op: Op, dy: Tensor) -> tuple[Tensor, None]:
    # Each slice of data went to its segment's sum: its gradient is that segment's dy (none
    # for a dropped slice).
    ids = op.inputs[1]
    kept = ids >= 0
    picked = gather(dy, where(kept, ids, 0))
    kept = reshape(kept, kept.shape + (1,) * (picked.ndim - kept.ndim))
    return where(kept, picked, 0), None


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
