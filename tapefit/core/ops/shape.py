"""Shape ops: reshape, transpose, stacking and splitting, with their gradients.

Most of these only move elements, so their gradient moves ``dy`` back the other way.
"""

from __future__ import annotations

import math as _pymath
from typing import Any

import numpy as np

from tapefit.core.record import Op
from tapefit.core.registry import OpDef, check_same_dtype, execute, register_gradient
from tapefit.core.tensor import Tensor, convert_to_tensor


def _shape_list(shape: Any, name: str) -> tuple[int, ...]:
    if isinstance(shape, Tensor):
        shape = shape.numpy().tolist()
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    try:
        return tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: shape must be a list of ints, got {shape!r}") from None


# -- reshape and friends ----------------------------------------------------

_RESHAPE = OpDef("Reshape", lambda x, shape: x.reshape(shape), save="")


def reshape(tensor: Any, shape: Any) -> Tensor:
    """``tensor`` with a new shape of the same size; one dimension may be ``-1``."""
    x = convert_to_tensor(tensor)
    shape = _shape_list(shape, "reshape")
    if shape == x.shape:
        return x
    known = _pymath.prod(n for n in shape if n != -1)
    if shape.count(-1) > 1 or (-1 not in shape and known != x.size) or (-1 in shape and (known == 0 or x.size % known)):
        raise ValueError(f"reshape: cannot reshape a tensor of shape {x.shape} ({x.size} elements) to {list(shape)}")
    return execute(_RESHAPE, (x,), {"shape": shape})


@register_gradient("Reshape")
def _reshape_grad(op: Op, dy: Tensor) -> Tensor:
    return reshape(dy, op.input_shapes[0])


def expand_dims(input: Any, axis: int) -> Tensor:  # noqa: A002
    """``input`` with a new axis of size 1 inserted at ``axis``."""
    x = convert_to_tensor(input)
    axis = int(axis)
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise ValueError(f"expand_dims: axis {axis} is out of range for a tensor of rank {x.ndim}")
    axis = axis % (x.ndim + 1)
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def squeeze(input: Any, axis: Any = None) -> Tensor:  # noqa: A002
    """``input`` without its size-1 axes (or only those in ``axis``)."""
    x = convert_to_tensor(input)
    if axis is None:
        axes = {i for i, n in enumerate(x.shape) if n == 1}
    else:
        axes = {int(a) % max(x.ndim, 1) for a in ([axis] if isinstance(axis, int) else axis)}
        bad = [a for a in sorted(axes) if a >= x.ndim or x.shape[a] != 1]
        if bad:
            raise ValueError(f"squeeze: axis {bad[0]} of shape {x.shape} does not have size 1")
    return reshape(x, [n for i, n in enumerate(x.shape) if i not in axes])


_TRANSPOSE = OpDef("Transpose", lambda x, perm: np.transpose(x, perm), save="")


def transpose(a: Any, perm: Any = None) -> Tensor:
    """``a`` with its axes permuted by ``perm`` (reversed by default)."""
    x = convert_to_tensor(a)
    perm = tuple(range(x.ndim))[::-1] if perm is None else _shape_list(perm, "transpose")
    if sorted(p % max(x.ndim, 1) for p in perm) != list(range(x.ndim)):
        raise ValueError(f"transpose: perm {list(perm)} is not a permutation of the {x.ndim} axes of shape {x.shape}")
    return execute(_TRANSPOSE, (x,), {"perm": tuple(p % x.ndim for p in perm)})


@register_gradient("Transpose")
def _transpose_grad(op: Op, dy: Tensor) -> Tensor:
    return transpose(dy, np.argsort(op.attrs["perm"]).tolist())


_BROADCAST_TO = OpDef("BroadcastTo", lambda x, shape: np.broadcast_to(x, shape), save="")


def broadcast_to(input: Any, shape: Any) -> Tensor:  # noqa: A002
    """``input`` broadcast to ``shape`` by NumPy's rules."""
    x = convert_to_tensor(input)
    shape = _shape_list(shape, "broadcast_to")
    if shape == x.shape:
        return x
    return execute(_BROADCAST_TO, (x,), {"shape": shape})


@register_gradient("BroadcastTo")
def _broadcast_to_grad(op: Op, dy: Tensor) -> Tensor:
    return dy  # the tape sums it back to the input's shape


# -- joining and splitting --------------------------------------------------


def _axis(axis: int, ndim: int, name: str) -> int:
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def _tensors(values: Any, name: str) -> tuple[Tensor, ...]:
    if isinstance(values, Tensor) or not values:
        raise ValueError(f"{name} needs a non-empty list of tensors")
    tensors = tuple(convert_to_tensor(v) for v in values)
    check_same_dtype(name, tensors)
    return tensors


_CONCAT = OpDef("ConcatV2", lambda *xs, axis: np.concatenate(xs, axis=axis), save="")


def concat(values: Any, axis: int) -> Tensor:
    """Joins tensors along an existing axis."""
    tensors = _tensors(values, "concat")
    axis = _axis(axis, tensors[0].ndim, "concat")
    return execute(_CONCAT, tensors, {"axis": axis})


