"""Shape ops: reshape, transpose, joining, tiling, padding, gathering and indexing.

Most of these only move elements, so their gradient moves ``dy`` back the other way:
a slice's gradient is a scatter into zeros, a gather's a scatter-add, a tile's a sum
over the copies. Each scatter op has its own gradient (the matching slice or
gather), so second derivatives work.
"""

from __future__ import annotations

import math as _pymath
import operator
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.record import Op
from tapefit.core.registry import OpDef, execute, not_differentiable, register_gradient, same_dtype_tensors
from tapefit.core.tensor import Tensor, as_tensor, to_array


def _shape_list(shape: Any, name: str) -> tuple[int, ...]:
    """``shape`` (an int, a list of ints or an integer tensor) as a tuple of Python ints."""
    if isinstance(shape, Tensor):
        if shape.dtype.kind not in "iu":
            raise TypeError(f"{name}: shape must hold integers, got a tensor of dtype {shape.dtype.name}")
        shape = shape._value.tolist()
    elif isinstance(shape, np.ndarray):
        shape = shape.tolist()
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    try:
        # operator.index refuses floats: 2.5 must not silently become 2
        return tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"{name}: shape must be a list of ints, got {shape!r}") from None


def _axis(axis: Any, ndim: int, name: str) -> int:
    """One axis in ``[-ndim, ndim)`` as a non-negative int."""
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"{name}: axis must be an int, got {axis!r}") from None
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


# -- reshape and friends ----------------------------------------------------

_RESHAPE = OpDef("Reshape", lambda x, shape: x.reshape(shape), save="")


def reshape(tensor: Any, shape: Any) -> Tensor:
    """``tensor`` with a new shape of the same size; one dimension may be ``-1``.

    Raises:
        ValueError: the sizes differ, a dimension is below -1, or -1 appears twice or
            cannot be inferred.
    """
    x = as_tensor(tensor)
    shape = _shape_list(shape, "reshape")
    if shape == x.shape and not x._is_variable:  # a Variable still gets a Tensor (a snapshot)
        return x
    known = _pymath.prod(n for n in shape if n != -1)
    if -1 in shape:
        bad = shape.count(-1) > 1 or known == 0 or x.size % known != 0
    else:
        bad = known != x.size
    if bad or any(n < -1 for n in shape):
        raise ValueError(
            f"reshape: cannot reshape a tensor of shape {x.shape} ({x.size} elements) to {list(shape)}"
        )
    return execute(_RESHAPE, (x,), {"shape": shape})


@register_gradient("Reshape")
def _reshape_grad(op: Op, dy: Tensor) -> Tensor:
    return reshape(dy, op.input_shapes[0])


def expand_dims(input: Any, axis: int) -> Tensor:
    """``input`` with a new axis of size 1 inserted at ``axis`` (negative counts from the end)."""
    x = as_tensor(input)
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"expand_dims: axis must be an int, got {axis!r}") from None
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise ValueError(
            f"expand_dims: axis {axis} is out of range [{-x.ndim - 1}, {x.ndim}] for a tensor of shape {x.shape}"
        )
    axis %= x.ndim + 1
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def squeeze(input: Any, axis: Any = None) -> Tensor:
    """``input`` without its size-1 axes, or only those listed in ``axis``.

    Raises:
        ValueError: an axis in ``axis`` is out of range or does not have size 1.
    """
    x = as_tensor(input)
    if axis is None:
        axes = {i for i, n in enumerate(x.shape) if n == 1}
    else:
        items = [axis] if isinstance(axis, (int, np.integer)) else axis
        if not isinstance(items, (list, tuple)):
            raise TypeError(f"squeeze: axis must be None, an int or a list of ints, got {axis!r}")
        axes = {_axis(a, x.ndim, "squeeze") for a in items}
        bad = [a for a in sorted(axes) if x.shape[a] != 1]
        if bad:
            raise ValueError(f"squeeze: axis {bad[0]} of shape {x.shape} has size {x.shape[bad[0]]}, not 1")
    return reshape(x, [n for i, n in enumerate(x.shape) if i not in axes])


