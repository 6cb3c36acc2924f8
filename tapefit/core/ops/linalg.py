"""Matrix products: matmul, tensordot and einsum, with their gradients."""

from __future__ import annotations

import math as _pymath
import operator
import string
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core.function import replay_source, writes_into
from tapefit.core.ops.shape import reshape, transpose
from tapefit.core.record import Op
from tapefit.core.registry import OpDef, binary_operands, execute, register_gradient
from tapefit.core.tensor import Tensor, _wrap, as_tensor, weak_operand

# -- matmul -----------------------------------------------------------------


def _matmul_source(name: Callable[[Any], str], args: list[str], attrs: dict[str, Any], out: str) -> list[str]:
    a, b = args
    if attrs["transpose_a"]:
        a = f"{a}.swapaxes(-1, -2)"
    if attrs["transpose_b"]:
        b = f"{b}.swapaxes(-1, -2)"
    return [f"_r = {name(np.matmul)}({a}, {b}, out={out})"]


@replay_source(_matmul_source)
@writes_into()
def _matmul(
    a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool, out: np.ndarray | None = None
) -> np.ndarray:
    if transpose_a:
        a = a.swapaxes(-1, -2)  # the method: np.swapaxes adds a Python wrapper's cost
    if transpose_b:
        b = b.swapaxes(-1, -2)
    return np.matmul(a, b, out=out)


