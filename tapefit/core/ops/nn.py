"""Neural-network ops (``tp.nn``): activations, losses, dropout, convolution and pooling.

TensorFlow's signatures and conventions throughout: images are NHWC, filters
``(height, width, in, out)``, ``padding`` is ``"SAME"`` or ``"VALID"``. Each op's
gradient sits next to it and is built from tapefit ops, so it can be
differentiated again; where a gradient is itself an op (``ReluGrad``,
``Conv2DBackpropInput``, ``AvgPoolGrad``, ...), that op has its gradient too.
"""

from __future__ import annotations

import math as _pymath
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tapefit.core import dtypes as _dt
from tapefit.core import random as _random
from tapefit.core.function import draw as _draw
from tapefit.core.function import elementwise, replay_source, writes_into
from tapefit.core.ops.linalg import product
from tapefit.core.ops.math import cast, exp, identity, sigmoid, square, tanh, where
from tapefit.core.ops.reduce import reduce_sum
from tapefit.core.ops.shape import expand_dims, gather, reshape
from tapefit.core.record import Op, recording
from tapefit.core.registry import OpDef, execute, not_differentiable, register_gradient, unary
from tapefit.core.tensor import Tensor, _wrap, as_tensor, weak_operand


def _float_tensor(x: Any, fn: str, arg: str = "x") -> Tensor:
    x = as_tensor(x)
    if x.dtype.kind != "f":
        raise TypeError(
            f"{fn}: {arg} must be a floating tensor, got {x.dtype.name}; use tp.cast(x, tp.float32)"
        )
    return x


def _axis(axis: Any, ndim: int, fn: str) -> int:
    axis = -1 if axis is None else int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{fn}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


# -- activations -------------------------------------------------------------


@elementwise("({0} if {0} > zero or {0} != {0} else zero)")
@writes_into(0)  # elementwise: out may be x's array
def _relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0), out=out)


_relu_op = unary("Relu", _relu, save="out")
_softplus_op = unary("Softplus", lambda x: np.logaddexp(x.dtype.type(0), x), save="x")


def relu(features: Any) -> Tensor:
    """``max(features, 0)``. The parameter is named as in ``tf.nn.relu``."""
    return _relu_op(features)


def softplus(features: Any) -> Tensor:
    """``log(exp(features) + 1)``, computed stably. Named as in ``tf.math.softplus``."""
    return _softplus_op(features)


# ReluGrad is its own op (fused mask-and-multiply), with its own gradient for higher orders.
# dy * mask, as TensorFlow's kernel does: np.where with a scalar branch is ~10x slower here.
def _relu_backprop_source(name: Callable[[Any], str], args: list[str], attrs: Any, out: str) -> list[str]:
    dy, y = args
    if out == "None":
        return [f"_r = {name(_relu_backprop)}({dy}, {y})"]
    return [
        f"{name(np.greater)}({y}, {y}.dtype.type(0), out={out})",
        f"_r = {name(np.multiply)}({dy}, {out}, out={out})",
    ]


