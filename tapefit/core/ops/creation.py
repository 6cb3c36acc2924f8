"""Tensors made from a shape or a value: constants, never recorded."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.ops.shape import _shape_list
from tapefit.core.tensor import Tensor, _wrap, convert_to_tensor, to_array


def zeros(shape: Any, dtype: _dt.DTypeLike = _dt.float32) -> Tensor:
    """A tensor of zeros."""
    return _wrap(np.zeros(_shape_list(shape, "zeros"), _dt.as_dtype(dtype)))


def ones(shape: Any, dtype: _dt.DTypeLike = _dt.float32) -> Tensor:
    """A tensor of ones."""
    return _wrap(np.ones(_shape_list(shape, "ones"), _dt.as_dtype(dtype)))


def zeros_like(input: Any, dtype: _dt.DTypeLike = None) -> Tensor:
    """Zeros with the shape (and dtype, unless given) of ``input``."""
    x = convert_to_tensor(input)
    return _wrap(np.zeros(x.shape, x.dtype if dtype is None else _dt.as_dtype(dtype)))


def ones_like(input: Any, dtype: _dt.DTypeLike = None) -> Tensor:
    """Ones with the shape (and dtype, unless given) of ``input``."""
    x = convert_to_tensor(input)
    return _wrap(np.ones(x.shape, x.dtype if dtype is None else _dt.as_dtype(dtype)))


def fill(dims: Any, value: Any) -> Tensor:
    """A tensor of shape ``dims`` filled with ``value`` (its dtype by the usual rules)."""
    scalar = to_array(value)
    if scalar.ndim:
        raise ValueError(f"fill: value must be a scalar, got shape {scalar.shape}")
    return _wrap(np.full(_shape_list(dims, "fill"), scalar, scalar.dtype))


def eye(num_rows: int, num_columns: int | None = None, dtype: _dt.DTypeLike = _dt.float32) -> Tensor:
    """An identity matrix (``num_rows`` x ``num_columns``)."""
    return _wrap(
        np.eye(int(num_rows), None if num_columns is None else int(num_columns), dtype=_dt.as_dtype(dtype))
    )


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: _dt.DTypeLike = None) -> Tensor:
    """``start, start + delta, ...`` up to but excluding ``limit`` (``range(n)`` counts from 0).

    The dtype is int32 for Python ints and float32 if any argument is a float, unless given.
    """
    if limit is None:
        start, limit = 0, start
    if delta == 0:
        raise ValueError("range: delta must not be 0")
    values = [to_array(v) for v in (start, limit, delta)]
    if dtype is None:
        kinds = {v.dtype.kind for v in values}
        dtype = (
            _dt.float32 if "f" in kinds else builtins.max((v.dtype for v in values), key=lambda d: d.itemsize)
        )
    dtype = _dt.as_dtype(dtype)
    return _wrap(np.arange(*(v.item() for v in values), dtype=dtype))


__all__ = ["eye", "fill", "ones", "ones_like", "range", "zeros", "zeros_like"]
