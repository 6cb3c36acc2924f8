"""Layers that merge a list of tensors: Add, Subtract, Multiply, Average, Maximum, Minimum,
Concatenate and Dot (Keras 3's ``keras.layers`` merging layers)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.messages import shown
from tapefit.core.ops import math as _math
from tapefit.core.ops import reduce as _reduce
from tapefit.core.ops import shape as _shape
from tapefit.core.ops.linalg import einsum
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.layers.module import Layer, rank_of
from tapefit.layers.symbolic import SymbolicTensor

__all__ = [
    "Add",
    "Average",
    "Concatenate",
    "Dot",
    "Maximum",
    "Minimum",
    "Multiply",
    "Subtract",
    "add",
    "average",
    "concatenate",
    "dot",
    "maximum",
    "minimum",
    "multiply",
    "subtract",
]

_EPSILON = 1e-7  # Keras's backend.epsilon(): the smallest norm Dot(normalize=True) divides by


def _input_shapes(layer: Layer, input_shape: Any, count: int | None = None) -> list[tuple[int | None, ...]]:
    """The list of input shapes, checked as ``_inputs`` checks the tensors."""
    if (
        not isinstance(input_shape, (list, tuple))
        or not input_shape
        or not isinstance(input_shape[0], (list, tuple))
    ):
        raise ValueError(f"{type(layer).__name__} '{layer.name}' takes a list of tensors, got one tensor")
    if count is not None and len(input_shape) != count:
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' takes exactly {count} inputs, got {len(input_shape)}"
        )
    if len(input_shape) < 2:
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' takes at least 2 inputs, got {len(input_shape)}"
        )
    return [rank_of(layer, s, range(1, 64)) for s in input_shape]


def _symbolic_mask(masks: Any) -> bool:
    """Whether ``masks`` hold the markers of symbolic inputs' masks."""
    return isinstance(masks, (list, tuple)) and any(isinstance(m, SymbolicTensor) for m in masks)


def _inputs(layer: Layer, inputs: Any, count: int | None = None) -> list[Tensor]:
    """The list of input tensors, checked for its length (at least 2, or exactly ``count``)."""
    if not isinstance(inputs, (list, tuple)):
        raise ValueError(f"{type(layer).__name__} '{layer.name}' takes a list of tensors, got one tensor")
    if count is not None and len(inputs) != count:
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' takes exactly {count} inputs, got {len(inputs)}"
        )
    if len(inputs) < 2:
        raise ValueError(f"{type(layer).__name__} '{layer.name}' takes at least 2 inputs, got {len(inputs)}")
    return [as_tensor(x) for x in inputs]


class _Merge(Layer):
    """What the element-wise merges share: inputs of one shape (or shapes that broadcast,
    axis by axis, as Keras's), merged pairwise in order; the mask is the OR of the inputs'
    masks when every input has one (Keras's rule)."""

    supports_masking = True
    _count: int | None = None

    def _merge(self, xs: list[Tensor]) -> Tensor:
        raise NotImplementedError

    def _check(self, inputs: Any) -> list[Tensor]:
        xs = _inputs(self, inputs, self._count)
        shapes = [tuple(x.shape) for x in xs]
        for shape in shapes[1:]:
            if len(shape) != len(shapes[0]) or any(
                a != b and a != 1 and b != 1 for a, b in zip(shape[1:], shapes[0][1:])
            ):
                raise ValueError(
                    f"{type(self).__name__} '{self.name}': inputs of shapes {shapes[0]} and {shape} "
                    "do not match (each axis equal or 1)"
                )
        return xs

    def call(self, inputs: Any) -> Tensor:
        """Merges the inputs."""
        return self._merge(self._check(inputs))

    _keeps_input_dtype = True

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The inputs' shape, broadcast axis by axis (an axis of 1 takes the other's size)."""
        shapes = _input_shapes(self, input_shape, self._count)
        out: list[int | None] = [shapes[0][0]]
        for axis in range(1, len(shapes[0])):
            sizes = [s[axis] if len(s) == len(shapes[0]) else -1 for s in shapes]
            known = {n for n in sizes if n is not None and n != 1}
            if -1 in known or len(known) > 1:
                raise ValueError(
                    f"{type(self).__name__} '{self.name}': inputs of shapes {shapes[0]} and "
                    f"{next(s for s in shapes if s != shapes[0])} do not match (each axis equal or 1)"
                )
            out.append(known.pop() if known else None if None in sizes else 1)
        return tuple(out)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """The OR of the inputs' masks when every input has one, else ``None``."""
        if not isinstance(mask, (list, tuple)) or any(m is None for m in mask):
            return None
        if _symbolic_mask(mask):
            return mask[0]
        result = as_tensor(mask[0])
        for m in mask[1:]:
            result = _math.logical_or(result, as_tensor(m))
        return result