_TRANSPOSE = OpDef("Transpose", lambda x, perm: np.transpose(x, perm), save="")


def transpose(a: Any, perm: Any = None) -> Tensor:
    """``a`` with its axes permuted: output axis ``i`` is input axis ``perm[i]`` (reversed by default)."""
    x = as_tensor(a)
    if perm is None:
        perm = tuple(range(x.ndim))[::-1]
    else:
        given = _shape_list(perm, "transpose")
        perm = tuple(p % x.ndim if -x.ndim <= p < x.ndim else -1 for p in given)
        if sorted(perm) != list(range(x.ndim)):
            raise ValueError(
                f"transpose: perm {list(given)} is not a permutation of the {x.ndim} axes of shape {x.shape}"
            )
    return execute(_TRANSPOSE, (x,), {"perm": perm})


@register_gradient("Transpose")
def _transpose_grad(op: Op, dy: Tensor) -> Tensor:
    return transpose(dy, np.argsort(op.attrs["perm"]).tolist())


_BROADCAST_TO = OpDef("BroadcastTo", lambda x, shape: np.broadcast_to(x, shape), save="")


def broadcast_to(input: Any, shape: Any) -> Tensor:
    """``input`` broadcast to ``shape`` (each axis of ``input`` is 1 or equal to the target's).

    Raises:
        ValueError: ``input``'s shape does not broadcast to ``shape``.
    """
    x = as_tensor(input)
    shape = _shape_list(shape, "broadcast_to")
    if shape == x.shape and not x._is_variable:  # a Variable still gets a Tensor (a snapshot)
        return x
    extra = len(shape) - x.ndim
    if (
        extra < 0
        or any(n < 0 for n in shape)
        or any(n not in (1, shape[extra + i]) for i, n in enumerate(x.shape))
    ):
        raise ValueError(
            f"broadcast_to: a tensor of shape {x.shape} cannot be broadcast to shape {list(shape)}"
        )
    return execute(_BROADCAST_TO, (x,), {"shape": shape})


@register_gradient("BroadcastTo")
def _broadcast_to_grad(op: Op, dy: Tensor) -> Tensor:
    return dy  # the tape sums it back to the input's shape


# -- joining and splitting --------------------------------------------------


def _tensors(values: Any, name: str) -> tuple[Tensor, ...]:
    if isinstance(values, (Tensor, np.ndarray)) or not values:
        raise ValueError(f"{name} needs a non-empty list of tensors")
    return same_dtype_tensors(name, values)


_CONCAT = OpDef("ConcatV2", lambda *xs, axis: np.concatenate(xs, axis=axis), save="")


def concat(values: Any, axis: int) -> Tensor:
    """Joins tensors along an existing axis; the other axes must match.

    Raises:
        ValueError: the ranks differ or the shapes differ outside ``axis``.
    """
    tensors = _tensors(values, "concat")
    first = tensors[0]
    if first.ndim == 0:
        raise ValueError("concat: cannot join scalars (shape ()); use tp.stack")
    axis = _axis(axis, first.ndim, "concat")
    for t in tensors[1:]:
        if t.ndim != first.ndim or any(
            n != m for i, (n, m) in enumerate(zip(t.shape, first.shape)) if i != axis
        ):
            shapes = ", ".join(str(s.shape) for s in tensors)
            raise ValueError(f"concat: shapes {shapes} must match in every axis but axis {axis}")
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
    x = as_tensor(value)
    axis = _axis(axis, x.ndim, "unstack")
    if num is not None and num != x.shape[axis]:
        raise ValueError(f"unstack: num={num} but axis {axis} of shape {x.shape} has {x.shape[axis]} entries")
    if x.shape[axis] == 0:
        return []
    return list(execute(_UNSTACK, (x,), {"axis": axis}))


