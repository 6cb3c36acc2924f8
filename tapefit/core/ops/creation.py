"""Tensors made from a shape or a value: constants, never recorded (but ``convert_to_tensor``
of a Variable, which reads it through a recorded ``identity``)."""

from __future__ import annotations

import builtins
import math as _pymath
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.ops.math import identity
from tapefit.core.ops.shape import _shape_list
from tapefit.core.tensor import Tensor, Variable, _wrap, as_tensor, to_array


def checked_shape(shape: Any, name: str) -> tuple[int, ...]:
    """``shape`` (an int, a list/tuple of ints or an integer Tensor) as a tuple of non-negative ints.

    Raises:
        TypeError: a dimension is not an int (``2.5`` is never silently truncated).
        ValueError: a dimension is negative.
    """
    dims = _shape_list(shape, name)
    if any(n < 0 for n in dims):
        raise ValueError(f"{name}: shape {list(dims)} has a negative dimension")
    return dims


def _dtype_or_float32(dtype: _dt.DTypeLike) -> np.dtype:
    # None is the default, float32, as in Keras 3 (NumPy would read None as float64).
    return _dt.float32 if dtype is None else _dt.as_dtype(dtype)


def zeros(shape: Any, dtype: _dt.DTypeLike = _dt.float32) -> Tensor:
    """A tensor of zeros of ``shape`` (an int or a list of ints) and ``dtype`` (``None``: float32)."""
    return _wrap(np.zeros(checked_shape(shape, "zeros"), _dtype_or_float32(dtype)))


def ones(shape: Any, dtype: _dt.DTypeLike = _dt.float32) -> Tensor:
    """A tensor of ones of ``shape`` (an int or a list of ints) and ``dtype`` (``None``: float32)."""
    return _wrap(np.ones(checked_shape(shape, "ones"), _dtype_or_float32(dtype)))


def zeros_like(input: Any, dtype: _dt.DTypeLike = None) -> Tensor:
    """Zeros with the shape (and dtype, unless given) of ``input``."""
    x = as_tensor(input)
    return _wrap(np.zeros(x.shape, x.dtype if dtype is None else _dt.as_dtype(dtype)))


def ones_like(input: Any, dtype: _dt.DTypeLike = None) -> Tensor:
    """Ones with the shape (and dtype, unless given) of ``input``."""
    x = as_tensor(input)
    return _wrap(np.ones(x.shape, x.dtype if dtype is None else _dt.as_dtype(dtype)))


def fill(dims: Any, value: Any) -> Tensor:
    """A tensor of shape ``dims`` filled with the scalar ``value``.

    The dtype is ``value``'s by the usual rules: a Python float gives float32, an int
    int32, a Tensor or NumPy value keeps its own.
    """
    scalar = to_array(value)
    if scalar.ndim:
        raise ValueError(f"fill: value must be a scalar, got shape {scalar.shape}")
    return _wrap(np.full(checked_shape(dims, "fill"), scalar, scalar.dtype))


def eye(
    num_rows: int,
    num_columns: int | None = None,
    batch_shape: Any = None,
    dtype: _dt.DTypeLike = _dt.float32,
) -> Tensor:
    """An identity matrix of shape ``(num_rows, num_columns)`` (square by default).

    ``batch_shape`` stacks copies of it in front, as ``tf.eye``; ``dtype=None`` is float32.
    """
    rows, cols = checked_shape([num_rows, num_rows if num_columns is None else num_columns], "eye")
    matrix = np.eye(rows, cols, dtype=_dtype_or_float32(dtype))
    if batch_shape is not None:
        batch = checked_shape(batch_shape, "eye (batch_shape)")
        matrix = np.broadcast_to(matrix, batch + matrix.shape).copy()
    return _wrap(matrix)