def _sum(xs: list[Tensor]) -> Tensor:
    """The inputs added left to right (``Add``'s result, and ``Average``'s before the division)."""
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


class Add(_Merge):
    """The sum of a list of tensors of one shape.

    Args:
        name: the layer's name.
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)

    def _merge(self, xs: list[Tensor]) -> Tensor:
        return _sum(xs)


class Subtract(_Merge):
    """``inputs[0] - inputs[1]``, for a list of exactly two tensors.

    Args:
        name: the layer's name.
    """

    _count = 2

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)

    def _merge(self, xs: list[Tensor]) -> Tensor:
        return xs[0] - xs[1]


def _step_masks(xs: list[Tensor], mask: Any) -> list[Tensor | None]:
    """Each input's mask of steps ``(batch, steps)`` broadcast to the input's shape, or ``None``."""
    if not isinstance(mask, (list, tuple)):
        return [None] * len(xs)
    out: list[Tensor | None] = []
    for x, m in zip(xs, mask):
        if m is None:
            out.append(None)
            continue
        m = _math.cast(as_tensor(m), _dt.bool)
        while m.ndim < x.ndim:
            m = _shape.expand_dims(m, -1)
        out.append(_shape.broadcast_to(m, x.shape))
    return out


class Multiply(_Merge):
    """The element-wise product of a list of tensors of one shape.

    With masks (in a functional model), a masked step counts as 1; when every input has a
    mask, the output is 0 where all of them are masked, as in Keras.

    Args:
        name: the layer's name.
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)

    def call(self, inputs: Any, mask: Any = None) -> Tensor:
        """Multiplies the inputs (``mask``: one mask of steps or ``None`` per input)."""
        xs = self._check(inputs)
        masks = _step_masks(xs, mask)
        out: Tensor | None = None
        seen: Tensor | None = None  # where any input so far is unmasked
        for x, m in zip(xs, masks):
            if m is not None:
                x = _math.where(m, x, _math.cast(Tensor(1), x.dtype))
                seen = m if seen is None else _math.logical_or(seen, m)
            out = x if out is None else out * x
        assert out is not None
        if seen is not None and all(m is not None for m in masks):
            out = _math.where(seen, out, _math.cast(Tensor(0), out.dtype))
        return out


class Average(_Merge):
    """The element-wise mean of a list of tensors of one shape.

    Args:
        name: the layer's name.
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)

    def _merge(self, xs: list[Tensor]) -> Tensor:
        return _sum(xs) / float(len(xs))


class _Extremum(_Merge):
    """Maximum and Minimum: with masks, a masked step of one input leaves the others' values
    (Keras's rule: the op has no identity element to put there)."""

    _op: Any

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)

    def call(self, inputs: Any, mask: Any = None) -> Tensor:
        """Merges the inputs (``mask``: one mask of steps or ``None`` per input)."""
        xs = self._check(inputs)
        masks = _step_masks(xs, mask)
        out, out_mask = xs[0], masks[0]
        for x, m in zip(xs[1:], masks[1:]):
            if m is not None:
                x = _math.where(m, x, out)
            if out_mask is not None:
                out = _math.where(out_mask, out, x)
            out_mask = _math.logical_or(out_mask, m) if m is not None and out_mask is not None else None
            out = type(self)._op(out, x)
        return out


class Maximum(_Extremum):
    """The element-wise maximum of a list of tensors of one shape.

    With masks (in a functional model), a masked step of one input takes the others' values.

    Args:
        name: the layer's name.
    """

    _op = _math.maximum


class Minimum(_Extremum):
    """The element-wise minimum of a list of tensors of one shape.

    With masks (in a functional model), a masked step of one input takes the others' values.

    Args:
        name: the layer's name.
    """

    _op = _math.minimum