# One op with a view per slice: an RNN unstacks its time steps, and split + reshape would
# record two ops per step each way.
_UNSTACK = OpDef("Unpack", lambda x, axis: tuple(np.moveaxis(x, axis, 0)), save="")


@register_gradient("Unpack")
def _unstack_grad(op: Op, *dys: Tensor) -> Tensor:
    return stack(dys, axis=op.attrs["axis"])


def _split(x: np.ndarray, sizes: tuple[int, ...], axis: int) -> tuple[np.ndarray, ...]:
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


_SPLIT = OpDef("SplitV", _split, save="")


def split(value: Any, num_or_size_splits: Any, axis: int = 0) -> list[Tensor]:
    """Splits ``value`` along ``axis`` into ``num`` equal parts or parts of the given sizes.

    ``num_or_size_splits`` is an int (or a scalar integer tensor) or a list of sizes,
    one of which may be ``-1`` (the rest), as ``tf.split``.
    """
    x = as_tensor(value)
    axis = _axis(axis, x.ndim, "split")
    length = x.shape[axis]
    if isinstance(num_or_size_splits, Tensor) and num_or_size_splits.ndim == 0:
        num_or_size_splits = int(num_or_size_splits)
    if isinstance(num_or_size_splits, (int, np.integer)):
        count = int(num_or_size_splits)
        if count <= 0 or length % count:
            raise ValueError(
                f"split: axis {axis} of shape {x.shape} does not divide into {count} equal parts"
            )
        sizes = (length // count,) * count
    else:
        sizes = _shape_list(num_or_size_splits, "split")
        if sizes.count(-1) == 1:
            sizes = tuple(length - (sum(sizes) + 1) if n == -1 else n for n in sizes)
        if not sizes or sum(sizes) != length or any(n < 0 for n in sizes):
            raise ValueError(
                f"split: sizes {list(sizes)} do not add up to {length} (axis {axis} of shape {x.shape})"
            )
    return list(execute(_SPLIT, (x,), {"sizes": sizes, "axis": axis}))


@register_gradient("SplitV")
def _split_grad(op: Op, *dys: Tensor) -> Tensor:
    return concat(dys, axis=op.attrs["axis"])


# -- tile -------------------------------------------------------------------

_TILE = OpDef("Tile", lambda x, multiples: np.tile(x, multiples), save="")


def tile(input: Any, multiples: Any) -> Tensor:
    """``input`` repeated ``multiples[i]`` times along axis ``i``, as ``tf.tile``.

    Raises:
        ValueError: ``multiples`` does not have one non-negative entry per axis.
    """
    x = as_tensor(input)
    multiples = _shape_list(multiples, "tile")
    if len(multiples) != x.ndim or any(m < 0 for m in multiples):
        raise ValueError(
            f"tile: multiples {list(multiples)} must have one non-negative entry per axis of shape {x.shape}"
        )
    return execute(_TILE, (x,), {"multiples": multiples})


@register_gradient("Tile")
def _tile_grad(op: Op, dy: Tensor) -> Tensor:
    # Imported here: reduce.py imports this module at load time.
    from tapefit.core.ops.reduce import reduce_sum

    # The output axis of size m * n, seen as (m, n), holds m copies of the input axis: sum them.
    copies = [v for m, n in zip(op.attrs["multiples"], op.input_shapes[0]) for v in (m, n)]
    return reduce_sum(reshape(dy, copies), axis=list(range(0, len(copies), 2)))


# -- pad --------------------------------------------------------------------

_PAD_MODES = ("CONSTANT", "REFLECT", "SYMMETRIC")


def _paddings(paddings: Any, x: Tensor) -> tuple[tuple[int, int], ...]:
    if isinstance(paddings, Tensor):
        paddings = paddings._value
    try:
        array = np.asarray(paddings)
    except ValueError:  # ragged nested lists
        raise ValueError(f"pad: paddings must be a ({x.ndim}, 2) list of ints, got {paddings!r}") from None
    if array.dtype.kind not in "iu" and array.size:
        raise TypeError(f"pad: paddings must be integers, got {paddings!r}")
    if array.shape != (x.ndim, 2):
        raise ValueError(
            f"pad: paddings must have shape ({x.ndim}, 2), one [before, after] pair per axis of "
            f"shape {x.shape}; got shape {array.shape}"
        )
    if (array < 0).any():
        raise ValueError(f"pad: paddings must be non-negative, got {array.tolist()}")
    return tuple((int(b), int(a)) for b, a in array)


def _constant_pad(x: np.ndarray, paddings: tuple[tuple[int, int], ...], value: np.ndarray) -> np.ndarray:
    return np.pad(x, paddings, mode="constant", constant_values=value)


def _mirror_pad(x: np.ndarray, paddings: tuple[tuple[int, int], ...], mode: str) -> np.ndarray:
    return np.pad(x, paddings, mode="reflect" if mode == "REFLECT" else "symmetric")


def _mirror_pad_grad(dy: np.ndarray, paddings: tuple[tuple[int, int], ...], mode: str) -> np.ndarray:
    """Folds a mirror-padded gradient back onto the elements each padded entry copied."""
    # REFLECT copies x[1], x[2], ... to the left and x[n-2], ... to the right; SYMMETRIC
    # starts at x[0] and x[n-1]. Each side, reversed, adds onto that run of elements.
    offset = 1 if mode == "REFLECT" else 0
    g = dy
    for axis, (before, after) in enumerate(paddings):
        if not before and not after:
            continue
        moved = np.moveaxis(g, axis, 0)
        n = moved.shape[0] - before - after
        core = moved[before : before + n].copy()
        if before:
            core[offset : offset + before] += moved[:before][::-1]
        if after:
            core[n - offset - after : n - offset] += moved[before + n :][::-1]
        g = np.moveaxis(core, 0, axis)
    return g


_PAD = OpDef("PadV2", _constant_pad, save="")
_MIRROR_PAD = OpDef("MirrorPad", _mirror_pad, save="")
_MIRROR_PAD_GRAD = OpDef("MirrorPadGrad", _mirror_pad_grad, save="")


def pad(tensor: Any, paddings: Any, mode: str = "CONSTANT", constant_values: Any = 0) -> Tensor:
    """``tensor`` padded by ``paddings[i] = [before, after]`` entries along axis ``i``, as ``tf.pad``.

    Args:
        tensor: the tensor to pad.
        paddings: integers of shape ``(rank, 2)``.
        mode: ``"CONSTANT"`` (fill with ``constant_values``), ``"REFLECT"`` (mirror
            without repeating the edge: at most ``size - 1`` per side) or
            ``"SYMMETRIC"`` (mirror with the edge: at most ``size`` per side); case-insensitive.
        constant_values: a scalar of ``tensor``'s dtype. As in TensorFlow, no gradient
            flows to it.

    Raises:
        ValueError: bad ``paddings`` shape, negative or too large paddings, or an unknown mode.
    """
    x = as_tensor(tensor)
    mode_name = mode.upper() if isinstance(mode, str) else mode
    if mode_name not in _PAD_MODES:
        raise ValueError(f"pad: mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    pads = _paddings(paddings, x)
    if mode_name == "CONSTANT":
        if isinstance(constant_values, (Tensor, np.ndarray, np.generic)):
            value = np.asarray(constant_values)
            if value.dtype != x.dtype:
                raise _dt.mix_error("pad (constant_values)", [x.dtype, value.dtype])
        else:
            value = to_array(constant_values, x.dtype)
        if value.ndim:
            raise ValueError(f"pad: constant_values must be a scalar, got shape {value.shape}")
        return execute(_PAD, (x,), {"paddings": pads, "value": value})
    limit = 1 if mode_name == "REFLECT" else 0
    for axis, (n, pair) in enumerate(zip(x.shape, pads)):
        if max(pair) > n - limit:
            raise ValueError(
                f"pad: {mode_name} paddings {list(pair)} are too large for axis {axis} of shape {x.shape} "
                f"(at most {n - limit} per side)"
            )
    return execute(_MIRROR_PAD, (x,), {"paddings": pads, "mode": mode_name})


@register_gradient("PadV2")
def _pad_grad(op: Op, dy: Tensor) -> Tensor:
    inner = tuple(slice(b, b + n) for (b, _), n in zip(op.attrs["paddings"], op.input_shapes[0]))
    return getitem(dy, inner)


@register_gradient("MirrorPad")
def _mirror_pad_grad_fn(op: Op, dy: Tensor) -> Tensor:
    return execute(_MIRROR_PAD_GRAD, (dy,), op.attrs)


@register_gradient("MirrorPadGrad")
def _mirror_pad_grad_grad(op: Op, dy: Tensor) -> Tensor:
    # MirrorPadGrad is the adjoint of the linear map MirrorPad, and vice versa.
    return execute(_MIRROR_PAD, (dy,), op.attrs)


# -- gather -----------------------------------------------------------------


def _gather_key(indices: np.ndarray, axis: int, batch_dims: int) -> tuple[Any, ...]:
    """The NumPy index that picks ``params[..., indices, ...]`` along ``axis``, per batch."""
    batch = []
    for k in range(batch_dims):
        shape = [1] * indices.ndim
        shape[k] = indices.shape[k]
        batch.append(np.arange(indices.shape[k]).reshape(shape))
    return (*batch, *(slice(None),) * (axis - batch_dims), indices)


def _gather_perm(ndim_out: int, ndim_indices: int, axis: int, batch_dims: int) -> list[int] | None:
    """How NumPy's result axes (batch, indices, middle, rest) map to TF's (batch, middle, indices, rest).

    NumPy moves several advanced indices separated by slices to the front; ``None``
    when no move happens (no batch dimensions, or ``axis == batch_dims``).
    """
    middle = axis - batch_dims
    if not batch_dims or not middle:
        return None
    inner = ndim_indices - batch_dims
    b = batch_dims
    return [
        *range(b),
        *range(b + inner, b + inner + middle),
        *range(b, b + inner),
        *range(b + inner + middle, ndim_out),
    ]


def _check_indices(indices: np.ndarray, shape: tuple[int, ...], axis: int) -> None:
    n = shape[axis]
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        bad = indices[(indices < 0) | (indices >= n)].flat[0]
        raise IndexError(
            f"gather: index {bad} is out of range [0, {n}) for axis {axis} of params of shape {shape} "
            f"(indices from {indices.min()} to {indices.max()})"
        )


def _gather(params: np.ndarray, indices: np.ndarray, axis: int, batch_dims: int) -> np.ndarray:
    # Checked here, in the op, so that a tp.function replay checks every call's indices too
    # (NumPy would wrap a negative index around silently; TensorFlow refuses it).
    _check_indices(indices, params.shape, axis)
    if not batch_dims:
        return np.take(params, indices, axis=axis)
    out = params[_gather_key(indices, axis, batch_dims)]
    perm = _gather_perm(out.ndim, indices.ndim, axis, batch_dims)
    return out if perm is None else np.transpose(out, perm)


def _gather_grad(
    dy: np.ndarray, indices: np.ndarray, axis: int, batch_dims: int, shape: tuple[int, ...]
) -> np.ndarray:
    """Scatter-add: ``dy``'s slices summed into zeros of ``shape`` where ``gather`` took them."""
    out = np.zeros(shape, dy.dtype)
    perm = _gather_perm(dy.ndim, indices.ndim, axis, batch_dims)
    if perm is not None:
        dy = np.transpose(dy, np.argsort(perm))
    np.add.at(out, _gather_key(indices, axis, batch_dims), dy)  # repeated indices add up
    return out


_GATHER = OpDef("GatherV2", _gather, save="y")
_GATHER_GRAD = OpDef("GatherGrad", _gather_grad, save="y")


def gather(params: Any, indices: Any, axis: int | None = None, batch_dims: int = 0) -> Tensor:
    """Slices of ``params`` along ``axis`` picked by integer ``indices``, as ``tf.gather``.

    The result has shape ``params.shape[:axis] + indices.shape[batch_dims:] +
    params.shape[axis + 1:]``. With ``batch_dims = b``, the first ``b`` axes of
    ``params`` and ``indices`` are batch axes that must match, and each batch picks
    from its own slice. ``axis`` defaults to ``batch_dims`` (0), as in TensorFlow;
    negative ``axis`` and ``batch_dims`` count from the end. Unlike ``tf.gather``'s
    positional order, ``axis`` is the third argument (TF's deprecated
    ``validate_indices`` is not taken). Repeated indices add up in the gradient.

    Raises:
        TypeError: ``indices`` is not an integer tensor.
        IndexError: an index is negative or not below ``params.shape[axis]`` (TensorFlow
            on CPU raises too).
        ValueError: bad ``axis``/``batch_dims`` or mismatched batch axes.
    """
    x = as_tensor(params)
    idx = as_tensor(indices)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"gather: indices must be an integer tensor, got dtype {idx.dtype.name}")
    batch_dims = operator.index(batch_dims)
    if batch_dims < 0:
        batch_dims += idx.ndim
    if not 0 <= batch_dims <= idx.ndim or (batch_dims and batch_dims >= x.ndim):
        raise ValueError(
            f"gather: batch_dims={batch_dims} is out of range for params of shape {x.shape} "
            f"and indices of shape {idx.shape}"
        )
    axis = batch_dims if axis is None else operator.index(axis)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"gather: axis {axis} is out of range for params of shape {x.shape}")
    axis %= x.ndim
    if axis < batch_dims:
        raise ValueError(f"gather: axis ({axis}) must not be less than batch_dims ({batch_dims})")
    if x.shape[:batch_dims] != idx.shape[:batch_dims]:
        raise ValueError(
            f"gather: the first {batch_dims} (batch) axes of params {x.shape} and indices {idx.shape} must match"
        )
    return execute(_GATHER, (x, idx), {"axis": axis, "batch_dims": batch_dims})


