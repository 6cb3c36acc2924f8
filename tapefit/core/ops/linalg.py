"""Matrix products: matmul, tensordot and einsum, with their gradients."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.record import Op
from tapefit.core.registry import OpDef, check_same_dtype, execute, register_gradient
from tapefit.core.tensor import Tensor, convert_to_tensor


def _matmul(a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool) -> np.ndarray:
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


_MATMUL = OpDef("MatMul", _matmul, save="x y")


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """The matrix product of the last two axes of ``a`` and ``b`` (leading axes broadcast)."""
    a, b = convert_to_tensor(a), convert_to_tensor(b)
    check_same_dtype("MatMul", (a, b))
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul needs tensors of rank >= 2, got shapes {a.shape} and {b.shape}")
    inner_a = a.shape[-2] if transpose_a else a.shape[-1]
    inner_b = b.shape[-1] if transpose_b else b.shape[-2]
    if inner_a != inner_b:
        raise ValueError(
            f"matmul: inner dimensions differ: a has shape {a.shape}{' (transposed)' if transpose_a else ''}, "
            f"b has shape {b.shape}{' (transposed)' if transpose_b else ''}"
        )
    return execute(_MATMUL, (a, b), {"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)})


@register_gradient("MatMul")
def _matmul_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    a, b = op.inputs
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    need_a, need_b = op.needs_grad
    # With C = A B: dA = dC B^T and dB = A^T dC; the transposed variants follow.
    if not ta and not tb:
        da = matmul(dy, b, transpose_b=True) if need_a else None
        db = matmul(a, dy, transpose_a=True) if need_b else None
    elif ta and not tb:
        da = matmul(b, dy, transpose_b=True) if need_a else None
        db = matmul(a, dy) if need_b else None
    elif not ta and tb:
        da = matmul(dy, b) if need_a else None
        db = matmul(dy, a, transpose_a=True) if need_b else None
    else:
        da = matmul(b, dy, transpose_a=True, transpose_b=True) if need_a else None
        db = matmul(dy, a, transpose_a=True, transpose_b=True) if need_b else None
    return da, db


def tensordot(a: Any, b: Any, axes: Any) -> Tensor:
    """Sums the products of ``a`` and ``b`` over the given axes, as ``tf.tensordot``.

    ``axes`` is an int N (the last N axes of ``a`` with the first N of ``b``) or a
    pair of axis lists. Built from transpose, reshape and matmul.
    """
    from tapefit.core.ops.shape import reshape, transpose

    a, b = convert_to_tensor(a), convert_to_tensor(b)
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0 or n > min(a.ndim, b.ndim):
            raise ValueError(f"tensordot: axes={n} does not fit shapes {a.shape} and {b.shape}")
        axes_a, axes_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        axes_a, axes_b = ([int(x)] if np.ndim(x) == 0 else [int(i) for i in x] for x in axes)
        axes_a = [x % a.ndim for x in axes_a]
        axes_b = [x % b.ndim for x in axes_b]
    if len(axes_a) != len(axes_b) or any(a.shape[i] != b.shape[j] for i, j in zip(axes_a, axes_b)):
        raise ValueError(f"tensordot: axes {axes_a} of {a.shape} and {axes_b} of {b.shape} do not match")
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    size = int(np.prod([a.shape[i] for i in axes_a], dtype=np.int64))
    a2 = reshape(transpose(a, free_a + axes_a), [-1 if free_a else 1, size])
    b2 = reshape(transpose(b, axes_b + free_b), [size, -1 if free_b else 1])
    return reshape(matmul(a2, b2), [a.shape[i] for i in free_a] + [b.shape[i] for i in free_b])


__all__ = ["matmul", "tensordot"]