class Concatenate(Layer):
    """Joins a list of tensors along ``axis``; their other axes must be equal.

    Args:
        axis: the axis to join along (not the batch axis 0); default the last.
        name: the layer's name.
    """

    supports_masking = True

    def __init__(self, axis: int = -1, name: str | None = None) -> None:
        super().__init__(name=name)
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise TypeError(f"Concatenate: axis must be an int, got {shown(axis)}")
        self.axis = axis

    def call(self, inputs: Any) -> Tensor:
        """Joins the inputs."""
        xs = _inputs(self, inputs)
        shapes = [tuple(x.shape) for x in xs]
        ndim = len(shapes[0])
        axis = self.axis + ndim if self.axis < 0 else self.axis
        if not 0 < axis < ndim:
            raise ValueError(
                f"Concatenate '{self.name}': axis {self.axis} is not a non-batch axis of inputs of shape {shapes[0]}"
            )
        for shape in shapes[1:]:
            if len(shape) != ndim or any(
                a != b for i, (a, b) in enumerate(zip(shape, shapes[0])) if i != axis
            ):
                raise ValueError(
                    f"Concatenate '{self.name}': inputs of shapes {shapes[0]} and {shape} differ "
                    f"on an axis other than {self.axis}"
                )
        return _shape.concat(xs, axis=axis)

    _keeps_input_dtype = True

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The inputs' shape with the sizes along ``axis`` added (unknown if one is)."""
        shapes = _input_shapes(self, input_shape)
        ndim = len(shapes[0])
        axis = self.axis + ndim if self.axis < 0 else self.axis
        if not 0 < axis < ndim:
            raise ValueError(
                f"Concatenate '{self.name}': axis {self.axis} is not a non-batch axis of inputs of shape {shapes[0]}"
            )
        out: list[int | None] = [shapes[0][0]]
        for i in range(1, ndim):
            sizes = [s[i] if len(s) == ndim else -1 for s in shapes]
            if i == axis:
                out.append(None if None in sizes else sum(n for n in sizes if n is not None))
                continue
            known = {n for n in sizes if n is not None}
            if -1 in sizes or len(known) > 1:
                raise ValueError(
                    f"Concatenate '{self.name}': inputs of shapes {shapes[0]} and "
                    f"{next(s for s in shapes if s != shapes[0])} differ on an axis other than {self.axis}"
                )
            out.append(known.pop() if known else None)
        return tuple(out)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """The steps' mask: the inputs' masks (all true for an input without one) joined along
        ``axis``, then true where any entry of the last axis is (Keras's rule)."""
        if not isinstance(mask, (list, tuple)) or all(m is None for m in mask):
            return None
        if _symbolic_mask(mask):
            return next(m for m in mask if m is not None)
        masks = []
        for x, m in zip(inputs, mask):
            x = as_tensor(x)
            if m is None:
                masks.append(Tensor(np.ones(x.shape, dtype=bool)))
                continue
            m = _math.cast(as_tensor(m), _dt.bool)
            if m.ndim < x.ndim:
                m = _shape.broadcast_to(_shape.expand_dims(m, -1), x.shape)
            masks.append(m)
        return _reduce.reduce_any(_shape.concat(masks, axis=self.axis), axis=-1)


def _batch_dot(x: Tensor, y: Tensor, axes: tuple[int, int]) -> Tensor:
    """Contracts axis ``axes[0]`` of ``x`` with ``axes[1]`` of ``y``, sample by sample: the
    result has the batch axis, then ``x``'s other axes, then ``y``'s (``(batch, 1)`` at least)."""
    letters = "bcdefghijklmnopqrstuvwxyz"
    x_idx = ["a"] + [letters[i] for i in range(x.ndim - 1)]
    y_idx = ["a"] + [letters[x.ndim - 1 + i] for i in range(y.ndim - 1)]
    y_idx[axes[1]] = x_idx[axes[0]]
    out = [c for c in x_idx if c != x_idx[axes[0]]] + [c for c in y_idx[1:] if c != x_idx[axes[0]]]
    result = einsum(f"{''.join(x_idx)},{''.join(y_idx)}->{''.join(out)}", x, y)
    return _shape.expand_dims(result, 1) if result.ndim == 1 else result