@register_gradient("ConcatV2")
def _concat_grad(op: Op, dy: Tensor) -> tuple[Tensor, ...]:
    axis = op.attrs["axis"]
    return tuple(split(dy, [s[axis] for s in op.input_shapes], axis=axis))


_STACK = OpDef("Pack", lambda *xs, axis: np.stack(xs, axis=axis), save="")


def stack(values: Any, axis: int = 0) -> Tensor:
    """Joins tensors of one shape along a new axis."""
    tensors = _tensors(values, "stack")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise ValueError(f"stack needs tensors of one shape, got shapes {sorted(shapes)}")
    axis = _axis(axis, tensors[0].ndim + 1, "stack")
    return execute(_STACK, tensors, {"axis": axis})


@register_gradient("Pack")
def _stack_grad(op: Op, dy: Tensor) -> tuple[Tensor, ...]:
    return tuple(unstack(dy, axis=op.attrs["axis"]))


def unstack(value: Any, num: int | None = None, axis: int = 0) -> list[Tensor]:
    """Splits a tensor into the list of its slices along ``axis``."""
    x = convert_to_tensor(value)
    axis = _axis(axis, x.ndim, "unstack")
    if num is not None and num != x.shape[axis]:
        raise ValueError(f"unstack: num={num} but axis {axis} of shape {x.shape} has {x.shape[axis]} entries")
    rest = x.shape[:axis] + x.shape[axis + 1 :]
    return [reshape(part, rest) for part in split(x, x.shape[axis], axis=axis)]


def _split(x: np.ndarray, sizes: tuple[int, ...], axis: int) -> tuple[np.ndarray, ...]:
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


_SPLIT = OpDef("SplitV", _split, save="")


def split(value: Any, num_or_size_splits: Any, axis: int = 0) -> list[Tensor]:
    """Splits ``value`` along ``axis`` into equal parts or parts of the given sizes."""
    x = convert_to_tensor(value)
    axis = _axis(axis, x.ndim, "split")
    length = x.shape[axis]
    if isinstance(num_or_size_splits, (int, np.integer)):
        count = int(num_or_size_splits)
        if count <= 0 or length % count:
            raise ValueError(f"split: axis {axis} of shape {x.shape} does not divide into {count} equal parts")
        sizes = (length // count,) * count
    else:
        sizes = _shape_list(num_or_size_splits, "split")
        if sizes.count(-1) == 1:
            sizes = tuple(length - (sum(sizes) + 1) if n == -1 else n for n in sizes)
        if sum(sizes) != length or any(n < 0 for n in sizes):
            raise ValueError(f"split: sizes {list(sizes)} do not add up to {length} (axis {axis} of shape {x.shape})")
    return list(execute(_SPLIT, (x,), {"sizes": sizes, "axis": axis}))


@register_gradient("SplitV")
def _split_grad(op: Op, *dys: Tensor) -> Tensor:
    return concat(dys, axis=op.attrs["axis"])


__all__ = [
    "broadcast_to",
    "concat",
    "expand_dims",
    "reshape",
    "split",
    "squeeze",
    "stack",
    "transpose",
    "unstack",
]


# -- indexing ---------------------------------------------------------------


def _index_key(key: Any) -> Any:
    """``key`` with tensors and lists turned into ndarrays, as NumPy indexing takes them."""
    if isinstance(key, tuple):
        return tuple(_index_key(k) for k in key)
    if isinstance(key, Tensor):
        return key._value
    if isinstance(key, list):
        return np.asarray([k._value if isinstance(k, Tensor) else k for k in key])
    return key


def _is_basic(key: Any) -> bool:
    parts = key if isinstance(key, tuple) else (key,)
    return all(p is None or p is Ellipsis or isinstance(p, (slice, int, np.integer)) for p in parts)


_GETITEM = OpDef("GetItem", lambda x, key: x[key], save="")


def _scatter(dy: np.ndarray, key: Any, shape: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(shape, dy.dtype)
    if _is_basic(key):
        out[key] = dy  # basic indexing never selects an element twice
    else:
        np.add.at(out, key, dy)  # repeated indices add up
    return out


_GETITEM_GRAD = OpDef("GetItemGrad", _scatter, save="")


def getitem(tensor: Any, key: Any) -> Tensor:
    """``tensor[key]`` with NumPy's basic and integer-array indexing; differentiable."""
    x = convert_to_tensor(tensor)
    key = _index_key(key)
    return execute(_GETITEM, (x,), {"key": key})


@register_gradient("GetItem")
def _getitem_grad(op: Op, dy: Tensor) -> Tensor:
    return execute(_GETITEM_GRAD, (dy,), {"key": op.attrs["key"], "shape": op.input_shapes[0]})


@register_gradient("GetItemGrad")
def _getitem_grad_grad(op: Op, dy: Tensor) -> Tensor:
    return getitem(dy, op.attrs["key"])


__all__ += ["getitem"]
