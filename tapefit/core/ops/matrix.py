"""Square-matrix ops (``tp.linalg``): inverse, determinant, solve and Cholesky, with gradients.

Each works on the last two axes (a batch of matrices before them) and differentiates through
tapefit ops, so second derivatives work too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.ops.linalg import matmul
from tapefit.core.ops.shape import expand_dims
from tapefit.core.record import Op
from tapefit.core.registry import OpDef, execute, register_gradient
from tapefit.core.tensor import Tensor, _wrap, as_tensor


def _square(name: str, a: Any) -> Tensor:
    a = as_tensor(a)
    if a.dtype.kind != "f":
        raise TypeError(f"{name} needs a floating matrix, got dtype {a.dtype.name}")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name} needs square matrices on the last two axes, got shape {a.shape}")
    return a


def _t(x: Tensor) -> Tensor:
    """The transpose of the last two axes."""
    perm = list(range(x.ndim - 2)) + [x.ndim - 1, x.ndim - 2]
    from tapefit.core.ops.shape import transpose

    return transpose(x, perm)


def _singular(name: str) -> Any:
    def forward(*arrays: np.ndarray) -> np.ndarray:
        try:
            return getattr(np.linalg, name)(*arrays)
        except np.linalg.LinAlgError as error:
            raise ValueError(f"the matrix is singular or not positive definite ({error})") from None

    forward.__name__ = f"_{name}"
    return forward


_INV = OpDef("MatrixInverse", _singular("inv"), save="out")
_DET = OpDef("MatrixDeterminant", lambda a: np.asarray(np.linalg.det(a), a.dtype), save="x out")
_SOLVE = OpDef("MatrixSolve", _singular("solve"), save="x out")
_CHOLESKY = OpDef("Cholesky", _singular("cholesky"), save="out")


def inv(a: Any) -> Tensor:
    """The inverse of each square matrix on the last two axes (``tf.linalg.inv``).

    Raises:
        ValueError: a matrix is singular, or the last two axes are not square.
    """
    return execute(_INV, (_square("inv", a),))


def det(a: Any) -> Tensor:
    """The determinant of each square matrix on the last two axes (``tf.linalg.det``)."""
    return execute(_DET, (_square("det", a),))


def solve(a: Any, b: Any) -> Tensor:
    """``x`` with ``a @ x = b`` for each square ``a`` (``tf.linalg.solve``); ``b`` has the
    matrices' rows on its second-to-last axis.

    Raises:
        ValueError: ``a`` is singular, or the shapes do not fit.
    """
    a = _square("solve", a)
    b = as_tensor(b, a.dtype)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ValueError(f"solve: b needs {a.shape[-1]} rows on its second-to-last axis, got shape {b.shape}")
    return execute(_SOLVE, (a, b))


def cholesky(a: Any) -> Tensor:
    """The lower-triangular ``L`` with ``L @ L^T = a`` for each symmetric positive definite ``a``
    (``tf.linalg.cholesky``).

    Raises:
        ValueError: a matrix is not positive definite.
    """
    return execute(_CHOLESKY, (_square("cholesky", a),))


@register_gradient("MatrixInverse")
def _inv_grad(op: Op, dy: Tensor) -> Tensor:
    y = op.outputs[0]
    # Y = A^-1: dA = -Y^T dY Y^T
    return -matmul(matmul(y, dy, transpose_a=True), y, transpose_b=True)


@register_gradient("MatrixDeterminant")
def _det_grad(op: Op, dy: Tensor) -> Tensor:
    a, out = op.inputs[0], op.outputs[0]
    # d det(A) / dA = det(A) A^-T
    scale = expand_dims(expand_dims(dy * out, -1), -1)
    return scale * _t(inv(a))


@register_gradient("MatrixSolve")
def _solve_grad(op: Op, dy: Tensor) -> tuple[Tensor, Tensor]:
    a, x = op.inputs[0], op.outputs[0]
    # X = A^-1 B: dB = A^-T dX, dA = -dB X^T
    db = solve(_t(a), dy)
    return -matmul(db, x, transpose_b=True), db


@register_gradient("Cholesky")
def _cholesky_grad(op: Op, dy: Tensor) -> Tensor:
    low = op.outputs[0]
    n = low.shape[-1]
    # With L L^T = A: P = Phi(L^T dL), S = L^-T P L^-1, dA = (S + S^T) / 2, where Phi keeps the
    # lower triangle and halves the diagonal (Murray, "Differentiation of the Cholesky
    # decomposition", 2016).
    phi = _wrap(np.tril(np.ones((n, n)), -1).astype(low.dtype) + 0.5 * np.eye(n, dtype=low.dtype))
    p = phi * matmul(low, dy, transpose_a=True)
    low_inv = inv(low)
    s = matmul(matmul(low_inv, p, transpose_a=True), low_inv)
    return 0.5 * (s + _t(s))


__all__ = ["cholesky", "det", "inv", "solve"]