@elementwise("({0} if {1} > zero else {0} * zero)")  # dy * (y > 0), as the forward computes it
@replay_source(_relu_backprop_source)
@writes_into(1)  # out may be y's array: each element of y is read before it is written
def _relu_backprop(dy: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if out is None:
        return dy * (y > 0)
    # The mask as 0.0 and 1.0 in ``out`` itself (never ``dy``'s array; maybe ``y``'s), then dy
    # times it: the same products as with a bool mask, with no array allocated.
    np.greater(y, y.dtype.type(0), out=out)
    return np.multiply(dy, out, out=out)


_RELU_GRAD = OpDef("ReluGrad", _relu_backprop, save="y")


@register_gradient("Relu")
def _relu_grad(op: Op, dy: Tensor) -> Tensor:
    return execute(_RELU_GRAD, (dy, op.outputs[0]))


@register_gradient("ReluGrad")
def _relu_grad_grad(op: Op, ddy: Tensor) -> tuple[Any, None]:
    return execute(_RELU_GRAD, (ddy, op.inputs[1])), None


# -- fused dense ---------------------------------------------------------------
# Dense layers' hot path as one op: x @ kernel (+ bias) (then relu), computed in one output
# buffer, recorded once, and differentiated without undoing a broadcast. Its gradient is
# made of tapefit ops (ReluGrad, MatMul, Sum), so it differentiates again.


def _dense_source(name: Callable[[Any], str], args: list[str], attrs: dict[str, Any], out: str) -> list[str]:
    x, kernel, *bias = args
    lines = [f"_r = {name(np.matmul)}({x}, {kernel}, out={out})"]
    if bias:
        lines.append(f"{name(np.add)}(_r, {bias[0]}, out=_r)")
    if attrs["relu"]:
        lines.append(f"{name(np.maximum)}(_r, _r.dtype.type(0), out=_r)")
    return lines


@replay_source(_dense_source)
@writes_into()
def _dense(
    x: np.ndarray,
    kernel: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    relu: bool,
    out: np.ndarray | None = None,
) -> np.ndarray:
    out = np.matmul(x, kernel, out=out)
    if bias is not None:
        np.add(out, bias, out=out)
    if relu:
        np.maximum(out, out.dtype.type(0), out=out)
    return out


_DENSE = OpDef("Dense", _dense, save="x y out")


def dense(x: Tensor, kernel: Tensor, bias: Tensor | None = None, relu: bool = False) -> Tensor:
    """``relu?(x @ kernel + bias)`` for a 2-D ``x``, one recorded op (used by ``layers.Dense``).

    The caller checks shapes and dtypes: ``x`` (batch, in), ``kernel`` (in, units),
    ``bias`` (units,), all of one floating dtype.
    """
    inputs = (x, kernel) if bias is None else (x, kernel, bias)
    return execute(_DENSE, inputs, {"relu": relu})


@register_gradient("Dense")
def _dense_grad(op: Op, dy: Tensor) -> list[Any]:
    x, kernel = op.inputs[0], op.inputs[1]
    if op.attrs["relu"]:
        dy = execute(_RELU_GRAD, (dy, op.outputs[0]))
    need = op.needs_grad
    # z = x W + b: dx = dz W^T, dW = x^T dz, db = the sum of dz over the batch.
    grads: list[Any] = [
        product(dy, kernel, transpose_b=True) if need[0] else None,
        product(x, dy, transpose_a=True) if need[1] else None,
    ]
    if len(need) == 3:
        grads.append(reduce_sum(dy, axis=0) if need[2] else None)
    return grads


@register_gradient("Softplus")
def _softplus_grad(op: Op, dy: Tensor) -> Tensor:
    return dy * sigmoid(op.inputs[0])


# np.where on a mask of random signs measured 3-5x slower than these exact rewrites
# (1M float32: 11 ms against 2-4 ms), so the kernels below avoid it.


def _leaky_relu(x: np.ndarray, alpha: float) -> np.ndarray:
    # x > 0 ? x : alpha x, which is max(x, alpha x) for alpha <= 1 and min(x, alpha x) otherwise
    scaled = x * x.dtype.type(alpha)
    return np.maximum(x, scaled) if alpha <= 1 else np.minimum(x, scaled)


def _leaky_relu_backprop(dy: np.ndarray, x: np.ndarray, alpha: float) -> np.ndarray:
    positive = x > 0
    factor = np.logical_not(positive).astype(dy.dtype)
    factor *= dy.dtype.type(alpha)
    factor += positive  # exactly 1 where x > 0, exactly alpha elsewhere
    return dy * factor


_LEAKY_RELU = OpDef("LeakyRelu", _leaky_relu, save="x")
_LEAKY_RELU_GRAD = OpDef("LeakyReluGrad", _leaky_relu_backprop, save="y")


def leaky_relu(features: Any, alpha: float = 0.2) -> Tensor:
    """``features`` where positive, else ``alpha * features``."""
    x = _float_tensor(features, "leaky_relu", "features")
    try:
        alpha = float(alpha)
    except (TypeError, ValueError):
        raise TypeError(f"leaky_relu: alpha must be a number, got {alpha!r}") from None
    return execute(_LEAKY_RELU, (x,), {"alpha": alpha})


@register_gradient("LeakyRelu")
def _leaky_relu_grad(op: Op, dy: Tensor) -> Tensor:
    return execute(_LEAKY_RELU_GRAD, (dy, op.inputs[0]), op.attrs)


@register_gradient("LeakyReluGrad")
def _leaky_relu_grad_grad(op: Op, ddy: Tensor) -> tuple[Any, None]:
    # linear in dy, piecewise constant in x
    return execute(_LEAKY_RELU_GRAD, (ddy, op.inputs[1]), op.attrs), None


def _elu(x: np.ndarray) -> np.ndarray:
    zero = x.dtype.type(0)
    return np.maximum(x, zero) + np.expm1(np.minimum(x, zero))  # one of the two terms is 0


_elu_op = unary("Elu", _elu, save="out")


def elu(features: Any) -> Tensor:
    """``features`` where positive, else ``exp(features) - 1``. Named as in ``tf.nn.elu``."""
    return _elu_op(features)


# d elu / dx = 1 for x > 0, exp(x) = out + 1 otherwise: read off the output, as TensorFlow does.
_ELU_GRAD = OpDef(
    "EluGrad", lambda dy, out: dy * (np.minimum(out, out.dtype.type(0)) + out.dtype.type(1)), save="x y"
)


@register_gradient("Elu")
def _elu_grad(op: Op, dy: Tensor) -> Tensor:
    return execute(_ELU_GRAD, (dy, op.outputs[0]))


@register_gradient("EluGrad")
def _elu_grad_grad(op: Op, ddx: Tensor) -> tuple[Any, Any]:
    dy, out = op.inputs
    d_out = where(out > 0, 0, ddx * dy) if op.needs_grad[1] else None
    return execute(_ELU_GRAD, (ddx, out)), d_out


# erf has no NumPy ufunc. It is evaluated here in float64 (max error ~4e-15, measured
# against math.erf/math.erfc) from three pieces:
#   |x| < 1:      erf(x) = x p(x^2), p the degree-10 Chebyshev interpolant of erf(a)/a in a^2;
#   1 <= |x| < 6: erfc(a) = exp(-a^2) g(a), g = exp(a^2) erfc(a) by degree-14 Chebyshev
#                 interpolants on [1, 2), [2, 3), [3, 4.5), [4.5, 6) (g is smooth and slowly varying);
#   |x| >= 6:     Laplace's continued fraction sqrt(pi) g(a) = 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + ...)))),
#                 12 levels.
# The interpolants are fitted once, at import, to the C library's erf/erfc at Chebyshev nodes.


def _interpolant(f: Any, lo: float, hi: float, degree: int) -> tuple[float, float, np.ndarray]:
    mid, half = (lo + hi) / 2, (hi - lo) / 2

    def values(s: np.ndarray) -> Any:  # all the nodes at once (NumPy's stubs expect one scalar)
        return np.array([f(mid + half * v) for v in s])

    coef = np.polynomial.chebyshev.chebinterpolate(values, degree)
    return mid, half, np.polynomial.chebyshev.cheb2poly(coef)[::-1].copy()  # highest power first


def _erf_over_a(u: float) -> float:
    a = _pymath.sqrt(u)
    return _pymath.erf(a) / a if a > 0 else 2 / _pymath.sqrt(_pymath.pi)


def _erfcx(a: float) -> float:
    return _pymath.erfc(a) * _pymath.exp(a * a)


_ERF_SMALL = _interpolant(_erf_over_a, 0.0, 1.0, 10)
_ERFCX_PIECES = [_interpolant(_erfcx, lo, hi, 14) for lo, hi in ((1, 2), (2, 3), (3, 4.5), (4.5, 6))]
_ERFCX_EDGES = (1.0, 2.0, 3.0, 4.5, 6.0)


def _horner(piece: tuple[float, float, np.ndarray], t: np.ndarray) -> np.ndarray:
    mid, half, coef = piece
    s = (t - mid) / half
    acc = np.full_like(s, coef[0])
    for c in coef[1:]:
        acc *= s
        acc += c
    return acc


def _erf_small(x: np.ndarray) -> np.ndarray:
    """erf(x) for |x| < 1 (float64)."""
    return x * _horner(_ERF_SMALL, x * x)


def _erfc_large(a: np.ndarray) -> np.ndarray:
    """erfc(a) for a >= 1 with small relative error (float64; NaN stays NaN)."""
    out = np.full_like(a, np.nan)
    for piece, lo, hi in zip(_ERFCX_PIECES, _ERFCX_EDGES, _ERFCX_EDGES[1:]):
        sel = (a >= lo) & (a < hi)
        if sel.any():
            part = a[sel]
            out[sel] = np.exp(-part * part) * _horner(piece, part)
    sel = a >= _ERFCX_EDGES[-1]
    if sel.any():
        part = a[sel]
        k = np.zeros_like(part)
        for n in range(12, 0, -1):
            k = (n / 2) / (part + k)
        with np.errstate(over="ignore"):  # a^2 overflows only where erfc is 0 anyway
            out[sel] = np.exp(-part * part) / ((part + k) * _pymath.sqrt(_pymath.pi))
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    a = np.abs(x64)
    small = a < 1
    out = np.empty_like(x64)
    out[small] = _erf_small(x64[small])
    large = ~small
    out[large] = np.copysign(1 - _erfc_large(a[large]), x64[large])
    return out.astype(x.dtype, copy=False)


def _erfc(x: np.ndarray) -> np.ndarray:
    """erfc(x) = 1 - erf(x), without cancellation for large x (float64)."""
    a = np.abs(x)
    small = a < 1
    out = np.empty_like(x)
    out[small] = 1 - _erf_small(x[small])
    large = ~small
    tail = _erfc_large(a[large])
    out[large] = tail + (x[large] < 0) * (2 - 2 * tail)  # erfc(-a) = 2 - erfc(a)
    return out


erf = unary("Erf", _erf, save="x")
"""``tp.math.erf(x)``: the Gauss error function elementwise (floats)."""
_TWO_OVER_SQRT_PI = 2 / _pymath.sqrt(_pymath.pi)


@register_gradient("Erf")
def _erf_grad(op: Op, dy: Tensor) -> Tensor:
    return dy * (_TWO_OVER_SQRT_PI * exp(-square(op.inputs[0])))


_SQRT_HALF = _pymath.sqrt(0.5)
_SQRT_2_OVER_PI = _pymath.sqrt(2 / _pymath.pi)
_INV_SQRT_2PI = 1 / _pymath.sqrt(2 * _pymath.pi)
_GELU_CUBIC = 0.044715


def _gelu(x: np.ndarray, approximate: bool) -> np.ndarray:
    if approximate:
        t = np.tanh(x.dtype.type(_SQRT_2_OVER_PI) * (x + x.dtype.type(_GELU_CUBIC) * x * x * x))
        return x.dtype.type(0.5) * x * (1 + t)
    x64 = x.astype(np.float64)
    # x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: no cancellation far in the negative tail
    return (0.5 * x64 * _erfc(-_SQRT_HALF * x64)).astype(x.dtype, copy=False)


_GELU = OpDef("Gelu", _gelu, save="x")


def gelu(features: Any, approximate: bool = False) -> Tensor:
    """Gaussian error linear unit ``x * Phi(x)``, ``Phi`` the standard normal CDF.

    ``approximate=True`` uses ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.
    """
    x = _float_tensor(features, "gelu", "features")
    return execute(_GELU, (x,), {"approximate": bool(approximate)})


@register_gradient("Gelu")
def _gelu_grad(op: Op, dy: Tensor) -> Tensor:
    x = op.inputs[0]
    if op.attrs["approximate"]:
        t = tanh(_SQRT_2_OVER_PI * (x + _GELU_CUBIC * x * x * x))
        du = _SQRT_2_OVER_PI * (1 + 3 * _GELU_CUBIC * square(x))
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du)
    # d/dx x Phi(x) = Phi(x) + x phi(x)
    cdf = 0.5 * (1 + erf(_SQRT_HALF * x))
    pdf = _INV_SQRT_2PI * exp(-0.5 * square(x))
    return dy * (cdf + x * pdf)