class Dot(Layer):
    """The dot product of two tensors along an axis, sample by sample (Keras's ``Dot``).

    For inputs ``(batch, n)`` and ``(batch, n)`` with ``axes=1`` the output is ``(batch, 1)``;
    in general it has the batch axis, then the first input's other axes, then the second's.

    Args:
        axes: the axis of both inputs to contract (an int), or one per input (two ints);
            not the batch axis 0; negative counts from the end.
        normalize: L2-normalize both inputs along those axes first (the output is then the
            cosine similarity), dividing by at least 1e-7.
        name: the layer's name.
    """

    def __init__(
        self, axes: int | tuple[int, int] | list[int], normalize: bool = False, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        if isinstance(axes, int) and not isinstance(axes, bool):
            pair = (axes, axes)
        elif (
            isinstance(axes, (list, tuple))
            and len(axes) == 2
            and all(isinstance(a, int) and not isinstance(a, bool) for a in axes)
        ):
            pair = (int(axes[0]), int(axes[1]))
        else:
            raise ValueError(f"Dot: axes must be an int or a list of two ints, got {shown(axes)}")
        self.axes = axes
        self._pair = pair
        self.normalize = bool(normalize)

    def call(self, inputs: Any) -> Tensor:
        """The dot product of the two inputs."""
        x, y = _inputs(self, inputs, 2)
        axes = tuple(a % t.ndim if a < 0 else a for a, t in zip(self._pair, (x, y)))
        if any(a == 0 or a >= t.ndim for a, t in zip(axes, (x, y))):
            raise ValueError(
                f"Dot '{self.name}': axes {self.axes} must be non-batch axes of inputs of shapes {x.shape} and {y.shape}"
            )
        if x.shape[axes[0]] != y.shape[axes[1]]:
            raise ValueError(
                f"Dot '{self.name}': inputs of shapes {x.shape} and {y.shape} differ along axes {self.axes} "
                f"({x.shape[axes[0]]} against {y.shape[axes[1]]})"
            )
        if self.normalize:
            x, y = _l2_normalize(x, axes[0]), _l2_normalize(y, axes[1])
        return _batch_dot(x, y, (axes[0], axes[1]))

    _keeps_input_dtype = True

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The batch axis, then the first input's other axes, then the second's (at least one)."""
        x, y = _input_shapes(self, input_shape, 2)
        axes = tuple(a % len(t) if a < 0 else a for a, t in zip(self._pair, (x, y)))
        if any(a == 0 or a >= len(t) for a, t in zip(axes, (x, y))):
            raise ValueError(
                f"Dot '{self.name}': axes {self.axes} must be non-batch axes of inputs of shapes {x} and {y}"
            )
        if None not in (x[axes[0]], y[axes[1]]) and x[axes[0]] != y[axes[1]]:
            raise ValueError(
                f"Dot '{self.name}': inputs of shapes {x} and {y} differ along axes {self.axes} "
                f"({x[axes[0]]} against {y[axes[1]]})"
            )
        rest = [n for i, n in enumerate(x) if i not in (0, axes[0])] + [
            n for i, n in enumerate(y) if i not in (0, axes[1])
        ]
        return (x[0], *rest) if rest else (x[0], 1)


def _l2_normalize(x: Tensor, axis: int) -> Tensor:
    norm = _math.sqrt(_reduce.reduce_sum(x * x, axis=axis, keepdims=True))
    return x / _math.maximum(norm, _EPSILON)


# -- Keras's merge functions: each makes its layer and calls it on ``inputs`` -----------


def add(inputs: Any, **kwargs: Any) -> Any:
    """``Add(**kwargs)(inputs)``: the sum of the inputs (``keras.layers.add``)."""
    return Add(**kwargs)(inputs)


def subtract(inputs: Any, **kwargs: Any) -> Any:
    """``Subtract(**kwargs)(inputs)``: the first input minus the second (``keras.layers.subtract``)."""
    return Subtract(**kwargs)(inputs)


def multiply(inputs: Any, **kwargs: Any) -> Any:
    """``Multiply(**kwargs)(inputs)``: the product of the inputs (``keras.layers.multiply``)."""
    return Multiply(**kwargs)(inputs)


def average(inputs: Any, **kwargs: Any) -> Any:
    """``Average(**kwargs)(inputs)``: the mean of the inputs (``keras.layers.average``)."""
    return Average(**kwargs)(inputs)


def maximum(inputs: Any, **kwargs: Any) -> Any:
    """``Maximum(**kwargs)(inputs)``: the elementwise largest input (``keras.layers.maximum``)."""
    return Maximum(**kwargs)(inputs)


def minimum(inputs: Any, **kwargs: Any) -> Any:
    """``Minimum(**kwargs)(inputs)``: the elementwise smallest input (``keras.layers.minimum``)."""
    return Minimum(**kwargs)(inputs)


def concatenate(inputs: Any, axis: int = -1, **kwargs: Any) -> Any:
    """``Concatenate(axis, **kwargs)(inputs)``: the inputs joined along ``axis``
    (``keras.layers.concatenate``)."""
    return Concatenate(axis=axis, **kwargs)(inputs)


def dot(inputs: Any, axes: int | tuple[int, int] | list[int] = -1, **kwargs: Any) -> Any:
    """``Dot(axes, **kwargs)(inputs)``: the dot product of two inputs along ``axes``
    (``keras.layers.dot``; ``normalize=True`` for cosine similarity)."""
    return Dot(axes=axes, **kwargs)(inputs)