# TensorFlow's order for inferring range's dtype: the widest of its arguments' dtypes.
_RANGE_DTYPES = (_dt.int32, _dt.int64, _dt.float32, _dt.float64)


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: _dt.DTypeLike = None) -> Tensor:
    """``start, start + delta, ...`` up to but excluding ``limit``, as ``tf.range``.

    ``range(n)`` counts from 0. Without ``dtype``, the dtype is the widest of the arguments'
    (Python ints int32, Python floats float32, NumPy values and Tensors their own); with
    ``dtype``, the arguments are converted to it first.

    Raises:
        ValueError: ``delta`` is 0, or it points away from ``limit`` (TensorFlow requires
            ``start <= limit`` for ``delta > 0`` and ``start >= limit`` for ``delta < 0``).
    """
    if limit is None:
        start, limit = 0, start
    values = []
    for label, v in (("start", start), ("limit", limit), ("delta", delta)):
        array = to_array(v)
        if array.ndim or array.dtype not in _RANGE_DTYPES:
            raise TypeError(f"range: {label} must be an int or float scalar, got {v!r}")
        values.append(array)
    if dtype is None:
        dtype = builtins.max((a.dtype for a in values), key=_RANGE_DTYPES.index)
    dtype = _dt.as_dtype(dtype)
    if dtype not in _RANGE_DTYPES:
        raise TypeError(f"range: dtype must be one of int32, int64, float32, float64, got {dtype.name}")
    first, last, step = (a.astype(dtype).item() for a in values)
    if step == 0:
        raise ValueError(f"range: delta must not be 0 (got {delta!r} as {dtype.name})")
    if (step > 0 and first > last) or (step < 0 and first < last):
        raise ValueError(
            f"range: start {first} and limit {last} do not match the sign of delta {step}; "
            f"delta > 0 needs start <= limit, delta < 0 needs start >= limit"
        )
    if dtype.kind == "f":
        # computed in the dtype, as TensorFlow, so float32 steps like 0.1 do not add an element
        span = (np.array(last, dtype) - np.array(first, dtype)) / np.array(step, dtype)
        size = _pymath.ceil(builtins.abs(float(span)))
    else:
        size = (builtins.abs(last - first) + builtins.abs(step) - 1) // builtins.abs(step)
    return _wrap(np.arange(size, dtype=dtype) * np.array(step, dtype) + np.array(first, dtype))


def convert_to_tensor(value: Any, dtype: _dt.DTypeLike = None) -> Tensor:
    """``value`` as a Tensor, as ``tf.convert_to_tensor``.

    A Tensor comes back as it is; a Variable gives a Tensor of its current value (an
    ``identity``, so gradients reach the Variable, and a later ``assign`` leaves it as it
    is); a list holding Tensors is packed with recorded ``stack`` ops; anything else
    becomes a constant (see ``tp.constant`` for the dtypes).

    Raises:
        TypeError: ``value`` is a Tensor of another dtype than ``dtype``.
    """
    tensor = as_tensor(value, dtype)
    return identity(tensor) if isinstance(tensor, Variable) else tensor


def linspace(start: Any, stop: Any, num: int, dtype: _dt.DTypeLike = _dt.float32) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop``, both included (``tf.linspace``,
    Keras's ``ops.linspace``); float32 unless ``dtype`` says otherwise.

    Raises:
        ValueError: ``num`` is not a non-negative integer.
    """
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 0:
        raise ValueError(f"linspace: num must be a non-negative integer, got {num!r}")
    return _wrap(np.linspace(float(start), float(stop), int(num), dtype=_dtype_or_float32(dtype)))


def shape(x: Any) -> tuple[int, ...]:
    """The shape of ``x`` as a tuple of ints (Keras's ``ops.shape``): a layer reads the batch
    size of its input with ``tp.shape(x)[0]``. A symbolic input's unknown axes are ``None``."""
    value = getattr(x, "shape", None)
    if value is None:
        value = np.shape(x)
    return tuple(value)


# ``shape`` is not in __all__: the ops package's ``shape`` is the module of shape ops, so
# ``tp.shape`` is imported by its full path (tapefit/core/__init__.py).
__all__ = [
    "convert_to_tensor",
    "eye",
    "fill",
    "linspace",
    "ones",
    "ones_like",
    "range",
    "zeros",
    "zeros_like",
]