# -- softmax -----------------------------------------------------------------


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    shifted -= np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return shifted


def _large_negative(dtype: np.dtype) -> Any:
    """What a masked logit becomes, as Keras's ``Softmax``: -1e9 (-3e4 in float16)."""
    return dtype.type(-3e4 if dtype == np.float16 else -1e9)


def _masked_softmax(x: np.ndarray, mask: np.ndarray, axis: int) -> np.ndarray:
    # A copy in x's memory order (np.where would make it C order: attention's scores come
    # transposed from einsum, and the reductions along their last axis are 2x slower in C order).
    z = x.copy(order="K")
    np.copyto(z, _large_negative(x.dtype), where=~mask)
    z -= np.max(z, axis=axis, keepdims=True)
    np.exp(z, out=z)
    z /= np.sum(z, axis=axis, keepdims=True)
    return z


def _softmax_backprop(
    dy: np.ndarray, out: np.ndarray, mask: np.ndarray | None = None, *, axis: int
) -> np.ndarray:
    # (dy - sum(dy * out)) * out, times the mask: a row with every logit masked has a uniform
    # output that no logit reaches, so its gradient is 0 (elsewhere out is 0 where masked).
    if axis == dy.ndim - 1:  # the sums as row dot products, with no product array: ~1.7x faster
        total = np.einsum("...i,...i->...", dy, out)[..., None]
    else:
        total = np.sum(dy * out, axis=axis, keepdims=True)
    g = dy - total
    g *= out
    if mask is not None:
        g *= mask
    return g


_SOFTMAX = OpDef("Softmax", _softmax, save="out")
_LOG_SOFTMAX = OpDef("LogSoftmax", _log_softmax, save="out")
_MASKED_SOFTMAX = OpDef("MaskedSoftmax", _masked_softmax, save="y out")
_SOFTMAX_GRAD = OpDef("SoftmaxGrad", _softmax_backprop, save="inputs")


def softmax(logits: Any, axis: int | None = -1) -> Tensor:
    """``exp(logits) / reduce_sum(exp(logits), axis)``, computed without overflow."""
    x = _float_tensor(logits, "softmax", "logits")
    return execute(_SOFTMAX, (x,), {"axis": _axis(axis, x.ndim, "softmax")})


def masked_softmax(logits: Any, mask: Any, axis: int = -1) -> Tensor:
    """``softmax(where(mask, logits, -1e9), axis)`` as one op, as Keras's ``Softmax`` layer
    called with a mask (-3e4 in float16).

    Args:
        logits: a floating tensor.
        mask: booleans that broadcast to ``logits``' shape, true where a logit counts.
        axis: the axis to normalize.

    Returns:
        ``logits``' shape; 0 where masked, uniform over a slice whose every logit is masked.
        The gradient is 0 at the masked logits.
    """
    x = _float_tensor(logits, "masked_softmax", "logits")
    m = as_tensor(mask)
    if m.dtype != _dt.bool:
        raise TypeError(f"masked_softmax: mask must be a bool tensor, got {m.dtype.name}")
    try:
        shape = np.broadcast_shapes(m.shape, x.shape)
    except ValueError:
        shape = None
    if shape != x.shape:
        raise ValueError(
            f"masked_softmax: the mask {m.shape} does not broadcast to the logits' shape {x.shape}"
        )
    return execute(_MASKED_SOFTMAX, (x, m), {"axis": _axis(axis, x.ndim, "masked_softmax")})


def log_softmax(logits: Any, axis: int | None = -1) -> Tensor:
    """``logits - reduce_logsumexp(logits, axis)``, computed without overflow."""
    x = _float_tensor(logits, "log_softmax", "logits")
    return execute(_LOG_SOFTMAX, (x,), {"axis": _axis(axis, x.ndim, "log_softmax")})


# Fused, because a profile showed it pays: the softmax gradient is one op, SoftmaxGrad, not
# four (multiply, sum, subtract, multiply), and the masked softmax one op, not Select + Softmax
# (+ a Select in the gradient). benchmarks/attention_step.py, one BLAS thread, fastest of 40:
# MultiHeadAttention forward + backward (batch 32, 64 steps, 4 heads of 16) no mask 10.5 ->
# 8.2 ms, causal 12.2 -> 10.4 ms, padding masks 12.0 -> 10.2 ms; the causal softmax alone on
# (32, 4, 64, 64) 5.25 -> 1.48 ms.
@register_gradient("Softmax")
def _softmax_grad(op: Op, dy: Tensor) -> Tensor:
    return execute(_SOFTMAX_GRAD, (dy, op.outputs[0]), op.attrs)


@register_gradient("MaskedSoftmax")
def _masked_softmax_grad(op: Op, dy: Tensor) -> tuple[Tensor, None]:
    return execute(_SOFTMAX_GRAD, (dy, op.outputs[0], op.inputs[1]), op.attrs), None


@register_gradient("SoftmaxGrad")
def _softmax_grad_grad(op: Op, ddx: Tensor) -> tuple[Any, ...]:
    # g = m out (dy - s), s = sum(dy out): linear in dy with the same (symmetric) Jacobian, and
    # d/d out_k = m_k ddx_k (dy_k - s) - dy_k sum(m ddx out).
    dy, out = op.inputs[0], op.inputs[1]
    axis = op.attrs["axis"]
    masked = ddx if len(op.inputs) == 2 else ddx * cast(op.inputs[2], ddx.dtype)
    d_dy = execute(_SOFTMAX_GRAD, (ddx, *op.inputs[1:]), op.attrs) if op.needs_grad[0] else None
    d_out = None
    if op.needs_grad[1]:
        total = reduce_sum(dy * out, axis, keepdims=True)
        d_out = masked * (dy - total) - dy * reduce_sum(masked * out, axis, keepdims=True)
    return (d_dy, d_out) if len(op.inputs) == 2 else (d_dy, d_out, None)


@register_gradient("LogSoftmax")
def _log_softmax_grad(op: Op, dy: Tensor) -> Tensor:
    out, axis = op.outputs[0], op.attrs["axis"]
    return dy - exp(out) * reduce_sum(dy, axis, keepdims=True)