@register_gradient("GatherV2")
def _gather_grad_fn(op: Op, dy: Tensor) -> tuple[Tensor, None]:
    attrs = {**op.attrs, "shape": op.input_shapes[0]}
    return execute(_GATHER_GRAD, (dy, op.inputs[1]), attrs), None


@register_gradient("GatherGrad")
def _gather_grad_grad(op: Op, dy: Tensor) -> tuple[Tensor, None]:
    return gather(dy, op.inputs[1], axis=op.attrs["axis"], batch_dims=op.attrs["batch_dims"]), None


# -- one_hot ----------------------------------------------------------------


def _one_hot(indices: np.ndarray, depth: int, on: np.ndarray, off: np.ndarray, axis: int) -> np.ndarray:
    # Negative and out-of-range indices match no class, so their rows are all `off`.
    hits = indices[..., None] == np.arange(depth)
    out = np.where(hits, on, off)
    return out if axis == indices.ndim else np.moveaxis(out, -1, axis)


_ONE_HOT = OpDef("OneHot", _one_hot, save="")
not_differentiable("OneHot")


def _one_hot_dtype(on_value: Any, off_value: Any, dtype: Any) -> np.dtype:
    """``dtype``, else the dtype of ``on_value``/``off_value``, else float32 (TF's rule)."""
    if dtype is not None:
        return _dt.as_dtype(dtype)
    found = [to_array(v).dtype for v in (on_value, off_value) if v is not None]
    if len(found) == 2 and found[0] != found[1]:
        raise TypeError(f"one_hot: on_value ({found[0].name}) and off_value ({found[1].name}) dtypes differ")
    return found[0] if found else _dt.float32