_MATMUL = OpDef("MatMul", _matmul, save="x y")


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """The matrix product of the last two axes of ``a`` and ``b``, as ``tf.linalg.matmul``.

    Leading (batch) axes broadcast by NumPy's rules; ``transpose_a``/``transpose_b``
    transpose the last two axes of an operand first. A Python list operand takes the
    other operand's dtype.

    Raises:
        ValueError: an operand has rank < 2, the inner dimensions differ, or the batch
            axes do not broadcast.
        TypeError: the dtypes differ.
    """
    a, b = binary_operands("MatMul", a, b)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul needs tensors of rank >= 2, got shapes {a.shape} and {b.shape}")
    shape_a, shape_b = a.shape, b.shape
    inner_a = shape_a[-2] if transpose_a else shape_a[-1]
    inner_b = shape_b[-1] if transpose_b else shape_b[-2]
    if inner_a != inner_b:
        raise ValueError(
            f"matmul: inner dimensions differ ({inner_a} vs {inner_b}): "
            f"{_described(shape_a, shape_b, transpose_a, transpose_b)}"
        )
    if shape_a[:-2] != shape_b[:-2]:  # equal batch axes (2-D operands: none) always broadcast
        try:
            np.broadcast_shapes(shape_a[:-2], shape_b[:-2])
        except ValueError:
            raise ValueError(
                "matmul: the batch dimensions do not broadcast: "
                f"{_described(shape_a, shape_b, transpose_a, transpose_b)}"
            ) from None
    return execute(_MATMUL, (a, b), {"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)})


# One attrs dict per transpose pair, shared by the products gradients make (nothing writes attrs).
_PRODUCT_ATTRS = {
    (ta, tb): {"transpose_a": ta, "transpose_b": tb} for ta in (False, True) for tb in (False, True)
}


def product(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """``matmul`` for operands known to fit (a gradient's), without its checks."""
    return execute(_MATMUL, (a, b), _PRODUCT_ATTRS[transpose_a, transpose_b])


def _described(
    shape_a: tuple[int, ...], shape_b: tuple[int, ...], transpose_a: bool, transpose_b: bool
) -> str:
    return (
        f"a has shape {shape_a}{' (transposed)' if transpose_a else ''}, "
        f"b has shape {shape_b}{' (transposed)' if transpose_b else ''}"
    )


@register_gradient("MatMul")
def _matmul_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    a, b = op.inputs
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    need_a, need_b = op.needs_grad
    # With C = A B: dA = dC B^T and dB = A^T dC; the transposed variants follow.
    # Broadcast batch axes are summed back to each input's shape by the tape.
    if not ta and not tb:
        da = product(dy, b, transpose_b=True) if need_a else None
        db = product(a, dy, transpose_a=True) if need_b else None
    elif ta and not tb:
        da = product(b, dy, transpose_b=True) if need_a else None
        db = product(a, dy) if need_b else None
    elif not ta and tb:
        da = product(dy, b) if need_a else None
        db = product(dy, a, transpose_a=True) if need_b else None
    else:
        da = product(b, dy, transpose_a=True, transpose_b=True) if need_a else None
        db = product(dy, a, transpose_a=True, transpose_b=True) if need_b else None
    return da, db


# -- tensordot --------------------------------------------------------------


def _axis_list(axes: Any, ndim: int, which: str) -> list[int]:
    items = [axes] if np.ndim(axes) == 0 else list(np.asarray(axes).reshape(-1))
    result = []
    for item in items:
        try:
            axis = operator.index(item)
        except TypeError:
            raise TypeError(f"tensordot: axes must be ints, got {axes!r}") from None
        if not -ndim <= axis < ndim:
            raise ValueError(f"tensordot: axis {axis} is out of range for {which}, a tensor of rank {ndim}")
        result.append(axis % ndim)
    if len(set(result)) != len(result):
        raise ValueError(f"tensordot: axes {items} of {which} repeat an axis")
    return result


def tensordot(a: Any, b: Any, axes: Any) -> Tensor:
    """Sums the products of ``a`` and ``b`` over the given axes, as ``tf.tensordot``.

    ``axes`` is an int N (the last N axes of ``a`` with the first N of ``b``) or a
    pair ``[axes_a, axes_b]`` of ints or equal-length int lists. The result has
    ``a``'s free axes, then ``b``'s. Built from transpose, reshape and matmul.

    Raises:
        ValueError: bad axes, or contracted axes of different sizes.
    """
    a, b = binary_operands("tensordot", a, b)
    if isinstance(axes, Tensor):
        axes = axes._value
    if np.ndim(axes) == 0:
        try:
            n = operator.index(axes)
        except TypeError:
            raise TypeError(f"tensordot: axes must be an int or a pair of axis lists, got {axes!r}") from None
        if n < 0 or n > min(a.ndim, b.ndim):
            raise ValueError(f"tensordot: axes={n} does not fit shapes {a.shape} and {b.shape}")
        axes_a, axes_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        if len(axes) != 2:
            raise ValueError(f"tensordot: axes must be an int or a pair [axes_a, axes_b], got {axes!r}")
        axes_a = _axis_list(axes[0], a.ndim, f"a (shape {a.shape})")
        axes_b = _axis_list(axes[1], b.ndim, f"b (shape {b.shape})")
    if len(axes_a) != len(axes_b) or any(a.shape[i] != b.shape[j] for i, j in zip(axes_a, axes_b)):
        raise ValueError(
            f"tensordot: axes {axes_a} of shape {a.shape} and axes {axes_b} of shape {b.shape} do not match"
        )
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    # As a matrix product: (free_a, contracted) @ (contracted, free_b).
    size = _pymath.prod(a.shape[i] for i in axes_a)
    rows = _pymath.prod(a.shape[i] for i in free_a)
    cols = _pymath.prod(b.shape[i] for i in free_b)
    a2 = reshape(transpose(a, free_a + axes_a), [rows, size])
    b2 = reshape(transpose(b, axes_b + free_b), [size, cols])
    return reshape(matmul(a2, b2), [a.shape[i] for i in free_a] + [b.shape[i] for i in free_b])


# -- einsum -----------------------------------------------------------------
#
# The public ``einsum`` parses the equation once and resolves "..." into explicit
# labels, so the recorded op ("Einsum") always has an explicit equation whose labels
# have one size each. Its gradient is, for each operand, one more einsum:
#
#   d x_k = einsum(dy, x_j for j != k -> labels of x_k)
#
# Two cases need extra operands (constants, never recorded): a label of x_k that
# appears nowhere else (summed away in the forward pass) is broadcast back by a
# vector of ones, and a label repeated within x_k (a diagonal) gets a fresh label
# per repeat tied to it by an identity matrix.

_LETTERS = string.ascii_letters


def _einsum_forward(*xs: np.ndarray, equation: str, subscripts: tuple[str, ...], output: str) -> np.ndarray:
    # With several operands, let NumPy pick the order and use BLAS where it can.
    return np.einsum(equation, *xs, optimize=len(xs) > 1)


_EINSUM = OpDef("Einsum", _einsum_forward, save="inputs")


def _einsum_op(subscripts: list[str], output: str, tensors: list[Tensor]) -> Tensor:
    """Runs the explicit einsum ``subscripts -> output`` (consistent sizes, no "...")."""
    equation = ",".join(subscripts) + "->" + output
    return execute(
        _EINSUM, tuple(tensors), {"subscripts": tuple(subscripts), "output": output, "equation": equation}
    )


def _split_term(term: str, equation: str) -> tuple[str, str | None]:
    """A subscript as (labels before "...", labels after) or (labels, None) without "..."."""
    if term.count("...") > 1:
        raise ValueError(f"einsum: {equation!r}: '...' appears more than once in {term!r}")
    before, dots, after = term.partition("...")
    for label in before + after:
        if label not in _LETTERS:
            raise ValueError(
                f"einsum: {equation!r}: invalid subscript character {label!r} (use letters a-z, A-Z)"
            )
    return (before, after) if dots else (before, None)


def einsum(equation: str, *inputs: Any) -> Tensor:
    """Einstein summation over ``inputs``, as ``tf.einsum`` and ``numpy.einsum``.

    Supports explicit (``"ij,jk->ik"``) and implicit (``"ij,jk"``: the labels seen
    once, sorted) outputs, ``...`` for broadcast leading axes, and labels repeated
    within one operand (``"ii->i"`` diagonal, ``"ii"`` trace). Named labels must have
    one size everywhere (no size-1 broadcasting, as TensorFlow); ``...`` axes
    broadcast. Differentiable to any order in every operand.

    Raises:
        ValueError: a malformed equation, a count or rank that does not match the
            inputs, or inconsistent sizes (the message names the shapes).
        TypeError: the dtypes differ.
    """
    if not isinstance(equation, str):
        raise TypeError(
            f"einsum: the first argument must be the equation string, got {type(equation).__name__}"
        )
    if not inputs:
        raise ValueError("einsum needs at least one input tensor")
    tensors = _einsum_inputs(inputs)
    shapes = [t.shape for t in tensors]
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    if "->" in rhs:
        raise ValueError(f"einsum: {equation!r} has more than one '->'")
    terms = lhs.split(",")
    if len(terms) != len(tensors):
        raise ValueError(
            f"einsum: {equation!r} has {len(terms)} operand subscripts but {len(tensors)} tensors "
            f"were given (shapes {', '.join(map(str, shapes))})"
        )
    parts = [_split_term(term, equation) for term in terms]
    # Each operand's "..." covers the axes its named labels leave over.
    ranks = []
    for k, ((before, after), shape) in enumerate(zip(parts, shapes)):
        named = len(before) + len(after or "")
        if (after is None and named != len(shape)) or named > len(shape):
            raise ValueError(
                f"einsum: {equation!r}: operand {k} has shape {shape} (rank {len(shape)}), but its "
                f"subscript {terms[k]!r} names {named} axes"
            )
        ranks.append(0 if after is None else len(shape) - named)
    spare = [c for c in _LETTERS if c not in eq]
    ellipsis = "".join(spare[: max(ranks, default=0)])
    if len(ellipsis) < max(ranks, default=0):
        raise ValueError(f"einsum: {equation!r}: too many axes under '...' to name")
    subscripts = [
        before if after is None else before + ellipsis[len(ellipsis) - r :] + after
        for (before, after), r in zip(parts, ranks)
    ]
    output = _einsum_output(equation, rhs if arrow else None, subscripts, ellipsis, any(r for r in ranks))
    sizes = _einsum_sizes(equation, subscripts, shapes, set(ellipsis))
    # A "..." axis of size 1 that broadcasts against a larger one is dropped from its
    # operand (a recorded reshape), so the Einsum op itself never broadcasts.
    for k, (sub, t) in enumerate(zip(subscripts, tensors)):
        drop = [i for i, label in enumerate(sub) if t.shape[i] == 1 and sizes[label] != 1]
        if drop:
            subscripts[k] = "".join(label for i, label in enumerate(sub) if i not in drop)
            tensors[k] = reshape(t, [n for i, n in enumerate(t.shape) if i not in drop])
    return _einsum_op(subscripts, output, tensors)


def _einsum_inputs(inputs: tuple[Any, ...]) -> list[Tensor]:
    """The inputs as Tensors of one dtype; Python data takes the first Tensor's dtype."""
    like = next((x for x in inputs if isinstance(x, Tensor)), None)
    if like is None:
        tensors = [as_tensor(x) for x in inputs]
    else:
        tensors = [weak_operand(x, like, "Einsum") for x in inputs]
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        names = ", ".join(t.dtype.name for t in tensors)
        raise TypeError(f"Einsum: cannot mix dtypes {names} in one op; convert explicitly with tp.cast")
    return tensors


def _einsum_output(
    equation: str, rhs: str | None, subscripts: list[str], ellipsis: str, has_ellipsis: bool
) -> str:
    """The explicit output labels; implicit mode keeps the labels seen once, sorted, after "..."."""
    seen = "".join(subscripts)
    if rhs is None:
        named = sorted(c for c in set(seen) if c not in ellipsis and seen.count(c) == 1)
        return ellipsis + "".join(named)
    before, after = _split_term(rhs, equation)
    if after is None and has_ellipsis:
        raise ValueError(
            f"einsum: {equation!r}: the inputs have axes under '...', so the output must contain '...' too"
        )
    output = before if after is None else before + ellipsis + after
    for label in output:
        if output.count(label) > 1:
            raise ValueError(f"einsum: {equation!r}: output label {label!r} appears more than once")
        if label not in seen:
            raise ValueError(f"einsum: {equation!r}: output label {label!r} appears in no input")
    return output


def _einsum_sizes(
    equation: str, subscripts: list[str], shapes: list[tuple[int, ...]], broadcast: set[str]
) -> dict[str, int]:
    """Each label's size; a "..." label may be 1 in some operands (broadcast), a named one may not."""
    sizes: dict[str, int] = {}
    where: dict[str, int] = {}
    for k, (sub, shape) in enumerate(zip(subscripts, shapes)):
        for label, n in zip(sub, shape):
            known = sizes.get(label)
            if known is None or known == n:
                sizes[label], where[label] = n, where.get(label, k)
            elif label in broadcast and 1 in (known, n):
                if known == 1:  # size 1 broadcasts to n (also to 0)
                    sizes[label], where[label] = n, k
            else:
                what = "the '...' axes do not broadcast:" if label in broadcast else f"label {label!r} has"
                raise ValueError(
                    f"einsum: {equation!r}: {what} size {known} in operand {where[label]} "
                    f"(shape {shapes[where[label]]}) but size {n} in operand {k} (shape {shape})"
                )
    return sizes


@register_gradient("Einsum")
def _einsum_grad(op: Op, dy: Tensor) -> list[Tensor | None]:
    subscripts, output = op.attrs["subscripts"], op.attrs["output"]
    sizes = {label: n for sub, shape in zip(subscripts, op.input_shapes) for label, n in zip(sub, shape)}
    spare = iter([c for c in _LETTERS if c not in sizes])
    grads: list[Tensor | None] = []
    for k, sub in enumerate(subscripts):
        if not op.needs_grad[k]:
            grads.append(None)
            continue
        terms = [output] + [s for j, s in enumerate(subscripts) if j != k]
        tensors = [dy] + [op.inputs[j] for j in range(len(subscripts)) if j != k]
        elsewhere = set("".join(terms))
        target = ""
        for label in sub:
            n = sizes[label]
            if label in target:  # a repeat: a fresh label, equal to `label` through an identity
                fresh = next(spare)
                terms.append(label + fresh)
                tensors.append(_wrap(np.eye(n, dtype=dy.dtype)))
                target += fresh
                continue
            if label not in elsewhere:  # summed away in the forward pass: broadcast back
                terms.append(label)
                tensors.append(_wrap(np.ones(n, dy.dtype)))
            target += label
        grads.append(_einsum_op(terms, target, tensors))
    return grads


__all__ = ["einsum", "matmul", "tensordot"]