# -- cross-entropies -----------------------------------------------------------


def _labels_like(labels: Any, logits: Tensor, fn: str) -> Tensor:
    """Float labels of the logits' dtype and shape (Python data adopts the dtype)."""
    labels = weak_operand(labels, logits, fn)
    if labels.dtype != logits.dtype:
        raise _dt.mix_error(fn, [logits.dtype, labels.dtype])
    if labels.shape != logits.shape:
        raise ValueError(
            f"{fn}: logits and labels must have the same shape, got logits {logits.shape} and labels {labels.shape}"
        )
    return labels


def _sigmoid_xent(z: np.ndarray, x: np.ndarray) -> np.ndarray:
    # max(x, 0) - x z + log(1 + exp(-|x|)): exp never overflows
    return np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))


_SIGMOID_XENT = OpDef("SigmoidCrossEntropyWithLogits", _sigmoid_xent, save="x y")


def sigmoid_cross_entropy_with_logits(labels: Any, logits: Any) -> Tensor:
    """Elementwise ``-z log(sigmoid(x)) - (1 - z) log(1 - sigmoid(x))``, stable for any ``x``.

    Args:
        labels: ``z``, the same shape as ``logits``, usually in [0, 1].
        logits: ``x``, a floating tensor.
    """
    x = _float_tensor(logits, "sigmoid_cross_entropy_with_logits", "logits")
    z = _labels_like(labels, x, "sigmoid_cross_entropy_with_logits")
    return execute(_SIGMOID_XENT, (z, x))


@register_gradient("SigmoidCrossEntropyWithLogits")
def _sigmoid_xent_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
    z, x = op.inputs
    return (-dy * x if op.needs_grad[0] else None, dy * (sigmoid(x) - z) if op.needs_grad[1] else None)