def _one_hot_value(value: Any, default: int, dtype: np.dtype, name: str) -> np.ndarray:
    if value is None:
        return np.array(default, dtype)
    if isinstance(value, (Tensor, np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype != dtype:
            raise TypeError(
                f"one_hot: {name} has dtype {array.dtype.name}, but the output dtype is {dtype.name}"
            )
    else:
        array = to_array(value, dtype)
    if array.ndim:
        raise ValueError(f"one_hot: {name} must be a scalar, got shape {array.shape}")
    return array


def one_hot(
    indices: Any,
    depth: int,
    on_value: Any = None,
    off_value: Any = None,
    axis: int | None = None,
    dtype: _dt.DTypeLike = None,
) -> Tensor:
    """One-hot encoding of integer ``indices`` into ``depth`` classes, as ``tf.one_hot``.

    The new axis of size ``depth`` goes at ``axis`` (-1, the default, appends it).
    Entries are ``on_value`` (default 1) at the index and ``off_value`` (default 0)
    elsewhere; a negative or out-of-range index gives a row of ``off_value``. The
    dtype is ``dtype``, else that of ``on_value``/``off_value``, else float32. Not
    differentiable.

    Raises:
        TypeError: non-integer ``indices``, or values whose dtype differs from ``dtype``.
        ValueError: negative ``depth`` or ``axis`` outside ``[-1, rank]``.
    """
    idx = as_tensor(indices)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"one_hot: indices must be an integer tensor, got dtype {idx.dtype.name}")
    depth = operator.index(depth)
    if depth < 0:
        raise ValueError(f"one_hot: depth must be non-negative, got {depth}")
    out_dtype = _one_hot_dtype(on_value, off_value, dtype)
    on = _one_hot_value(on_value, 1, out_dtype, "on_value")
    off = _one_hot_value(off_value, 0, out_dtype, "off_value")
    axis = -1 if axis is None else operator.index(axis)
    if not -1 <= axis <= idx.ndim:
        raise ValueError(
            f"one_hot: axis must be -1 or in [0, {idx.ndim}] for indices of shape {idx.shape}, got {axis}"
        )
    if axis == -1:
        axis = idx.ndim
    return execute(_ONE_HOT, (idx,), {"depth": depth, "on": on, "off": off, "axis": axis})


# -- indexing ---------------------------------------------------------------


def _index_part(part: Any) -> Any:
    if isinstance(part, Tensor):
        return part._value
    if isinstance(part, (list, tuple)):
        if not part:
            return np.zeros(0, np.intp)  # x[[]] selects nothing, as in NumPy
        return np.asarray([p._value if isinstance(p, Tensor) else p for p in part])
    return part


def _index_key(key: Any) -> Any:
    """``key`` with tensors and lists turned into ndarrays, as NumPy indexing takes them."""
    if isinstance(key, tuple):
        return tuple(_index_part(k) for k in key)
    return _index_part(key)


def _is_basic(key: Any) -> bool:
    parts = key if isinstance(key, tuple) else (key,)
    return all(
        p is None
        or p is Ellipsis
        or isinstance(p, slice)
        or (isinstance(p, (int, np.integer)) and not isinstance(p, bool))
        for p in parts
    )


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
    """``tensor[key]`` with NumPy's basic and integer-array (or bool-mask) indexing; differentiable.

    Out-of-range indices raise ``IndexError`` naming the axis and its size.
    Elements picked more than once get the sum of their gradients.
    """
    x = as_tensor(tensor)
    key = _index_key(key)
    return execute(_GETITEM, (x,), {"key": key})


@register_gradient("GetItem")
def _getitem_grad(op: Op, dy: Tensor) -> Tensor:
    return execute(_GETITEM_GRAD, (dy,), {"key": op.attrs["key"], "shape": op.input_shapes[0]})


@register_gradient("GetItemGrad")
def _getitem_grad_grad(op: Op, dy: Tensor) -> Tensor:
    return getitem(dy, op.attrs["key"])


__all__ = [
    "broadcast_to",
    "concat",
    "expand_dims",
    "gather",
    "getitem",
    "one_hot",
    "pad",
    "reshape",
    "split",
    "squeeze",
    "stack",
    "tile",
    "transpose",
    "unstack",
]