def _softmax_xent(z: np.ndarray, x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    total = np.sum(e, axis=axis, keepdims=True)
    loss = -np.sum(z * (shifted - np.log(total)), axis=axis)
    # d loss / dx = softmax(x) sum(z) - z; TensorFlow's kernel assumes sum(z) = 1 and drops
    # the factor, which is the same for proper distributions and exact for all others.
    backprop = e / total * np.sum(z, axis=axis, keepdims=True) - z
    return loss, backprop


_SOFTMAX_XENT = OpDef("SoftmaxCrossEntropyWithLogits", _softmax_xent, save="all")


def softmax_cross_entropy_with_logits(labels: Any, logits: Any, axis: int = -1) -> Tensor:
    """``-reduce_sum(labels * log_softmax(logits, axis), axis)``, fused and stable.

    Args:
        labels: the same shape as ``logits``; each slice along ``axis`` a probability
            distribution (the gradient is exact for other labels too).
        logits: unscaled log-probabilities, a floating tensor.
        axis: the class axis.

    Returns:
        The losses, of ``logits``' shape without ``axis``.
    """
    fn = "softmax_cross_entropy_with_logits"
    x = _float_tensor(logits, fn, "logits")
    if x.ndim == 0:
        raise ValueError(f"{fn}: logits must have a class axis, got a scalar")
    z = _labels_like(labels, x, fn)
    loss, _ = execute(_SOFTMAX_XENT, (z, x), {"axis": _axis(axis, x.ndim, fn)})
    return loss


@register_gradient("SoftmaxCrossEntropyWithLogits")
def _softmax_xent_grad(op: Op, dloss: Tensor, dbackprop: Tensor) -> tuple[Any, Any]:
    z, x = op.inputs
    backprop = op.outputs[1]
    axis = op.attrs["axis"]
    dloss = expand_dims(dloss, axis)
    dx = dloss * backprop if op.needs_grad[1] else None
    dz = -dloss * log_softmax(x, axis) if op.needs_grad[0] else None
    # The backprop output only gets a gradient in higher-order derivatives.
    if recording() or dbackprop._value.any():
        # backprop = p S - z with p = softmax(x), S = sum(z)
        p = softmax(x, axis)
        projected = reduce_sum(dbackprop * p, axis, keepdims=True)
        if dx is not None:
            dx = dx + reduce_sum(z, axis, keepdims=True) * p * (dbackprop - projected)
        if dz is not None:
            dz = dz + (projected - dbackprop)
    return dz, dx


def _sparse_xent(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # The ufuncs' own reduce and flat indices into fresh C-ordered arrays (whatever ``x``'s
    # order, so that the flat views below are views): NumPy's max, sum and
    # take/put_along_axis wrappers cost more than the work on a small batch.
    shifted = np.subtract(x, np.maximum.reduce(x, axis=-1, keepdims=True), order="C")
    e = np.exp(shifted)
    total = np.add.reduce(e, axis=-1, keepdims=True)
    picked = np.arange(0, shifted.size, x.shape[-1]) + labels.reshape(-1)  # flat index of each label
    loss = (np.log(total) - shifted.reshape(-1)[picked].reshape(total.shape))[..., 0]
    backprop = np.divide(e, total, out=e)
    backprop.reshape(-1)[picked] -= 1
    return loss, backprop


_SPARSE_XENT = OpDef("SparseSoftmaxCrossEntropyWithLogits", _sparse_xent, save="x out")


def sparse_softmax_cross_entropy_with_logits(labels: Any, logits: Any) -> Tensor:
    """``-log_softmax(logits)[..., labels]``, fused and stable.

    Args:
        labels: integer class indices in ``[0, num_classes)``, of ``logits``' shape without
            the last axis.
        logits: unscaled log-probabilities, shape ``labels.shape + (num_classes,)``.

    Returns:
        The losses, of ``labels``' shape.
    """
    fn = "sparse_softmax_cross_entropy_with_logits"
    x = _float_tensor(logits, fn, "logits")
    y = as_tensor(labels)
    if y.dtype.kind not in "iu":
        raise TypeError(f"{fn}: labels must be integer class indices, got dtype {y.dtype.name}")
    if x.ndim == 0 or y.shape != x.shape[:-1]:
        raise ValueError(
            f"{fn}: labels must have the shape of logits without its last axis, "
            f"got labels {y.shape} and logits {x.shape}"
        )
    classes = x.shape[-1]
    if y.size:
        low, high = int(y._value.min()), int(y._value.max())
        if low < 0 or high >= classes:
            bad = low if low < 0 else high
            raise ValueError(
                f"{fn}: label {bad} is outside the valid range [0, {classes}) of the logits {x.shape}"
            )
    loss, _ = execute(_SPARSE_XENT, (x, y))
    return loss


@register_gradient("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_xent_grad(op: Op, dloss: Tensor, dbackprop: Tensor) -> tuple[Any, None]:
    x = op.inputs[0]
    backprop = op.outputs[1]
    dx = expand_dims(dloss, -1) * backprop
    if recording() or dbackprop._value.any():
        # backprop = softmax(x) - one_hot(labels)
        p = softmax(x, -1)
        dx = dx + p * (dbackprop - reduce_sum(dbackprop * p, -1, keepdims=True))
    return dx, None


# -- dropout -----------------------------------------------------------------


def dropout(x: Any, rate: Any, noise_shape: Any = None, seed: int | None = None) -> Tensor:
    """Zeroes each element with probability ``rate`` and scales the rest by ``1 / (1 - rate)``.

    Args:
        x: a floating tensor.
        rate: the drop probability, in ``[0, 1)``.
        noise_shape: the shape of the keep mask, broadcast over ``x`` (``None`` entries
            take ``x``'s size); by default ``x.shape``.
        seed: an op seed; with the global seed (``tp.random.set_seed``) it makes the masks
            repeat, as in TensorFlow.
    """
    x = _float_tensor(x, "dropout")
    try:
        rate_array = np.asarray(rate.numpy() if isinstance(rate, Tensor) else rate, dtype=np.float64)
    except (TypeError, ValueError):
        rate_array = None
    if rate_array is None or rate_array.ndim != 0 or not 0 <= rate_array < 1:
        raise ValueError(f"dropout: rate must be a scalar in the range [0, 1), got {rate!r}")
    rate_value = float(rate_array)
    if noise_shape is None:
        shape = x.shape
    else:
        dims = noise_shape.numpy().tolist() if isinstance(noise_shape, Tensor) else list(noise_shape)
        if len(dims) != x.ndim:
            raise ValueError(f"dropout: noise_shape {dims} must have one entry per axis of x {x.shape}")
        shape = tuple(x.shape[i] if n is None else int(n) for i, n in enumerate(dims))
        if any(n not in (1, m) for n, m in zip(shape, x.shape)):
            raise ValueError(
                f"dropout: noise_shape {list(shape)} does not broadcast to the shape {x.shape} of x"
            )
    if rate_value == 0:
        return identity(x) if x._is_variable else x  # a Variable still gets a Tensor
    draw_dtype = np.float64 if x.dtype == _dt.float64 else np.float32
    scale = x.dtype.type(1 / (1 - rate_value))
    # A tp.function replay draws a fresh mask, from the generator as it is then.
    mask = _draw(lambda: (_random.generator(seed).random(shape, dtype=draw_dtype) >= rate_value) * scale)
    return x * _wrap(mask)


# -- convolution -------------------------------------------------------------


class _Window(NamedTuple):
    """Where a window slides: strides, dilations and padding (rows and columns), and the output size."""

    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, bottom, left, right
    out_hw: tuple[int, int]


def _hw(value: Any, fn: str, arg: str) -> tuple[int, int]:
    """TensorFlow's spatial argument: an int, or a list of 1, 2 or 4 ints (``[1, h, w, 1]``)."""
    if isinstance(value, Tensor):
        value = value.numpy().tolist()
    given = [value] if isinstance(value, (int, np.integer)) else value
    try:
        items = [operator.index(v) for v in given]  # 1.5 is an error, never truncated to 1
    except (TypeError, ValueError):
        raise TypeError(f"{fn}: {arg} must be an int or a list of 1, 2 or 4 ints, got {value!r}") from None
    if len(items) == 4:
        if items[0] != 1 or items[3] != 1:
            raise ValueError(f"{fn}: {arg} {items} must be 1 in the batch and channel entries (NHWC)")
        items = items[1:3]
    if len(items) == 1:
        items = items * 2
    if len(items) != 2 or any(v < 1 for v in items):
        raise ValueError(f"{fn}: {arg} must be an int or a list of 1, 2 or 4 positive ints, got {value!r}")
    return items[0], items[1]


def _window(
    fn: str,
    in_hw: tuple[int, ...],  # (height, width)
    k_hw: tuple[int, ...],
    strides: Any,
    padding: Any,
    dilations: Any = 1,
) -> _Window:
    """TensorFlow's output size and padding; SAME puts the odd extra row/column at the bottom/right."""
    sh, sw = _hw(strides, fn, "strides")
    dh, dw = _hw(dilations, fn, "dilations")
    if not isinstance(padding, str) or padding.upper() not in ("SAME", "VALID"):
        raise ValueError(f"{fn}: padding must be 'SAME' or 'VALID', got {padding!r}")
    same = padding.upper() == "SAME"
    out, pads = [], []
    for size, k, s, d, name in zip(in_hw, k_hw, (sh, sw), (dh, dw), ("height", "width")):
        span = (k - 1) * d + 1
        if same:
            n = -(-size // s)
            total = max((n - 1) * s + span - size, 0)
            pads += [total // 2, total - total // 2]
        else:
            if size < span:
                raise ValueError(
                    f"{fn}: with padding 'VALID' the window {name} {span} is larger than the input {name} {size}"
                )
            n = (size - span) // s + 1
            pads += [0, 0]
        out.append(n)
    return _Window((sh, sw), (dh, dw), (pads[0], pads[1], pads[2], pads[3]), (out[0], out[1]))


def _pad(x: np.ndarray, pads: tuple[int, int, int, int], value: Any = 0) -> np.ndarray:
    top, bottom, left, right = pads
    if not (top or bottom or left or right):
        return x
    n, h, w, c = x.shape
    out = np.full((n, h + top + bottom, w + left + right, c), value, x.dtype)
    out[:, top : top + h, left : left + w] = x
    return out


def _patches(x: np.ndarray, k_hw: tuple[int, int], win: _Window) -> np.ndarray:
    """The windows of ``x`` as a strided view of shape (N, out_h, out_w, kh, kw, C)."""
    (kh, kw), (sh, sw), (dh, dw) = k_hw, win.strides, win.dilations
    xp = _pad(x, win.pads)
    view = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    view = view[:, ::sh, ::sw, :, ::dh, ::dw][:, : win.out_hw[0], : win.out_hw[1]]
    return view.transpose(0, 1, 2, 4, 5, 3)


def _im2col(x: np.ndarray, k_hw: tuple[int, int], win: _Window) -> np.ndarray:
    """The windows as an (N * out_h * out_w, kh * kw * C) matrix (a copy, or the transpose of one).

    With fewer than 4 channels the copy is laid out (kh * kw * C, N * out_h * out_w) and
    returned transposed: it gathers and multiplies about twice as fast there (measured, one
    thread: 64x28x28x1 -> 32 forward 1.0 ms against 1.6 ms, filter gradient 1.0 against
    2.1 ms), while from 8 channels on the row layout is twice as fast.
    """
    view = _patches(x, k_hw, win)
    size = k_hw[0] * k_hw[1] * x.shape[3]
    if x.shape[3] < 4:
        return view.transpose(3, 4, 5, 0, 1, 2).reshape(size, -1).T
    return view.reshape(-1, size)


def _scatter_windows(
    cols: np.ndarray, shape: tuple[int, ...], k_hw: tuple[int, int], win: _Window
) -> np.ndarray:
    """The adjoint of ``_patches``: adds (N, out_h, out_w, kh, kw, C) windows back into an image."""
    n, h, w, c = shape
    top, bottom, left, right = win.pads
    (sh, sw), (dh, dw), (oh, ow) = win.strides, win.dilations, win.out_hw
    out = np.zeros((n, h + top + bottom, w + left + right, c), cols.dtype)
    for i in range(k_hw[0]):
        for j in range(k_hw[1]):
            out[:, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw] += (
                cols[:, :, :, i, j]
            )
    return out[:, top : top + h, left : left + w]


# im2col + one matmul: measured faster than einsum/tensordot over the window view once
# channels grow (64x14x14x32 -> 64: 3.9 ms against 10.4 ms for einsum), and on par for one channel.
def _conv2d(x: np.ndarray, w: np.ndarray, win: _Window) -> np.ndarray:
    kh, kw, _, o = w.shape
    cols = _im2col(x, (kh, kw), win)
    return (cols @ w.reshape(-1, o)).reshape(x.shape[0], *win.out_hw, o)


def _conv2d_backprop_input(
    w: np.ndarray, dy: np.ndarray, input_shape: tuple[int, ...], win: _Window
) -> np.ndarray:
    kh, kw, c, o = w.shape
    cols = (dy.reshape(-1, o) @ w.reshape(-1, o).T).reshape(*dy.shape[:3], kh, kw, c)
    return _scatter_windows(cols, input_shape, (kh, kw), win)


def _conv2d_backprop_filter(
    x: np.ndarray, dy: np.ndarray, filter_shape: tuple[int, ...], win: _Window
) -> np.ndarray:
    kh, kw, _, o = filter_shape
    cols = _im2col(x, (kh, kw), win)
    return (cols.T @ dy.reshape(-1, o)).reshape(filter_shape)


_CONV2D = OpDef("Conv2D", _conv2d, save="x y")
_CONV2D_BACKPROP_INPUT = OpDef("Conv2DBackpropInput", _conv2d_backprop_input, save="x y")
_CONV2D_BACKPROP_FILTER = OpDef("Conv2DBackpropFilter", _conv2d_backprop_filter, save="x y")


def _images_and_filters(
    op: str, input: Any, filters: Any, arg: str, layout: str, in_axis: int, data_format: str
) -> tuple[Tensor, Tensor]:
    """``input`` (NHWC images) and ``filters`` (``arg``, laid out as ``layout`` with the input
    channels on ``in_axis``) of a 2-D convolution op, as float Tensors of one dtype whose
    channels agree; else the error that names the mismatch."""
    x = _float_tensor(input, op, "input")
    w = _float_tensor(filters, op, arg)
    if data_format != "NHWC":
        raise ValueError(f"{op}: only data_format='NHWC' is supported, got {data_format!r}")
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(
            f"{op}: input must be (batch, height, width, channels) and {arg} {layout}, "
            f"got shapes {x.shape} and {w.shape}"
        )
    if x.dtype != w.dtype:
        raise _dt.mix_error(op, [x.dtype, w.dtype])
    if w.shape[in_axis] != x.shape[3]:
        verb = "expects" if arg == "filter" else "expect"
        raise ValueError(
            f"{op}: {arg} {w.shape} {verb} {w.shape[in_axis]} input channels, the input {x.shape} "
            f"has {x.shape[3]}"
        )
    return x, w


def conv2d(
    input: Any,
    filters: Any,
    strides: Any,
    padding: str,
    data_format: str = "NHWC",
    dilations: Any = None,
) -> Tensor:
    """2-D cross-correlation of NHWC images with ``(height, width, in, out)`` filters.

    Args:
        input: images of shape (batch, height, width, in_channels).
        filters: shape (filter_height, filter_width, in_channels, out_channels).
        strides: an int or a list of 1, 2 or 4 ints (``[1, sh, sw, 1]``).
        padding: ``"SAME"`` (output size ``ceil(in / stride)``, the odd extra padding at
            the bottom/right) or ``"VALID"`` (no padding); lower case is accepted too.
        data_format: only ``"NHWC"``.
        dilations: like ``strides``; the spacing between filter taps (default 1).

    Returns:
        Shape (batch, out_height, out_width, out_channels).
    """
    x, w = _images_and_filters(
        "conv2d", input, filters, "filters", "(height, width, in, out)", 2, data_format
    )
    if 0 in w.shape[:2] or 0 in x.shape[1:3]:
        raise ValueError(f"conv2d: empty spatial dimensions in input {x.shape} or filters {w.shape}")
    win = _window(
        "conv2d", x.shape[1:3], w.shape[:2], strides, padding, 1 if dilations is None else dilations
    )
    return execute(_CONV2D, (x, w), {"win": win})


def _backprop_input(w: Tensor, dy: Tensor, input_shape: tuple[int, ...], win: _Window) -> Tensor:
    return execute(_CONV2D_BACKPROP_INPUT, (w, dy), {"input_shape": input_shape, "win": win})


def _backprop_filter(x: Tensor, dy: Tensor, filter_shape: tuple[int, ...], win: _Window) -> Tensor:
    return execute(_CONV2D_BACKPROP_FILTER, (x, dy), {"filter_shape": filter_shape, "win": win})


def _register_bilinear(
    forward: OpDef,
    names: tuple[str, str, str],
    into_input: Callable[[Tensor, Tensor, tuple[int, ...], _Window], Tensor],
    into_filter: Callable[[Tensor, Tensor, tuple[int, ...], _Window], Tensor],
) -> None:
    """Registers the gradients of an op bilinear in (x, w), ``forward``, and of its two
    adjoints (named ``names``: the op, its backprop to the input, its backprop to the filter):
    the gradient of each of the three is made of the other two, so every order differentiates."""

    @register_gradient(names[0])
    def forward_grad(op: Op, dy: Tensor) -> tuple[Any, Any]:
        x, w = op.inputs
        win = op.attrs["win"]
        dx = into_input(w, dy, op.input_shapes[0], win) if op.needs_grad[0] else None
        dw = into_filter(x, dy, op.input_shapes[1], win) if op.needs_grad[1] else None
        return dx, dw

    @register_gradient(names[1])
    def input_grad(op: Op, ddx: Tensor) -> tuple[Any, Any]:
        w, dy = op.inputs
        win = op.attrs["win"]
        dw = into_filter(ddx, dy, op.input_shapes[0], win) if op.needs_grad[0] else None
        ddy = execute(forward, (ddx, w), {"win": win}) if op.needs_grad[1] else None
        return dw, ddy

    @register_gradient(names[2])
    def filter_grad(op: Op, ddw: Tensor) -> tuple[Any, Any]:
        x, dy = op.inputs
        win = op.attrs["win"]
        dx = into_input(ddw, dy, op.input_shapes[0], win) if op.needs_grad[0] else None
        ddy = execute(forward, (x, ddw), {"win": win}) if op.needs_grad[1] else None
        return dx, ddy


_register_bilinear(
    _CONV2D, ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"), _backprop_input, _backprop_filter
)


def conv2d_transpose(
    input: Any,
    filters: Any,
    output_shape: Any,
    strides: Any,
    padding: str = "SAME",
    data_format: str = "NHWC",
    dilations: Any = None,
) -> Tensor:
    """The transpose of ``conv2d`` (its gradient with respect to the images), as TensorFlow's.

    ``conv2d`` with the same ``filters``, ``strides``, ``padding`` and ``dilations`` takes
    images of ``output_shape`` to images of ``input``'s shape; this op goes the other way,
    each input pixel spreading ``filters`` over the output.

    Args:
        input: images of shape (batch, height, width, in_channels).
        filters: shape (filter_height, filter_width, out_channels, in_channels).
        output_shape: ``(batch, out_height, out_width, out_channels)``.
        strides: an int or a list of 1, 2 or 4 ints (``[1, sh, sw, 1]``).
        padding: ``"SAME"`` or ``"VALID"``, the forward convolution's (lower case accepted).
        data_format: only ``"NHWC"``.
        dilations: like ``strides``; the spacing between filter taps (default 1).

    Returns:
        Shape ``output_shape``.

    Raises:
        ValueError: ``conv2d`` of ``output_shape`` would not give ``input``'s height and width.
    """
    x, w = _images_and_filters(
        "conv2d_transpose", input, filters, "filters", "(height, width, out, in)", 3, data_format
    )
    given = output_shape.numpy().tolist() if isinstance(output_shape, Tensor) else output_shape
    try:
        shape = tuple(operator.index(n) for n in given)
    except TypeError:
        shape = ()
    if len(shape) != 4 or shape[0] != x.shape[0] or shape[3] != w.shape[2] or min(shape[1:3]) < 1:
        raise ValueError(
            f"conv2d_transpose: output_shape must be (batch, height, width, channels) = "
            f"({x.shape[0]}, h, w, {w.shape[2]}) with h, w >= 1, got {given!r}"
        )
    if 0 in w.shape[:2] or 0 in x.shape[1:3]:
        raise ValueError(
            f"conv2d_transpose: empty spatial dimensions in input {x.shape} or filters {w.shape}"
        )
    win = _window(
        "conv2d_transpose", shape[1:3], w.shape[:2], strides, padding, 1 if dilations is None else dilations
    )
    if win.out_hw != x.shape[1:3]:
        raise ValueError(
            f"conv2d_transpose: output_shape {list(shape)} does not fit the input {x.shape}: conv2d of that "
            f"shape with these strides and padding gives height and width {win.out_hw}, not {x.shape[1:3]}"
        )
    return _backprop_input(w, x, shape, win)


# -- depthwise convolution -----------------------------------------------------
# Each input channel c has its own depth_multiplier filters w[:, :, c, m]; output channel
# c * multiplier + m is channel c correlated with w[:, :, c, m] (TensorFlow's order).


def _taps(k_hw: tuple[int, ...], win: _Window) -> list[tuple[int, int, slice, slice]]:
    """Per filter tap: its row and column, and the strided slices of the padded image it reads."""
    (sh, sw), (dh, dw), (oh, ow) = win.strides, win.dilations, win.out_hw
    return [
        (i, j, slice(i * dh, i * dh + (oh - 1) * sh + 1, sh), slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))
        for i in range(k_hw[0])
        for j in range(k_hw[1])
    ]


# Each loop runs over the taps with the multiplier outermost, so that every product is over
# whole (batch, rows, cols, channels) blocks: with the multiplier as the innermost axis NumPy's
# loops run over 2 elements at a time (measured: 32x28x28x32, multiplier 2, forward 78 ms
# against 15 ms).


def _by_multiplier(dy: np.ndarray, c: int, m: int) -> np.ndarray:
    """``dy`` (N, out_h, out_w, C * m) as (m, N, out_h, out_w, C), contiguous."""
    return np.ascontiguousarray(np.moveaxis(dy.reshape(*dy.shape[:3], c, m), -1, 0))


def _depthwise_conv2d(x: np.ndarray, w: np.ndarray, win: _Window) -> np.ndarray:
    kh, kw, c, m = w.shape
    xp = _pad(x, win.pads)
    out = np.zeros((m, x.shape[0], *win.out_hw, c), np.result_type(x, w))
    for i, j, rows, cols in _taps((kh, kw), win):
        patch = xp[:, rows, cols]
        for k in range(m):
            out[k] += patch * w[i, j, :, k]
    return np.moveaxis(out, 0, -1).reshape(x.shape[0], *win.out_hw, c * m)


def _depthwise_backprop_input(
    w: np.ndarray, dy: np.ndarray, input_shape: tuple[int, ...], win: _Window
) -> np.ndarray:
    kh, kw, c, m = w.shape
    n, h, wd, _ = input_shape
    top, bottom, left, right = win.pads
    dys = _by_multiplier(dy, c, m)
    out = np.zeros((n, h + top + bottom, wd + left + right, c), np.result_type(w, dy))
    for i, j, rows, cols in _taps((kh, kw), win):
        share = dys[0] * w[i, j, :, 0]
        for k in range(1, m):
            share += dys[k] * w[i, j, :, k]
        out[:, rows, cols] += share
    return out[:, top : top + h, left : left + wd]


def _depthwise_backprop_filter(
    x: np.ndarray, dy: np.ndarray, filter_shape: tuple[int, ...], win: _Window
) -> np.ndarray:
    kh, kw, c, m = filter_shape
    xp = _pad(x, win.pads)
    dys = _by_multiplier(dy, c, m)
    out = np.zeros(filter_shape, np.result_type(x, dy))
    for i, j, rows, cols in _taps((kh, kw), win):
        patch = xp[:, rows, cols]
        for k in range(m):
            out[i, j, :, k] = np.einsum("nhwc,nhwc->c", patch, dys[k])
    return out


_DEPTHWISE = OpDef("DepthwiseConv2dNative", _depthwise_conv2d, save="x y")
_DEPTHWISE_BACKPROP_INPUT = OpDef("DepthwiseConv2dNativeBackpropInput", _depthwise_backprop_input, save="x y")
_DEPTHWISE_BACKPROP_FILTER = OpDef(
    "DepthwiseConv2dNativeBackpropFilter", _depthwise_backprop_filter, save="x y"
)


def depthwise_conv2d(
    input: Any,
    filter: Any,
    strides: Any,
    padding: str,
    data_format: str = "NHWC",
    dilations: Any = None,
) -> Tensor:
    """Each channel of NHWC images correlated with its own ``channel_multiplier`` filters.

    Args:
        input: images of shape (batch, height, width, in_channels).
        filter: shape (filter_height, filter_width, in_channels, channel_multiplier).
        strides: an int or a list of 1, 2 or 4 ints (``[1, sh, sw, 1]``).
        padding: ``"SAME"`` or ``"VALID"`` (lower case accepted), as ``conv2d``.
        data_format: only ``"NHWC"``.
        dilations: like ``strides``; the spacing between filter taps (default 1).

    Returns:
        Shape (batch, out_height, out_width, in_channels * channel_multiplier); output channel
        ``c * channel_multiplier + m`` is input channel ``c`` under filter ``[:, :, c, m]``.
    """
    x, w = _images_and_filters(
        "depthwise_conv2d", input, filter, "filter", "(height, width, in, multiplier)", 2, data_format
    )
    if 0 in w.shape or 0 in x.shape[1:3]:
        raise ValueError(f"depthwise_conv2d: empty dimensions in input {x.shape} or filter {w.shape}")
    win = _window(
        "depthwise_conv2d", x.shape[1:3], w.shape[:2], strides, padding, 1 if dilations is None else dilations
    )
    return execute(_DEPTHWISE, (x, w), {"win": win})


def _depthwise_input(w: Tensor, dy: Tensor, input_shape: tuple[int, ...], win: _Window) -> Tensor:
    return execute(_DEPTHWISE_BACKPROP_INPUT, (w, dy), {"input_shape": input_shape, "win": win})


def _depthwise_filter(x: Tensor, dy: Tensor, filter_shape: tuple[int, ...], win: _Window) -> Tensor:
    return execute(_DEPTHWISE_BACKPROP_FILTER, (x, dy), {"filter_shape": filter_shape, "win": win})


_register_bilinear(
    _DEPTHWISE,
    ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"),
    _depthwise_input,
    _depthwise_filter,
)


# -- pooling -----------------------------------------------------------------


def _pool_window(fn: str, x: Tensor, ksize: Any, strides: Any, padding: Any, data_format: str) -> _Window:
    if data_format != "NHWC":
        raise ValueError(f"{fn}: only data_format='NHWC' is supported, got {data_format!r}")
    if x.ndim != 4:
        raise ValueError(f"{fn}: input must be (batch, height, width, channels), got shape {x.shape}")
    if 0 in x.shape[1:3]:
        raise ValueError(f"{fn}: empty spatial dimensions in input {x.shape}")
    return _window(fn, x.shape[1:3], _hw(ksize, fn, "ksize"), strides, padding)


def _window_offsets(k_hw: tuple[int, int], win: _Window) -> list[tuple[int, slice, slice]]:
    """Per filter tap (row-major): its index and the strided slices of the padded image it reads."""
    (sh, sw), (oh, ow) = win.strides, win.out_hw
    return [
        (i * k_hw[1] + j, slice(i, i + (oh - 1) * sh + 1, sh), slice(j, j + (ow - 1) * sw + 1, sw))
        for i in range(k_hw[0])
        for j in range(k_hw[1])
    ]


def _valid_counts(shape: tuple[int, ...], k_hw: tuple[int, int], win: _Window, dtype: np.dtype) -> np.ndarray:
    """How many real (not padded) elements each window covers, shape (out_h, out_w, 1)."""
    counts = []
    for size, k, s, before, n in zip(shape[1:3], k_hw, win.strides, win.pads[::2], win.out_hw):
        start = np.arange(n) * s - before
        counts.append(np.minimum(start + k, size) - np.maximum(start, 0))
    return np.multiply.outer(counts[0], counts[1]).astype(dtype)[:, :, None]


def _avg_pool(x: np.ndarray, ksize: tuple[int, int], win: _Window) -> np.ndarray:
    xp = _pad(x, win.pads)
    total = None
    for _, rows, cols in _window_offsets(ksize, win):
        total = xp[:, rows, cols].copy() if total is None else np.add(total, xp[:, rows, cols], out=total)
    return total / _valid_counts(x.shape, ksize, win, x.dtype)


def _avg_pool_grad(
    dy: np.ndarray, input_shape: tuple[int, ...], ksize: tuple[int, int], win: _Window
) -> np.ndarray:
    share = dy / _valid_counts(input_shape, ksize, win, dy.dtype)
    top, bottom, left, right = win.pads
    n, h, w, c = input_shape
    out = np.zeros((n, h + top + bottom, w + left + right, c), dy.dtype)
    for _, rows, cols in _window_offsets(ksize, win):
        out[:, rows, cols] += share
    return out[:, top : top + h, left : left + w]


_AVG_POOL = OpDef("AvgPool", _avg_pool, save="")
_AVG_POOL_GRAD = OpDef("AvgPoolGrad", _avg_pool_grad, save="")


def avg_pool2d(input: Any, ksize: Any, strides: Any, padding: str, data_format: str = "NHWC") -> Tensor:
    """The mean over each ``ksize`` window of NHWC images.

    With ``"SAME"`` padding a window is averaged over its real elements only (the padding
    is not counted), as in TensorFlow. ``ksize`` and ``strides`` are an int or a list of
    1, 2 or 4 ints; ``padding`` is ``"SAME"`` or ``"VALID"`` (lower case accepted too).
    """
    x = _float_tensor(input, "avg_pool2d", "input")
    win = _pool_window("avg_pool2d", x, ksize, strides, padding, data_format)
    return execute(_AVG_POOL, (x,), {"ksize": _hw(ksize, "avg_pool2d", "ksize"), "win": win})


# Average pooling is linear; AvgPoolGrad is its adjoint, so each is the other's gradient.
@register_gradient("AvgPool")
def _avg_pool_grad_fn(op: Op, dy: Tensor) -> Tensor:
    attrs = {"input_shape": op.input_shapes[0], "ksize": op.attrs["ksize"], "win": op.attrs["win"]}
    return execute(_AVG_POOL_GRAD, (dy,), attrs)


@register_gradient("AvgPoolGrad")
def _avg_pool_grad_grad(op: Op, ddx: Tensor) -> Tensor:
    return execute(_AVG_POOL, (ddx,), {"ksize": op.attrs["ksize"], "win": op.attrs["win"]})


def _max_pool_indices(x: np.ndarray, ksize: tuple[int, int], win: _Window) -> np.ndarray:
    """The flat index into ``x`` of each window's maximum (the first one on ties)."""
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = _pad(x, win.pads, low)
    parts = [xp[:, rows, cols] for _, rows, cols in _window_offsets(ksize, win)]
    best = parts[0]
    for part in parts[1:]:
        best = np.maximum(best, part)
    # Which tap holds the maximum: going backwards, so the first tap wins ties.
    # (tap = where(hit, k, tap) in arithmetic: np.where/copyto on a random mask are ~5x slower)
    tap = np.zeros(best.shape, np.int8 if len(parts) < 128 else np.intp)
    for k in range(len(parts) - 1, 0, -1):
        hit = (parts[k] == best).astype(tap.dtype)
        tap *= 1 - hit
        tap += hit * k
    n, h, w, c = x.shape
    top, bottom, left, right = win.pads
    (sh, sw), (oh, ow) = win.strides, win.out_hw
    tap_row, tap_col = np.divmod(np.arange(len(parts)), ksize[1])
    if not (top or bottom or left or right):
        # index = window corner + tap offset, the corner built from small broadcast pieces
        corner = (np.arange(n)[:, None, None] * h + np.arange(oh)[:, None] * sh) * w + np.arange(ow) * sw
        return (corner[..., None] * c + np.arange(c)) + ((tap_row * w + tap_col) * c)[tap]
    # A window whose real elements are all -inf may pick a padded tap; its neighbour inside holds -inf too.
    rows = np.clip(np.arange(oh)[:, None, None] * sh + tap_row[tap] - top, 0, h - 1)
    cols = np.clip(np.arange(ow)[:, None] * sw + tap_col[tap] - left, 0, w - 1)
    return ((np.arange(n)[:, None, None, None] * h + rows) * w + cols) * c + np.arange(c)


def max_pool2d(input: Any, ksize: Any, strides: Any, padding: str, data_format: str = "NHWC") -> Tensor:
    """The maximum over each ``ksize`` window of NHWC images.

    ``"SAME"`` padding never wins a window. ``ksize`` and ``strides`` are an int or a
    list of 1, 2 or 4 ints; ``padding`` is ``"SAME"`` or ``"VALID"`` (lower case accepted
    too). The gradient goes to the first maximal element of each window, as TensorFlow's does.
    """
    x = as_tensor(input)
    if x.dtype.kind not in "fiu":
        raise TypeError(f"max_pool2d: input must be a numeric tensor, got {x.dtype.name}")
    win = _pool_window("max_pool2d", x, ksize, strides, padding, data_format)
    # The argmax positions come from an op (not differentiable), so that tp.function computes
    # them from each call's input. A gather there: its gradient is the scatter back, whose
    # gradient is the gather.
    index = execute(_MAX_POOL_INDICES, (x,), {"ksize": _hw(ksize, "max_pool2d", "ksize"), "win": win})
    return gather(reshape(x, [-1]), index)


_MAX_POOL_INDICES = OpDef("MaxPoolIndices", _max_pool_indices, save="")
not_differentiable("MaxPoolIndices")


__all__ = [
    "avg_pool2d",
    "conv2d",
    "conv2d_transpose",
    "depthwise_conv2d",
    "dropout",
    "elu",
    "erf",
    "gelu",
    "leaky_relu",
    "log_softmax",
    "max_pool2d",
    "relu",
    "sigmoid",
    "sigmoid_cross_entropy_with_logits",
    "softmax",
    "softmax_cross_entropy_with_logits",
    "softplus",
    "sparse_softmax_cross_entropy_with_logits",
    "tanh",
]
